package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"

	"github.com/portcullis/portcullis/backends/egress"
	"github.com/portcullis/portcullis/wire"
)

// ErrLaunchRefused is a stdio server's launch the policy did not allow.
var ErrLaunchRefused = errors.New("launch refused by policy")

// Launch is what the policy decided for a stdio server's launch (purpose
// "launch", tool "<upstream>"), already recorded as a receipt.
type Launch struct {
	Scope     wire.Scope
	Env       map[string]string // the decision's env.set
	ReceiptID string
}

// Authorizer decides and records a stdio server's launch: the policy is
// asked with purpose "launch" and tool "<upstream>", and a receipt is
// durable before the server starts. memoryLimit is how the sandbox will
// bound the decision's memory_bytes (wire.MemoryLimitCgroup or
// wire.MemoryLimitRlimitData; "" when it does not say), recorded in the
// enforced scope, which the sandbox then applies exactly. A denied launch
// returns an error wrapping ErrLaunchRefused.
type Authorizer interface {
	AuthorizeLaunch(ctx context.Context, upstream string, resolved map[string]any, memoryLimit string) (Launch, error)
}

// memoryLimiter is a Sandbox that says how it bounds memory_bytes (the
// bwrap runner).
type memoryLimiter interface {
	MemoryLimit() string
}

// Sandbox starts a long-running program confined to scope: the runner's
// mount layout, namespaces and limits, with stdin and stdout left to the
// caller. The returned func releases what the command holds once it has
// exited.
type Sandbox interface {
	Name() string
	Command(ctx context.Context, argv, env []string, scope wire.Scope) (*exec.Cmd, func(), error)
}

// baseEnv is the stdio server's environment before the launch decision's
// env, the spec's env and its secrets: the gateway's own never leaks.
var baseEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "TERM=dumb"}

// transport is the connection to the upstream: a stdio server launched
// under the policy's launch scope, or the Streamable HTTP endpoint.
func (c *conn) transport(ctx context.Context) (mcp.Transport, func(), error) {
	if c.spec.Transport() == TransportHTTP {
		hc, err := c.httpClient()
		if err != nil {
			return nil, nil, err
		}
		return &mcp.StreamableClientTransport{Endpoint: c.spec.URL, HTTPClient: hc, MaxRetries: 2,
			MaxEventSize: maxMessageBytes}, func() {}, nil
	}
	return c.launch(ctx)
}

// launch asks the policy for the server's launch scope (a receipt), and
// builds the sandboxed command with the secrets in its environment.
func (c *conn) launch(ctx context.Context) (mcp.Transport, func(), error) {
	if c.m.auth == nil || c.m.opts.Sandbox == nil {
		return nil, nil, errors.New("no sandbox to launch stdio servers in (sandbox.backend bwrap is required)")
	}
	memoryLimit := ""
	if ml, ok := c.m.opts.Sandbox.(memoryLimiter); ok {
		memoryLimit = ml.MemoryLimit()
	}
	l, err := c.m.auth.AuthorizeLaunch(ctx, c.spec.Name, map[string]any{"upstream": map[string]any{
		"name": c.spec.Name, "transport": TransportStdio, "command": slices.Clone(c.spec.Command),
	}}, memoryLimit)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	c.launchID = l.ReceiptID
	c.mu.Unlock()
	env := slices.Clone(baseEnv)
	for _, k := range slices.Sorted(maps.Keys(l.Env)) {
		env = setEnv(env, k, l.Env[k])
	}
	for _, k := range slices.Sorted(maps.Keys(c.spec.Env)) {
		env = setEnv(env, k, c.spec.Env[k])
	}
	for _, k := range slices.Sorted(maps.Keys(c.spec.Secrets)) {
		v, err := c.m.secret(c.spec.Secrets[k])
		if err != nil {
			return nil, nil, fmt.Errorf("secrets.%s: %w", k, err)
		}
		env = setEnv(env, k, v)
	}
	cmd, release, err := c.m.opts.Sandbox.Command(ctx, c.spec.Command, env, l.Scope)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	// The server's stderr goes to the gateway's log, line by line, with
	// the secrets' values masked; never to an agent.
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	go c.logStderr(pr)
	return &stdioTransport{c: c, cmd: cmd}, func() {
		_ = pw.Close()
		release()
	}, nil
}

func (c *conn) logStderr(r io.Reader) {
	logLines(r, rate.NewLimiter(stderrLinesPerSecond, stderrBurst), time.Now, stderrSummaryEvery,
		func(line string) {
			c.m.log.Info("upstream stderr", "upstream", c.spec.Name, "line", truncate(c.m.redact(line), maxStderrLine))
		},
		func(n int) {
			c.m.log.Warn("upstream stderr: lines suppressed", "upstream", c.spec.Name, "suppressed", n)
		})
}

func setEnv(env []string, k, v string) []string {
	out := slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	return append(out, k+"="+v)
}

// httpClient reaches the http upstream through the egress checks: its host
// is the only allowed name, resolved before any connection and dialled at
// the address that was checked; private and loopback addresses only where
// the spec's allow_networks grants them. The headers (secrets resolved at
// each request) are set by the transport, never seen by a caller.
func (c *conn) httpClient() (*http.Client, error) {
	u, err := url.Parse(c.spec.URL)
	if err != nil {
		return nil, err
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	host := u.Hostname()
	entries := append([]string{net.JoinHostPort(host, port)}, c.spec.AllowNetworks...)
	if ip, err := netip.ParseAddr(host); err == nil && egress.Special(ip.Unmap()) {
		entries = entries[1:] // a private or loopback literal: only allow_networks grants it
	}
	al, err := egress.ParseAllowlist(entries)
	if err != nil {
		return nil, fmt.Errorf("egress allowlist: %w", err)
	}
	wantPort, _ := strconv.Atoi(port)
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			h, p, err := net.SplitHostPort(addr)
			if err != nil || !strings.EqualFold(h, host) || p != port {
				return nil, fmt.Errorf("%w: %s is not the upstream's address", egress.ErrDenied, addr)
			}
			ap, err := al.Resolve(ctx, c.m.opts.Resolver, host, wantPort)
			if err != nil {
				return nil, err
			}
			return dialer.DialContext(ctx, "tcp", ap.String())
		},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: c.timeout(),
		MaxIdleConnsPerHost:   16,
	}
	return &http.Client{Transport: &boundTransport{c: c, next: &headerTransport{c: c, next: tr}}, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse // never follow a redirect off the upstream
	}}, nil
}

// headerTransport sets the spec's headers on every request to the upstream.
type headerTransport struct {
	c    *conn
	next http.RoundTripper
}

func (h *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for _, k := range slices.Sorted(maps.Keys(h.c.spec.Headers)) {
		hd := h.c.spec.Headers[k]
		v := hd.Value
		if hd.Secret != nil {
			s, err := h.c.m.secret(*hd.Secret)
			if err != nil {
				return nil, fmt.Errorf("headers.%s: %w", k, err)
			}
			v = hd.Prefix + s
		}
		req.Header.Set(k, v)
	}
	return h.next.RoundTrip(req)
}
