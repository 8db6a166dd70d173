package httpget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// fakeResolver answers from a map and records every name it was asked, so
// tests can prove that a refused name never reached DNS.
type fakeResolver struct {
	mu    sync.Mutex
	m     map[string][]netip.Addr
	asked []string
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	if a, ok := r.m[host]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

func (r *fakeResolver) lookups() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.asked...)
}

func loopback() []netip.Addr { return []netip.Addr{netip.MustParseAddr("127.0.0.1")} }

func newResolver() *fakeResolver {
	return &fakeResolver{m: map[string][]netip.Addr{
		"svc.test":        loopback(),
		"example.com":     loopback(),
		"public.test":     {netip.MustParseAddr("93.184.215.14")},
		"api.public.test": {netip.MustParseAddr("93.184.215.14")},
		"meta.test":       {netip.MustParseAddr("169.254.169.254")},
		"private.test":    {netip.MustParseAddr("10.1.2.3")},
	}}
}

func allow(posture string, entries ...string) wire.Decision {
	if entries == nil {
		entries = []string{}
	}
	return wire.Decision{Allow: true, Network: wire.Network{Posture: posture, Allow: entries}}
}

func prepare(t *testing.T, tool *Tool, in any) (*call, error) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tool.Prepare(context.Background(), b)
	if err != nil {
		return nil, err
	}
	return c.(*call), nil
}

func code(err error) (wire.Code, string) {
	var we *wire.Error
	if !errors.As(err, &we) {
		return "", ""
	}
	f, _ := we.Details["field"].(string)
	return we.Code, f
}

func TestDecodeInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		code     wire.Code
		field    string
	}{
		{"ok", `{"url":"https://Example.COM./a?b=1#frag"}`, "", ""},
		{"nulls are absent", `{"url":"http://x.test","headers":null,"max_bytes":null,"timeout_s":null}`, "", ""},
		{"missing url", `{}`, wire.CodeInvalidInput, "url"},
		{"not an object", `[1]`, wire.CodeInvalidInput, "input"},
		{"unknown field", `{"url":"http://x.test","method":"POST"}`, wire.CodeInvalidInput, "method"},
		{"duplicate key", `{"url":"http://x.test","url":"http://y.test"}`, wire.CodeInvalidInput, "url"},
		{"ftp", `{"url":"ftp://x.test/"}`, wire.CodeInvalidInput, "url"},
		{"file", `{"url":"file:///etc/passwd"}`, wire.CodeInvalidInput, "url"},
		{"relative", `{"url":"/etc/passwd"}`, wire.CodeInvalidInput, "url"},
		{"userinfo", `{"url":"http://u:p@x.test/"}`, wire.CodeInvalidInput, "url"},
		{"bad host", `{"url":"http://a%20b/"}`, wire.CodeInvalidInput, "url"},
		{"zoned v6", `{"url":"http://[fe80::1%25eth0]/"}`, wire.CodeInvalidInput, "url"},
		{"port 0", `{"url":"http://x.test:0/"}`, wire.CodeInvalidInput, "url"},
		{"backslash", `{"url":"http://x.test\\@evil.test/"}`, wire.CodeInvalidInput, "url"},
		{"authorization refused", `{"url":"http://x.test","headers":{"Authorization":"Bearer x"}}`, wire.CodeInvalidInput, "headers.Authorization"},
		{"cookie refused", `{"url":"http://x.test","headers":{"cookie":"a=b"}}`, wire.CodeInvalidInput, "headers.cookie"},
		{"host refused", `{"url":"http://x.test","headers":{"host":"evil.test"}}`, wire.CodeInvalidInput, "headers.host"},
		{"header CRLF", `{"url":"http://x.test","headers":{"accept":"a\r\nX-Evil: 1"}}`, wire.CodeInvalidInput, "headers.accept"},
		{"header twice", `{"url":"http://x.test","headers":{"accept":"a","Accept":"b"}}`, wire.CodeInvalidInput, "headers.Accept"},
		{"max_bytes 0", `{"url":"http://x.test","max_bytes":0}`, wire.CodeInvalidInput, "max_bytes"},
		{"max_bytes huge", `{"url":"http://x.test","max_bytes":16777217}`, wire.CodeInvalidInput, "max_bytes"},
		{"timeout fraction", `{"url":"http://x.test","timeout_s":1.5}`, wire.CodeInvalidInput, "timeout_s"},
		{"timeout too long", `{"url":"http://x.test","timeout_s":121}`, wire.CodeInvalidInput, "timeout_s"},
		{"url too long", `{"url":"http://x.test/` + strings.Repeat("a", MaxURLBytes) + `"}`, wire.CodeTooLarge, "url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(Options{}).Prepare(context.Background(), json.RawMessage(tc.in))
			c, f := code(err)
			if c != tc.code || f != tc.field {
				t.Fatalf("got %v (code %q field %q), want code %q field %q", err, c, f, tc.code, tc.field)
			}
		})
	}
}

