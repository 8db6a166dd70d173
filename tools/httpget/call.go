package httpget

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/portcullis/portcullis/backends/egress"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// DefaultUserAgent is sent unless the caller sets user-agent.
const DefaultUserAgent = "Portcullis-http.get/1"

// responseHeaders are the response headers returned; the rest (set-cookie,
// server internals) never reach the caller or evidence.
var responseHeaders = []string{"content-type", "content-length", "etag", "last-modified", "cache-control", "location"}

// call is one prepared http.get request.
type call struct {
	tool *Tool
	in   *input

	// Set by Enforce: the address checked for the first hop.
	enforced bool
	pinned   netip.AddrPort
}

var _ tools.Call = (*call)(nil)

func (c *call) Args() map[string]any { return c.in.args }

// Resolved holds the parsed URL for policy rules: scheme, host (lower
// case, IP literals normalized), port (default 80/443 filled in), path,
// query and the normalized url. No addresses: resolving here would send an
// attacker-chosen name to DNS before the policy has seen it.
func (c *call) Resolved() map[string]any {
	t := c.in.target
	return map[string]any{
		"scheme": t.scheme,
		"host":   t.host,
		"port":   t.port,
		"path":   t.url.EscapedPath(),
		"query":  t.url.RawQuery,
		"url":    t.url.String(),
	}
}

// Enforce checks the first hop under the decision's posture and pins the
// address it checked.
func (c *call) Enforce(ctx context.Context, d wire.Decision) (wire.Scope, error) {
	if !d.Allow {
		return wire.Scope{}, wire.Errorf(wire.CodePermissionDenied, "the policy denied this call")
	}
	network := d.Network
	if network.Posture == "" {
		network.Posture = wire.PostureOff
	}
	if network.Allow == nil {
		network.Allow = []string{}
	}
	if d.Limits.TimeoutS < 0 || d.Limits.MaxOutputBytes < 0 {
		return wire.Scope{}, wire.Errorf(wire.CodeInternal, "the policy returned a negative limit; limits must be zero (default) or positive")
	}
	addr, err := c.tool.check(ctx, network, c.in.target, "url")
	if err != nil {
		return wire.Scope{}, err
	}
	limits := wire.Limits{TimeoutS: c.in.timeoutS, MaxOutputBytes: c.in.maxBytes}
	if d.Limits.TimeoutS > 0 {
		limits.TimeoutS = min(limits.TimeoutS, d.Limits.TimeoutS)
	}
	if d.Limits.MaxOutputBytes > 0 {
		limits.MaxOutputBytes = min(limits.MaxOutputBytes, d.Limits.MaxOutputBytes)
	}
	c.pinned = addr
	c.enforced = true
	return wire.Scope{
		FSGrants: []wire.FSGrant{},
		Network:  network,
		EnvNames: []string{},
		Limits:   limits,
		Backend:  Backend,
	}, nil
}

// check decides one hop: posture off refuses; allowlist needs host:port
// on the list before any lookup (egress.Allowlist.Resolve); full allows any
// public address. Private, loopback and link-local addresses need a CIDR
// entry; metadata addresses are refused whatever the list says. It returns
// the one address to dial.
func (t *Tool) check(ctx context.Context, n wire.Network, tg target, field string) (netip.AddrPort, error) {
	deny := func(format string, a ...any) (netip.AddrPort, error) {
		return netip.AddrPort{}, &wire.Error{
			Code:    wire.CodeNetworkDenied,
			Message: fmt.Sprintf(format, a...),
			Details: map[string]any{"field": field, "host": tg.hostPort(), "url": tg.url.String()},
		}
	}
	al, err := egress.ParseAllowlist(n.Allow)
	if err != nil {
		return deny("the policy's network allowlist is malformed (%v); refusing rather than guess", err)
	}
	res := t.res
	if tools.IsDryRun(ctx) {
		res = noLookup{}
	}
	var addr netip.AddrPort
	switch n.Posture {
	case wire.PostureAllowlist:
		addr, err = al.Resolve(ctx, res, tg.host, tg.port)
		if errors.Is(err, egress.ErrDenied) {
			return deny("%s is not allowed by the network policy: %v", tg.hostPort(), err)
		}
	case wire.PostureFull:
		addr, err = resolvePublic(ctx, res, al, tg)
		if errors.Is(err, egress.ErrDenied) {
			return deny("%s is refused: %v", tg.hostPort(), err)
		}
	case wire.PostureOff:
		return deny("the network posture is off for this call; the policy grants no network access")
	default:
		return deny("unknown network posture %q; refusing", n.Posture)
	}
	if errors.Is(err, errNoLookup) {
		// A dry run: the name passed every check made before a lookup;
		// what it resolves to is decided only when the call is made.
		return netip.AddrPort{}, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return netip.AddrPort{}, &wire.Error{Code: wire.CodeTimeout, Message: fmt.Sprintf("resolving %s did not finish in time", tg.host), Details: map[string]any{"field": field, "host": tg.hostPort()}}
		}
		return netip.AddrPort{}, &wire.Error{Code: wire.CodeBackendUnavailable, Message: fmt.Sprintf("resolving %s failed (%s)", tg.host, netFailure(err)), Details: map[string]any{"field": field, "host": tg.hostPort()},
			Op: "httpget: resolve", Err: err}
	}
	if egress.Metadata(addr.Addr()) {
		return deny("%s resolves to the cloud metadata address %s, which is never reachable from a tool", tg.hostPort(), addr.Addr())
	}
	return addr, nil
}

