package httpget

import (
	"encoding/json"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/portcullis/portcullis/backends/egress"
	"github.com/portcullis/portcullis/tools/internal/strictjson"
)

// Input bounds.
const (
	DefaultMaxBytes = 1 << 20
	MaxMaxBytes     = 16 << 20
	DefaultTimeoutS = 30
	MaxTimeoutS     = 120
	MaxURLBytes     = 8192
	MaxHeaderBytes  = 1024
	MaxRedirects    = 5
)

// allowedHeaders are the request headers a caller may set. Credentials
// (authorization, cookie) and anything that changes what is fetched or how
// (host, range, proxy-*, x-forwarded-*) are refused: a tool call must not
// carry secrets that evidence would then have to hold.
var allowedHeaders = []string{"accept", "accept-language", "user-agent"}

// target is one parsed, checked-syntax URL.
type target struct {
	url    *url.URL
	scheme string
	host   string // lower case, no brackets, no trailing dot
	port   int
	ip     netip.Addr // valid when host is an IP literal
}

type input struct {
	args     map[string]any
	target   target
	headers  map[string]string // lower-case names
	maxBytes int
	timeoutS int
	// follow is follow_redirects: true (default) follows each redirect
	// as a governed call of its own; false returns the 3xx response.
	follow bool
}

func decodeInput(raw json.RawMessage) (*input, error) {
	obj, err := schema.Decode(raw)
	if err != nil {
		return nil, err
	}
	in := &input{maxBytes: DefaultMaxBytes, timeoutS: DefaultTimeoutS, headers: map[string]string{}, follow: true}
	v, ok := obj.Get("url")
	if !ok {
		return nil, strictjson.Invalid("url", "url is required: an absolute http:// or https:// URL")
	}
	s, err := strictjson.String(v, "url", MaxURLBytes)
	if err != nil {
		return nil, err
	}
	if in.target, err = parseTarget(s, "url"); err != nil {
		return nil, err
	}
	if v, ok := obj.Get("headers"); ok {
		h, err := strictjson.Decode(v, "headers")
		if err != nil {
			return nil, err
		}
		for _, k := range h.Keys {
			name := strings.ToLower(k)
			field := "headers." + k
			if !contains(allowedHeaders, name) {
				return nil, strictjson.Invalid(field, "request header %q is not accepted; only %s may be set (credentials such as authorization and cookie never are)", k, strings.Join(allowedHeaders, ", "))
			}
			if _, dup := in.headers[name]; dup {
				return nil, strictjson.Invalid(field, "header %q is given twice", k)
			}
			val, err := strictjson.String(h.Values[k], field, MaxHeaderBytes)
			if err != nil {
				return nil, err
			}
			if strings.ContainsAny(val, "\r\n") {
				return nil, strictjson.Invalid(field, "header %q contains a line break; header values are one line", k)
			}
			in.headers[name] = val
		}
	}
	if v, ok := obj.Get("max_bytes"); ok {
		if in.maxBytes, err = strictjson.Int(v, "max_bytes", 1, MaxMaxBytes); err != nil {
			return nil, err
		}
	}
	if v, ok := obj.Get("timeout_s"); ok {
		if in.timeoutS, err = strictjson.Int(v, "timeout_s", 1, MaxTimeoutS); err != nil {
			return nil, err
		}
	}
	if v, ok := obj.Get("follow_redirects"); ok {
		if err := json.Unmarshal(v, &in.follow); err != nil {
			return nil, strictjson.Invalid("follow_redirects", "follow_redirects must be true or false")
		}
	}
	if in.args, err = strictjson.Args(raw); err != nil {
		return nil, err
	}
	return in, nil
}

// parseTarget accepts an absolute http(s) URL with a host and no userinfo.
// It is used for the caller's URL and for every redirect Location, so a
// hop can never be something the caller could not have asked for directly.
func parseTarget(s, field string) (target, error) {
	const want = "an absolute http:// or https:// URL such as https://example.com/path"
	if strings.ContainsAny(s, " \t\r\n\x00\\") {
		return target{}, strictjson.Invalid(field, "%s contains whitespace, a backslash or a control character; send %s", field, want)
	}
	u, err := url.Parse(s)
	if err != nil {
		return target{}, strictjson.Invalid(field, "%s is not a valid URL (%v); send %s", field, err, want)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return target{}, strictjson.Invalid(field, "%s has scheme %q; only http and https are fetched", field, u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return target{}, strictjson.Invalid(field, "%s has no host; send %s", field, want)
	}
	if u.User != nil {
		return target{}, strictjson.Invalid(field, "%s carries user:password@ credentials; credentials are never sent", field)
	}
	host := u.Hostname()
	port := 80
	if scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return target{}, strictjson.Invalid(field, "%s has port %q; ports are 1-65535", field, p)
		}
		port = n
	}
	t := target{scheme: scheme, port: port}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return target{}, strictjson.Invalid(field, "%s has a zoned IPv6 address; zones are not accepted", field)
		}
		t.ip = ip.Unmap()
		t.host = t.ip.String()
	} else {
		t.host = strings.TrimSuffix(strings.ToLower(host), ".")
		if !egress.ValidName(t.host) {
			return target{}, strictjson.Invalid(field, "%s has host %q, which is not a valid DNS name or IP address", field, host)
		}
	}
	u.Scheme = scheme
	u.Fragment, u.RawFragment = "", ""
	t.url = u
	return t, nil
}

// hostPort is host:port as the allowlist and evidence name it.
func (t target) hostPort() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