func TestResolvedHasNoAddresses(t *testing.T) {
	t.Parallel()
	res := newResolver()
	c, err := prepare(t, New(Options{Resolver: res}), map[string]any{"url": "HTTPS://Svc.Test./p%20q?x=1#f"})
	if err != nil {
		t.Fatal(err)
	}
	got := c.Resolved()
	want := map[string]any{"scheme": "https", "host": "svc.test", "port": 443, "path": "/p%20q", "query": "x=1", "url": "https://Svc.Test./p%20q?x=1"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("resolved[%s] = %v, want %v", k, got[k], v)
		}
	}
	if n := len(res.lookups()); n != 0 {
		t.Errorf("Prepare/Resolved made %d DNS lookups; names must not reach DNS before policy", n)
	}
}

func TestEnforce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		url     string
		d       wire.Decision
		code    wire.Code
		addr    string
		lookups int
	}{
		{"posture off", "http://svc.test/", allow("off"), wire.CodeNetworkDenied, "", 0},
		{"posture missing", "http://svc.test/", wire.Decision{Allow: true}, wire.CodeNetworkDenied, "", 0},
		{"posture unknown", "http://svc.test/", allow("open"), wire.CodeNetworkDenied, "", 0},
		{"denied call", "http://svc.test/", wire.Decision{}, wire.CodePermissionDenied, "", 0},
		{"name not listed: no DNS", "http://evil.test/", allow("allowlist", "svc.test"), wire.CodeNetworkDenied, "", 0},
		{"wrong port: no DNS", "http://svc.test:8080/", allow("allowlist", "svc.test:80"), wire.CodeNetworkDenied, "", 0},
		{"listed name to loopback, no CIDR", "http://svc.test/", allow("allowlist", "svc.test"), wire.CodeNetworkDenied, "", 1},
		{"listed name to loopback, CIDR grant", "http://svc.test:8080/", allow("allowlist", "svc.test", "127.0.0.0/8"), "", "127.0.0.1:8080", 1},
		{"listed name to private, no CIDR", "http://private.test/", allow("allowlist", "private.test"), wire.CodeNetworkDenied, "", 1},
		{"listed public name", "https://api.public.test/", allow("allowlist", "*.public.test:443"), "", "93.184.215.14:443", 1},
		{"IP literal needs CIDR", "http://127.0.0.1/", allow("allowlist", "localhost"), wire.CodeNetworkDenied, "", 0},
		{"IP literal in CIDR", "http://127.0.0.1:9/", allow("allowlist", "127.0.0.0/8"), "", "127.0.0.1:9", 0},
		{"metadata literal even with CIDR", "http://169.254.169.254/latest/meta-data/", allow("allowlist", "169.254.0.0/16"), wire.CodeNetworkDenied, "", 0},
		{"metadata by name even with CIDR", "http://meta.test/", allow("allowlist", "meta.test", "169.254.0.0/16"), wire.CodeNetworkDenied, "", 1},
		{"metadata v6 under full", "http://[fd00:ec2::254]/", allow("full", "fd00::/8"), wire.CodeNetworkDenied, "", 0},
		{"mapped v4 loopback", "http://[::ffff:127.0.0.1]/", allow("full"), wire.CodeNetworkDenied, "", 0},
		{"v4-compatible metadata under full", "http://[::169.254.169.254]/", allow("full"), wire.CodeNetworkDenied, "", 0},
		{"v4-compatible loopback under full", "http://[::127.0.0.1]/", allow("full"), wire.CodeNetworkDenied, "", 0},
		{"NAT64 metadata under a NAT64 grant", "http://[64:ff9b::169.254.169.254]/", allow("full", "64:ff9b::/96"), wire.CodeNetworkDenied, "", 0},
		{"NAT64 private under a NAT64 grant", "http://[64:ff9b::10.0.0.1]/", allow("full", "64:ff9b::/96"), wire.CodeNetworkDenied, "", 0},
		{"NAT64 public under a NAT64 grant", "http://[64:ff9b::93.184.215.14]/", allow("full", "64:ff9b::/96"), "", "[64:ff9b::5db8:d70e]:80", 0},
		{"6to4 loopback under a 6to4 grant", "http://[2002:7f00:1::1]/", allow("full", "2002::/16"), wire.CodeNetworkDenied, "", 0},
		{"full: public name", "http://public.test/", allow("full"), "", "93.184.215.14:80", 1},
		{"full: loopback refused", "http://svc.test/", allow("full"), wire.CodeNetworkDenied, "", 1},
		{"full: loopback granted by CIDR", "http://svc.test/", allow("full", "127.0.0.1/32"), "", "127.0.0.1:80", 1},
		{"full: private literal refused", "http://10.0.0.1/", allow("full"), wire.CodeNetworkDenied, "", 0},
		{"malformed allowlist fails closed", "http://svc.test/", allow("allowlist", "svc.test", "not a host"), wire.CodeNetworkDenied, "", 0},
		{"unresolvable", "http://nx.test/", allow("allowlist", "nx.test"), wire.CodeBackendUnavailable, "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := newResolver()
			c, err := prepare(t, New(Options{Resolver: res}), map[string]any{"url": tc.url})
			if err != nil {
				t.Fatal(err)
			}
			scope, err := c.Enforce(context.Background(), tc.d)
			got, field := code(err)
			if got != tc.code {
				t.Fatalf("Enforce: %v (code %q), want code %q", err, got, tc.code)
			}
			if err != nil && field != "url" && tc.code != wire.CodePermissionDenied {
				t.Errorf("error names field %q, want url", field)
			}
			if err == nil {
				if c.pinned.String() != tc.addr {
					t.Errorf("pinned %s, want %s", c.pinned, tc.addr)
				}
				if scope.Backend != Backend || scope.Limits.TimeoutS != DefaultTimeoutS || scope.Limits.MaxOutputBytes != DefaultMaxBytes {
					t.Errorf("scope %+v", scope)
				}
			}
			if n := len(res.lookups()); n != tc.lookups {
				t.Errorf("%d DNS lookups (%v), want %d", n, res.lookups(), tc.lookups)
			}
		})
	}
}