// errNoLookup is noLookup's answer.
var errNoLookup = errors.New("httpget: no DNS lookup in a dry run")

// noLookup is the resolver of a dry run: it never sends a query.
type noLookup struct{}

func (noLookup) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return nil, errNoLookup
}

// resolvePublic is posture full: any name, but only public addresses
// unless a CIDR entry grants a private one.
func resolvePublic(ctx context.Context, res egress.Resolver, al *egress.Allowlist, tg target) (netip.AddrPort, error) {
	ok := func(ip netip.Addr) bool {
		return al.Reachable(ip, tg.port)
	}
	if tg.ip.IsValid() {
		if !ok(tg.ip) {
			return netip.AddrPort{}, fmt.Errorf("%w: %s is not a public address and no CIDR entry grants it", egress.ErrDenied, tg.ip)
		}
		return netip.AddrPortFrom(tg.ip, uint16(tg.port)), nil
	}
	if res == nil {
		res = net.DefaultResolver
	}
	addrs, err := res.LookupNetIP(ctx, "ip", tg.host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("httpget: resolving %s: %w", tg.host, err)
	}
	var refused []string
	for _, ip := range addrs {
		ip = ip.Unmap().WithZone("")
		if ok(ip) {
			return netip.AddrPortFrom(ip, uint16(tg.port)), nil
		}
		refused = append(refused, ip.String())
	}
	return netip.AddrPort{}, fmt.Errorf("%w: %s resolves only to non-public addresses %v that no CIDR entry grants", egress.ErrDenied, tg.host, refused)
}

// Data is http.get's output.data. OutputSHA256 is over its JSON encoding.
type Data struct {
	Status    int               `json:"status"`
	Headers   map[string]string `json:"headers"`
	Body      string            `json:"body"`
	Encoding  string            `json:"encoding"` // "utf-8" or "base64"
	Truncated bool              `json:"truncated"`
	Bytes     int               `json:"bytes"` // body bytes returned (before base64)
	URL       string            `json:"url"`   // the final URL, after redirects
	Redirects []string          `json:"redirects"`
	// Hops are the redirects followed, each a governed call of its own.
	Hops []Hop `json:"hops"`
	// Address is the IP:port the final hop really connected to.
	Address string `json:"address"`
}

// Hop is one redirect followed: the URL, the receipt of the call that
// fetched it, and the HTTP status it answered (0 when it was refused).
type Hop struct {
	URL       string `json:"url"`
	ReceiptID string `json:"receipt_id"`
	Status    int    `json:"status"`
}

// Run fetches within scope. An HTTP status of 400 or more is a failed call
// with data (the server answered); a refused redirect fails with the hop's
// own code (network_denied, permission_denied ...); a connection or TLS
// failure is backend_unavailable; the deadline is timeout.
//
// This call fetches only its own URL, at the address Enforce checked. A
// redirect is followed, when follow_redirects allows, by handing its
// Location back to the pipeline as a call of its own (see follow).
func (c *call) Run(ctx context.Context, scope wire.Scope) tools.Result {
	start := time.Now()
	stats := &wire.NetworkStats{Allowed: []string{}, Refused: []string{}}
	fail := func(status string, e *wire.Error) tools.Result {
		return tools.Timed(tools.Result{
			Output: wire.ToolOutput{
				Error:    e,
				Metadata: map[string]any{"backend": Backend, "network": stats},
			},
			Status:  status,
			Backend: Backend,
			Network: stats,
		}, time.Since(start).Milliseconds())
	}
	if !c.enforced || !c.pinned.IsValid() || scope.Limits.TimeoutS <= 0 || scope.Limits.MaxOutputBytes <= 0 {
		return fail(wire.StatusError, wire.Errorf(wire.CodeInternal, "http.get was run before its scope was enforced"))
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(scope.Limits.TimeoutS)*time.Second)
	defer cancel()

	cur, addr := c.in.target, c.pinned
	stats.Connections++
	addOnce(&stats.Allowed, cur.hostPort())
	resp, err := c.tool.fetch(ctx, cur, addr, c.in.headers)
	if err != nil {
		if ctx.Err() != nil {
			return fail(wire.StatusTimedOut, &wire.Error{Code: wire.CodeTimeout, Message: fmt.Sprintf("fetching %s did not finish within %d s; raise timeout_s (at most %d, and the policy's limit)", cur.url, scope.Limits.TimeoutS, MaxTimeoutS), Details: map[string]any{"field": "timeout_s", "url": cur.url.String()}})
		}
		return fail(wire.StatusError, &wire.Error{Code: wire.CodeBackendUnavailable, Message: fmt.Sprintf("fetching %s (%s) failed (%s)", cur.url, addr, netFailure(err)), Details: map[string]any{"field": "url", "url": cur.url.String(), "address": addr.String()},
			Op: "httpget: fetch", Err: err})
	}
	loc := resp.Header.Get("Location")
	if !c.in.follow || !isRedirect(resp.StatusCode) || loc == "" {
		return c.finish(ctx, resp, cur, addr, scope, stats, start)
	}
	resp.Body.Close()
	return c.follow(ctx, scope, loc, stats, start, fail)
}

// follow follows the redirect chain that starts at loc. Each hop is
// dispatched through the pipeline (tools.DispatcherFrom) as http.get
// with follow_redirects false and this call's headers, byte cap and
// remaining time: the policy decides it with purpose "call" like any direct
// call, Enforce checks and pins its address, and it gets its own receipt
// with this call's as parent. A hop the policy or posture refuses ends the
// chain with that hop's error; the hop's receipt records why. Without a
// dispatcher (a tool used outside the gateway) no redirect is followed.
func (c *call) follow(ctx context.Context, scope wire.Scope, loc string, stats *wire.NetworkStats, start time.Time, fail func(string, *wire.Error) tools.Result) tools.Result {
	disp, ok := tools.DispatcherFrom(ctx)
	cur := c.in.target
	redirects, hops := []string{}, []Hop{}
	for n := 1; ; n++ {
		if n > MaxRedirects {
			return fail(wire.StatusFailed, &wire.Error{Code: wire.CodeBackendUnavailable, Message: fmt.Sprintf("more than %d redirects; the last one pointed to %s", MaxRedirects, loc), Details: map[string]any{"field": "url", "redirects": redirects, "hops": hops}})
		}
		next, err := resolveLocation(cur, loc)
		if err != nil {
			return fail(wire.StatusFailed, &wire.Error{Code: wire.CodeNetworkDenied, Message: fmt.Sprintf("redirect %d from %s points to %q, which is not a fetchable http(s) URL", n, cur.url, loc), Details: map[string]any{"field": "url", "location": loc, "redirects": redirects, "hops": hops}})
		}
		redirects = append(redirects, next.url.String())
		if !ok {
			return fail(wire.StatusFailed, &wire.Error{Code: wire.CodeNetworkDenied, Message: fmt.Sprintf("redirect %d to %s was not followed: this gateway cannot decide redirect hops here", n, next.url), Details: map[string]any{"field": "url", "redirects": redirects, "hops": hops}})
		}
		deadline, _ := ctx.Deadline()
		left := time.Until(deadline)
		timedOut := func() tools.Result {
			return fail(wire.StatusTimedOut, &wire.Error{Code: wire.CodeTimeout, Message: fmt.Sprintf("following the redirects of %s did not finish within %d s; raise timeout_s (at most %d, and the policy's limit)", c.in.target.url, scope.Limits.TimeoutS, MaxTimeoutS), Details: map[string]any{"field": "timeout_s", "redirects": redirects, "hops": hops}})
		}
		if left < time.Second/2 || ctx.Err() != nil {
			return timedOut()
		}
		in := map[string]any{
			"url": next.url.String(), "headers": c.in.headers, "follow_redirects": false,
			"max_bytes": scope.Limits.MaxOutputBytes, "timeout_s": max(1, int(left/time.Second)),
		}
		raw, err := json.Marshal(in)
		if err != nil {
			return fail(wire.StatusError, wire.Wrap(wire.CodeInternal, "httpget: encode hop", err, "encoding redirect hop %d failed", n))
		}
		_, resp := disp.Dispatch(ctx, ToolName, raw)
		hop := Hop{URL: next.url.String(), ReceiptID: resp.ReceiptID}
		stats.Connections++
		if we := resp.Output.Error; we != nil {
			hops = append(hops, hop)
			if ctx.Err() != nil && we.Code != wire.CodeNetworkDenied && we.Code != wire.CodePermissionDenied {
				return timedOut()
			}
			addOnce(&stats.Refused, next.hostPort())
			if stats.Denials == nil {
				stats.Denials = map[string]string{}
			}
			stats.Denials[next.hostPort()] = we.Message
			details := map[string]any{"field": "url", "redirects": redirects, "hops": hops, "hop_receipt_id": resp.ReceiptID}
			status := wire.StatusFailed
			if we.Code == wire.CodeTimeout {
				status = wire.StatusTimedOut
			}
			return fail(status, &wire.Error{Code: we.Code, Message: fmt.Sprintf("redirect %d to %s refused: %s", n, next.url, we.Message), Details: details})
		}
		data, derr := hopData(resp.Output.Data)
		if derr != nil {
			return fail(wire.StatusError, wire.Wrap(wire.CodeInternal, "httpget: redirect hop", derr, "redirect hop %d answered no http.get data", n))
		}
		hop.Status = data.Status
		hops = append(hops, hop)
		addOnce(&stats.Allowed, next.hostPort())
		if l := data.Headers["location"]; isRedirect(data.Status) && l != "" {
			cur, loc = next, l
			continue
		}
		// The last hop's answer is this call's answer.
		stats.BytesIn += int64(data.Bytes)
		data.Redirects, data.Hops = redirects, hops
		return c.result(ctx, data, scope, stats, start)
	}
}