func TestEnforceLimitsFromPolicy(t *testing.T) {
	t.Parallel()
	c, err := prepare(t, New(Options{Resolver: newResolver()}), map[string]any{"url": "http://127.0.0.1/", "max_bytes": 5000, "timeout_s": 60})
	if err != nil {
		t.Fatal(err)
	}
	d := allow("allowlist", "127.0.0.0/8")
	d.Limits = wire.Limits{TimeoutS: 10, MaxOutputBytes: 100}
	scope, err := c.Enforce(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if scope.Limits.TimeoutS != 10 || scope.Limits.MaxOutputBytes != 100 {
		t.Errorf("limits %+v, want the policy's smaller timeout 10 and cap 100", scope.Limits)
	}
}

// server is a loopback test server; its handlers are keyed by path.
func server(t *testing.T, tls bool) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Set-Cookie", "session=secret")
		w.Header().Set("X-Internal", "secret")
		w.Header().Set("ETag", `"v1"`)
		fmt.Fprintf(w, "hello ua=%s accept=%s auth=%q", r.UserAgent(), r.Header.Get("Accept"), r.Header.Get("Authorization"))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(strings.Repeat("é", 1000))) // 2000 bytes
	})
	mux.HandleFunc("/bin", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write([]byte{0, 1, 2, 0xff})
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", http.StatusNotFound) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	var s *httptest.Server
	if tls {
		s = httptest.NewTLSServer(mux)
	} else {
		s = httptest.NewServer(mux)
	}
	t.Cleanup(s.Close)
	return s
}