// hopData reads a hop's output.data: Data itself in process, or its JSON
// form from a dispatcher that encodes.
func hopData(v any) (Data, error) {
	switch d := v.(type) {
	case Data:
		return d, nil
	case *Data:
		if d != nil {
			return *d, nil
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return Data{}, err
	}
	var d Data
	if err := json.Unmarshal(b, &d); err != nil || d.Status == 0 {
		return Data{}, fmt.Errorf("unexpected data %.200s", b)
	}
	return d, nil
}

// finish reads the capped body and builds the result.
func (c *call) finish(ctx context.Context, resp *http.Response, cur target, addr netip.AddrPort, scope wire.Scope, stats *wire.NetworkStats, start time.Time) tools.Result {
	defer resp.Body.Close()
	limit := scope.Limits.MaxOutputBytes
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil && ctx.Err() != nil {
		return tools.Timed(tools.Result{
			Output: wire.ToolOutput{
				Error:    &wire.Error{Code: wire.CodeTimeout, Message: fmt.Sprintf("reading the body of %s did not finish within %d s", cur.url, scope.Limits.TimeoutS), Details: map[string]any{"field": "timeout_s"}},
				Metadata: map[string]any{"backend": Backend, "network": stats},
			},
			Status: wire.StatusTimedOut, Backend: Backend, Network: stats,
		}, time.Since(start).Milliseconds())
	}
	truncated := len(body) > limit || (err != nil)
	if len(body) > limit {
		body = body[:limit]
	}
	stats.BytesIn += int64(len(body))
	data := Data{
		Status:    resp.StatusCode,
		Headers:   map[string]string{},
		Truncated: truncated,
		Bytes:     len(body),
		URL:       cur.url.String(),
		Redirects: []string{},
		Hops:      []Hop{},
		Address:   addr.String(),
	}
	for _, h := range responseHeaders {
		if v := resp.Header.Get(h); v != "" {
			data.Headers[h] = v
		}
	}
	data.Body, data.Encoding = encodeBody(body, resp.Header.Get("Content-Type"), truncated)
	return c.result(ctx, data, scope, stats, start)
}

// result is the call's answer with data: success below HTTP 400.
func (c *call) result(ctx context.Context, data Data, scope wire.Scope, stats *wire.NetworkStats, start time.Time) tools.Result {
	sum, err := json.Marshal(data)
	if err != nil {
		return tools.Result{Output: wire.ToolOutput{Error: wire.Wrap(wire.CodeInternal, "httpget: encode output", err, "encoding the output failed"), Metadata: map[string]any{"backend": Backend}}, Status: wire.StatusError, Backend: Backend}
	}
	digest := sha256.Sum256(sum)
	out := tools.Result{
		Output: wire.ToolOutput{
			Success:  data.Status < 400,
			Data:     data,
			Metadata: map[string]any{"backend": Backend, "network": stats},
		},
		Status:       wire.StatusSucceeded,
		OutputSHA256: hex.EncodeToString(digest[:]),
		Backend:      Backend,
		Network:      stats,
	}
	out.SetDuration(time.Since(start).Milliseconds())
	if data.Status >= 400 {
		out.Status = wire.StatusFailed
	}
	c.tool.log.DebugContext(ctx, "httpget: fetched", "host", c.in.target.hostPort(), "address", data.Address, "status", data.Status, "bytes", data.Bytes, "redirects", len(data.Redirects))
	return out
}

// fetch makes one request, dialing exactly addr whatever name the URL
// holds; TLS still verifies the certificate against the URL's host (SNI
// and verification use tg.host). No proxy from the gateway's environment,
// no keep-alive, no transparent decompression.
func (t *Tool) fetch(ctx context.Context, tg target, addr netip.AddrPort, headers map[string]string) (*http.Response, error) {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "tcp", addr.String())
		},
		TLSClientConfig:        &tls.Config{ServerName: tg.host, RootCAs: t.rootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    10 * time.Second,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tg.url.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("httpget: building the request: %w", err)
	}
	req.Header.Set("User-Agent", DefaultUserAgent)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// url.Error names the whole URL; its query may hold the
			// caller's credential, and this cause is logged.
			shown := *tg.url
			if shown.RawQuery != "" {
				shown.RawQuery = "REDACTED"
			}
			shown.Fragment, shown.RawFragment = "", ""
			return nil, fmt.Errorf("httpget: GET %s: %w", shown.Redacted(), ue.Err)
		}
		return nil, fmt.Errorf("httpget: %w", err)
	}
	return resp, nil
}