// hopDispatcher stands in for the gateway's pipeline: each redirect hop
// is prepared, decided by decide (nil: the first call's decision),
// enforced and run, and recorded.
type hopDispatcher struct {
	tool   *Tool
	decide func(url string) wire.Decision
	mu     sync.Mutex
	inputs []map[string]any
}

func (h *hopDispatcher) Dispatch(ctx context.Context, tool string, input json.RawMessage) (int, wire.ToolCallResponse) {
	var in map[string]any
	_ = json.Unmarshal(input, &in)
	h.mu.Lock()
	h.inputs = append(h.inputs, in)
	id := fmt.Sprintf("hop-%d", len(h.inputs))
	h.mu.Unlock()
	fail := func(status int, err error) (int, wire.ToolCallResponse) {
		var we *wire.Error
		if !errors.As(err, &we) {
			we = wire.Errorf(wire.CodeInternal, "%v", err)
		}
		return status, wire.ToolCallResponse{ReceiptID: id, Output: wire.ToolOutput{Error: we}}
	}
	if tool != ToolName {
		return fail(400, wire.Errorf(wire.CodeUnknownTool, "tool %s", tool))
	}
	c, err := h.tool.Prepare(ctx, input)
	if err != nil {
		return fail(400, err)
	}
	d := h.decide(fmt.Sprint(in["url"]))
	if !d.Allow {
		return fail(403, wire.Errorf(wire.CodePermissionDenied, "policy denied http.get"))
	}
	scope, err := c.Enforce(ctx, d)
	if err != nil {
		return fail(403, err)
	}
	res := c.Run(ctx, scope)
	return 200, wire.ToolCallResponse{ReceiptID: id, Output: res.Output}
}

func (h *hopDispatcher) hops() []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]map[string]any(nil), h.inputs...)
}

// run prepares, enforces and runs one call, with a dispatcher that decides
// redirect hops with the same decision.
func run(t *testing.T, tool *Tool, d wire.Decision, in map[string]any) (Data, *wire.ToolOutput, string, *wire.NetworkStats) {
	t.Helper()
	c, err := prepare(t, tool, in)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	scope, err := c.Enforce(context.Background(), d)
	if err != nil {
		t.Fatalf("Enforce: %v", err)
	}
	ctx := tools.WithDispatcher(context.Background(), &hopDispatcher{tool: tool, decide: func(string) wire.Decision { return d }})
	res := c.Run(ctx, scope)
	data, _ := res.Output.Data.(Data)
	return data, &res.Output, res.Status, res.Network
}