func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// resolveLocation turns a Location header into the next hop, through the
// same parser as the caller's URL.
func resolveLocation(cur target, loc string) (target, error) {
	u, err := cur.url.Parse(loc)
	if err != nil {
		return target{}, fmt.Errorf("httpget: location %q: %w", loc, err)
	}
	return parseTarget(u.String(), "url")
}

// encodeBody returns text for textual UTF-8 bodies and base64 otherwise. A
// body cut at the cap may end inside a character; that partial character
// is dropped rather than forcing base64.
func encodeBody(b []byte, contentType string, truncated bool) (string, string) {
	text := b
	if truncated {
		for i := 0; i < utf8.UTFMax && len(text) > 0; i++ {
			r, size := utf8.DecodeLastRune(text)
			if r != utf8.RuneError || size != 1 {
				break
			}
			text = text[:len(text)-1]
		}
		if !utf8.Valid(text) {
			text = b
		}
	}
	if textual(contentType) && utf8.Valid(text) && !slices.Contains(text, 0) {
		return string(text), "utf-8"
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// textual reports whether a Content-Type names text; an absent one is
// judged by the bytes alone.
func textual(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"), strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"):
		return true
	}
	switch mt {
	case "application/json", "application/xml", "application/javascript", "application/x-javascript",
		"application/ecmascript", "application/x-www-form-urlencoded", "application/yaml", "application/x-yaml", "application/toml":
		return true
	}
	return false
}

func addOnce(list *[]string, s string) {
	if !slices.Contains(*list, s) {
		*list = append(*list, s)
	}
}

// netFailure says what kind of network failure err is, in words safe to
// send: never the error's text, which names the gateway's resolver, proxy
// and local addresses (the cause is logged instead).
func netFailure(err error) string {
	var dns *net.DNSError
	var cert *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		return "no such host"
	case errors.As(err, &dns) && dns.IsTimeout, errors.Is(err, os.ErrDeadlineExceeded):
		return "timed out"
	case errors.As(err, &dns):
		return "the name could not be resolved"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection was closed by the server"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "the address is unreachable"
	case errors.As(err, &cert):
		return "the server's TLS certificate was not accepted"
	case errors.As(err, &rec):
		return "the server did not speak TLS"
	}
	return "network error"
}