func port(t *testing.T, s *httptest.Server) string {
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

func TestFetch(t *testing.T) {
	t.Parallel()
	s := server(t, false)
	p := port(t, s)
	other := server(t, false) // a second loopback server on another port, never granted
	tool := New(Options{Resolver: newResolver()})
	grant := allow("allowlist", "svc.test:"+p, "127.0.0.0/8:"+p)

	t.Run("success, pinned address, headers filtered", func(t *testing.T) {
		t.Parallel()
		data, out, status, stats := run(t, tool, grant, map[string]any{"url": "http://svc.test:" + p + "/hello", "headers": map[string]string{"Accept": "text/plain"}})
		if !out.Success || status != wire.StatusSucceeded || data.Status != 200 {
			t.Fatalf("%s %+v", status, out)
		}
		if data.Body != `hello ua=Portcullis-http.get/1 accept=text/plain auth=""` || data.Encoding != "utf-8" || data.Truncated {
			t.Errorf("body %q encoding %s", data.Body, data.Encoding)
		}
		if data.Address != "127.0.0.1:"+p || data.URL != "http://svc.test:"+p+"/hello" {
			t.Errorf("address %s url %s", data.Address, data.URL)
		}
		if _, ok := data.Headers["set-cookie"]; ok || data.Headers["etag"] != `"v1"` || len(data.Headers) != 3 {
			t.Errorf("headers %v: want only content-type, content-length, etag", data.Headers)
		}
		if stats == nil || stats.Connections != 1 || len(stats.Allowed) != 1 {
			t.Errorf("network stats %+v", stats)
		}
	})
	t.Run("body cap", func(t *testing.T) {
		t.Parallel()
		data, out, _, _ := run(t, tool, grant, map[string]any{"url": "http://svc.test:" + p + "/big", "max_bytes": 1001})
		if !out.Success || !data.Truncated || data.Bytes != 1001 || data.Encoding != "utf-8" || len(data.Body) != 1000 {
			t.Errorf("truncated %v bytes %d encoding %s body len %d", data.Truncated, data.Bytes, data.Encoding, len(data.Body))
		}
	})
	t.Run("policy cap", func(t *testing.T) {
		t.Parallel()
		d := grant
		d.Limits.MaxOutputBytes = 10
		data, _, _, _ := run(t, tool, d, map[string]any{"url": "http://svc.test:" + p + "/big"})
		if !data.Truncated || data.Bytes != 10 {
			t.Errorf("truncated %v bytes %d, want the policy's 10", data.Truncated, data.Bytes)
		}
	})
	t.Run("binary is base64", func(t *testing.T) {
		t.Parallel()
		data, _, _, _ := run(t, tool, grant, map[string]any{"url": "http://svc.test:" + p + "/bin"})
		if data.Encoding != "base64" || data.Body != "AAEC/w==" {
			t.Errorf("encoding %s body %q", data.Encoding, data.Body)
		}
	})
	t.Run("404 is a failed call with data", func(t *testing.T) {
		t.Parallel()
		data, out, status, _ := run(t, tool, grant, map[string]any{"url": "http://svc.test:" + p + "/missing"})
		if out.Success || status != wire.StatusFailed || out.Error != nil || data.Status != 404 {
			t.Errorf("success %v status %s error %v http %d", out.Success, status, out.Error, data.Status)
		}
	})
	t.Run("redirect inside the grant", func(t *testing.T) {
		t.Parallel()
		data, out, _, stats := run(t, tool, grant, map[string]any{"url": "http://svc.test:" + p + "/redirect?to=/hello"})
		if !out.Success || len(data.Redirects) != 1 || !strings.HasSuffix(data.URL, "/hello") || stats.Connections != 2 {
			t.Errorf("%+v %+v", data, stats)
		}
	})
	for name, to := range map[string]string{
		"redirect to another port":     "http://127.0.0.1:" + port(t, other) + "/hello",
		"redirect to a denied name":    "http://evil.test:" + p + "/hello",
		"redirect to metadata":         "http://169.254.169.254/latest/meta-data/",
		"redirect to localhost by v6":  "http://[::1]:" + p + "/hello",
		"redirect to a non-http URL":   "file:///etc/passwd",
		"redirect with credentials in": "http://u:p@svc.test:" + p + "/hello",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, out, status, stats := run(t, tool, grant, map[string]any{"url": "http://svc.test:" + p + "/redirect?to=" + url.QueryEscape(to)})
			if out.Success || out.Error == nil || out.Error.Code != wire.CodeNetworkDenied || status != wire.StatusFailed {
				t.Fatalf("status %s output %+v", status, out)
			}
			if out.Error.Details["field"] != "url" || out.Error.Details["redirects"] == nil {
				t.Errorf("details %v", out.Error.Details)
			}
			if strings.HasPrefix(to, "http://127") || strings.HasPrefix(to, "http://evil") {
				if len(stats.Refused) != 1 || stats.Denials[stats.Refused[0]] == "" {
					t.Errorf("refused hop not recorded: %+v", stats)
				}
			}
		})
	}
	t.Run("too many redirects", func(t *testing.T) {
		t.Parallel()
		_, out, _, stats := run(t, tool, grant, map[string]any{"url": "http://svc.test:" + p + "/loop"})
		if out.Success || out.Error == nil || stats.Connections != MaxRedirects+1 {
			t.Errorf("output %+v stats %+v", out, stats)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		_, out, status, _ := run(t, tool, grant, map[string]any{"url": "http://svc.test:" + p + "/slow", "timeout_s": 1})
		if status != wire.StatusTimedOut || out.Error == nil || out.Error.Code != wire.CodeTimeout {
			t.Errorf("status %s output %+v", status, out)
		}
		if time.Since(start) > 3*time.Second {
			t.Errorf("took %s", time.Since(start))
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		closed := httptest.NewServer(http.NotFoundHandler())
		cp := port(t, closed)
		closed.Close()
		_, out, _, _ := run(t, tool, allow("allowlist", "127.0.0.1/32"), map[string]any{"url": "http://127.0.0.1:" + cp + "/"})
		if out.Error == nil || out.Error.Code != wire.CodeBackendUnavailable || out.Error.Details["field"] != "url" {
			t.Errorf("%+v", out)
		}
	})
}

// TestFetchTLSVerifiesTheName: the connection goes to the pinned loopback
// address, but the certificate must still match the URL's host name.
func TestFetchTLSVerifiesTheName(t *testing.T) {
	t.Parallel()
	s := server(t, true)
	p := port(t, s)
	pool := s.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	tool := New(Options{Resolver: newResolver(), RootCAs: pool})
	grant := allow("allowlist", "example.com", "svc.test", "127.0.0.0/8")
	data, out, _, _ := run(t, tool, grant, map[string]any{"url": "https://example.com:" + p + "/hello"})
	if !out.Success || !strings.HasPrefix(data.Body, "hello") {
		t.Fatalf("https to a name the certificate holds: %+v", out)
	}
	_, out, _, _ = run(t, tool, grant, map[string]any{"url": "https://svc.test:" + p + "/hello"})
	if out.Success || out.Error == nil || out.Error.Code != wire.CodeBackendUnavailable || !strings.Contains(out.Error.Message, "certificate") {
		t.Fatalf("https to a name the certificate lacks must fail verification: %+v", out.Error)
	}
}

// TestNoDNSRebinding: the resolver is asked once per hop and the dial goes
// to that answer, even if the name would resolve elsewhere later.
func TestNoDNSRebinding(t *testing.T) {
	t.Parallel()
	s := server(t, false)
	p := port(t, s)
	res := newResolver()
	tool := New(Options{Resolver: res})
	c, err := prepare(t, tool, map[string]any{"url": "http://svc.test:" + p + "/hello"})
	if err != nil {
		t.Fatal(err)
	}
	scope, err := c.Enforce(context.Background(), allow("allowlist", "svc.test", "127.0.0.0/8"))
	if err != nil {
		t.Fatal(err)
	}
	res.mu.Lock()
	res.m["svc.test"] = []netip.Addr{netip.MustParseAddr("10.9.9.9")} // rebinding after the check
	res.mu.Unlock()
	r := c.Run(context.Background(), scope)
	if !r.Output.Success || r.Output.Data.(Data).Address != "127.0.0.1:"+p || len(res.lookups()) != 1 {
		t.Fatalf("success %v data %+v lookups %v", r.Output.Success, r.Output.Data, res.lookups())
	}
}

// TestParametersSchema: the advertised schema names the contract's fields,
// and the decoder accepts each of them (the schema is what is enforced).
func TestParametersSchema(t *testing.T) {
	t.Parallel()
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(New(Options{}).Parameters(), &s); err != nil {
		t.Fatal(err)
	}
	fields := []string{"url", "headers", "max_bytes", "timeout_s", "follow_redirects"}
	if len(s.Properties) != len(fields) {
		t.Fatalf("schema has %d properties, want %v", len(s.Properties), fields)
	}
	for _, f := range fields {
		if _, ok := s.Properties[f]; !ok {
			t.Errorf("schema lacks %s", f)
		}
		if f != "url" {
			if _, err := decodeInput(json.RawMessage(`{"url":"http://x.test","` + f + `":null}`)); err != nil {
				t.Errorf("%s: null refused: %v", f, err)
			}
		}
	}
}

// TestFailureCausesStayInside: a fetch that fails at the network answers
// with what kind of failure it was, never the Go error's text, which names
// the gateway's local address and dialer ("dial tcp 127.0.0.1:41234 ->
// ...: connect: connection refused") or resolver ("lookup x on
// 10.0.0.2:53"). The cause travels wrapped, for the log.
func TestFailureCausesStayInside(t *testing.T) {
	t.Parallel()
	ln := server(t, false)
	p := port(t, ln)
	ln.Close() // nothing listens there now: connection refused
	tool := New(Options{Resolver: newResolver()})
	_, out, status, _ := run(t, tool, allow("allowlist", "svc.test:"+p, "127.0.0.0/8:"+p), map[string]any{"url": "http://svc.test:" + p + "/"})
	if out.Success || status != wire.StatusError || out.Error == nil || out.Error.Code != wire.CodeBackendUnavailable {
		t.Fatalf("%s %+v", status, out)
	}
	if !strings.Contains(out.Error.Message, "connection refused") {
		t.Errorf("message %q does not say what failed", out.Error.Message)
	}
	for _, leak := range []string{"dial", "connect:", "->"} {
		if strings.Contains(out.Error.Message, leak) {
			t.Errorf("message %q carries the internal cause (%q)", out.Error.Message, leak)
		}
	}
	if out.Error.Err == nil || out.Error.Op != "httpget: fetch" {
		t.Errorf("cause not wrapped for the log: op %q err %v", out.Error.Op, out.Error.Err)
	}
	b, _ := json.Marshal(out)
	if strings.Contains(string(b), "dial tcp") {
		t.Errorf("the encoded output carries the cause: %s", b)
	}

	// A name the resolver cannot resolve: the resolver's text stays inside.
	tool = New(Options{Resolver: newResolver()})
	c, err := prepare(t, tool, map[string]any{"url": "http://nowhere.test:" + p + "/"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Enforce(context.Background(), allow("allowlist", "nowhere.test:"+p, "127.0.0.0/8:"+p))
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeBackendUnavailable || strings.Contains(we.Message, "no such host nowhere.test") || we.Err == nil {
		t.Errorf("resolve failure: %+v", we)
	}
}

// TestFailureCauseWithoutQuery: the cause wrapped for the log does not
// carry the URL's query, which the caller may have put a credential in
// (?sig=..., ?api_key=...): Go's url.Error names the whole URL, and the
// log is not redacted like evidence.
func TestFailureCauseWithoutQuery(t *testing.T) {
	t.Parallel()
	const secret = "q8Zr-not-for-the-log"
	ln := server(t, false)
	p := port(t, ln)
	ln.Close()
	tool := New(Options{Resolver: newResolver()})
	_, out, _, _ := run(t, tool, allow("allowlist", "svc.test:"+p, "127.0.0.0/8:"+p), map[string]any{"url": "http://svc.test:" + p + "/x?sig=" + secret})
	if out.Error == nil || out.Error.Err == nil {
		t.Fatalf("want a failure with a wrapped cause, got %+v", out)
	}
	if strings.Contains(out.Error.Err.Error(), secret) {
		t.Errorf("the logged cause carries the query: %v", out.Error.Err)
	}
	if !strings.Contains(out.Error.Err.Error(), "connection refused") {
		t.Errorf("the logged cause lost what failed: %v", out.Error.Err)
	}
}
