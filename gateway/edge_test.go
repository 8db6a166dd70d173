package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

func mustCIDR(t *testing.T, s string) *net.IPNet {
	t.Helper()
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestClientIP: X-Forwarded-For is believed only from a trusted proxy, and
// then only up to the first hop that is not one; echo's defaults (trust
// loopback and private ranges) are off.
func TestClientIP(t *testing.T) {
	t.Parallel()
	proxies := []*net.IPNet{mustCIDR(t, "10.0.0.0/8"), mustCIDR(t, "2001:db8::/32")}
	tests := []struct {
		name    string
		trusted []*net.IPNet
		peer    string
		xff     []string
		want    string
	}{
		{"no proxies: header ignored", nil, "203.0.113.9:5000", []string{"198.51.100.1"}, "203.0.113.9"},
		{"no proxies: loopback peer is not trusted", nil, "127.0.0.1:5000", []string{"198.51.100.1"}, "127.0.0.1"},
		{"untrusted peer: header ignored", proxies, "203.0.113.9:5000", []string{"198.51.100.1"}, "203.0.113.9"},
		{"private peer not configured", proxies, "192.168.1.5:5000", []string{"198.51.100.1"}, "192.168.1.5"},
		{"loopback peer not configured", proxies, "127.0.0.1:5000", []string{"198.51.100.1"}, "127.0.0.1"},
		{"trusted peer, one hop", proxies, "10.1.2.3:5000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"trusted peer, no header", proxies, "10.1.2.3:5000", nil, "10.1.2.3"},
		{"client prepends a forged hop", proxies, "10.1.2.3:5000", []string{"1.1.1.1, 198.51.100.1"}, "198.51.100.1"},
		{"two trusted hops", proxies, "10.1.2.3:5000", []string{"1.1.1.1, 198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"header split over lines", proxies, "10.1.2.3:5000", []string{"1.1.1.1", "198.51.100.1"}, "198.51.100.1"},
		{"garbage stops the walk", proxies, "10.1.2.3:5000", []string{"198.51.100.1, not-an-ip"}, "10.1.2.3"},
		{"ipv6 proxy", proxies, "[2001:db8::7]:5000", []string{"2001:db8:ffff::1, 2a00::1"}, "2a00::1"},
		{"ipv6 untrusted peer", proxies, "[2a00::9]:5000", []string{"198.51.100.1"}, "2a00::9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.peer
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := clientIP(tc.trusted)(r); got != tc.want {
				t.Errorf("client = %q, want %q", got, tc.want)
			}
		})
	}
}

// logBuffer collects a server's JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) requests(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(b.buf.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

func edgeServer(t *testing.T, pol Decider, trusted []*net.IPNet, logs io.Writer) (*httptest.Server, *memEvidence, *countingTool) {
	return edgeServerMax(t, pol, trusted, logs, 4096)
}

func edgeServerMax(t *testing.T, pol Decider, trusted []*net.IPNet, logs io.Writer, maxBody int64) (*httptest.Server, *memEvidence, *countingTool) {
	t.Helper()
	ev := &memEvidence{}
	tool := &countingTool{}
	s := New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		Policy: pol, Evidence: ev, Receipts: ev, Tools: []tools.Tool{tool},
		InstanceID: "test", MaxBodyBytes: maxBody, OpenAPI: OpenAPIDocument, TrustedProxies: trusted,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, ev, tool
}

// TestAccessLogClientAddress: a forged X-Forwarded-For from an untrusted
// peer does not reach the log; the log names the peer and the trace id
// that the receipt also carries.
func TestAccessLogClientAddress(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	ts, _, _ := edgeServer(t, fakePolicy{allow: true}, nil, &logs)
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/healthz", nil)
	req.Header.Set("X-Forwarded-For", "198.51.100.77")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	reqs := logs.requests(t)
	if len(reqs) != 1 {
		t.Fatalf("%d request log lines", len(reqs))
	}
	if reqs[0]["remote"] != "127.0.0.1" {
		t.Errorf("remote = %v, want the TCP peer 127.0.0.1", reqs[0]["remote"])
	}
	if strings.Contains(fmt.Sprint(reqs[0]), "198.51.100.77") {
		t.Errorf("forged address logged: %v", reqs[0])
	}
}

// TestOversizedBodyAnswerIsRead: a client that sends its whole body
// before it reads (as Python's urllib does) gets the 413 and its receipt,
// not a reset, for bodies past the limit and larger than the socket
// buffers (which is when an unread body makes the server's close a reset).
func TestOversizedBodyAnswerIsRead(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	ts, ev, tool := edgeServerMax(t, fakePolicy{allow: true}, nil, io.Discard, limit)
	for _, size := range []int{limit + 1, 3*limit + limit/2, 4*limit - 100} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			body := `{"tool":"Count","input":{"x":"` + strings.Repeat("a", size) + `"}}`
			head := fmt.Sprintf("POST /v1/tool-calls HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", agentKey, len(body))
			if _, err := io.WriteString(conn, head+body); err != nil {
				t.Fatalf("sending the body: %v (the gateway stopped reading)", err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			defer resp.Body.Close()
			var out wire.ToolCallResponse
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusRequestEntityTooLarge || out.Output.Error == nil || out.Output.Error.Code != wire.CodeTooLarge || out.ReceiptID == "" {
				t.Errorf("got %d %+v, want 413 too_large with a receipt id", resp.StatusCode, out)
			}
		})
	}
	if tool.runs.Load() != 0 {
		t.Error("an oversized call ran")
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if len(ev.events) == 0 {
		t.Error("no receipt recorded")
	}
}

// notReady is a policy that has not loaded yet.
type notReady struct{ fakePolicy }

func (notReady) Ready() bool { return false }

// TestNoPolicyYet: before a policy is active, calls are refused 503
// backend_unavailable with a receipt, and nothing runs; listing and dry
// runs answer the same code.
func TestNoPolicyYet(t *testing.T) {
	t.Parallel()
	ts, ev, tool := edgeServer(t, notReady{fakePolicy{allow: true}}, nil, io.Discard)
	status, resp := post(t, ts.URL, agentKey, `{"tool":"Count","input":{}}`)
	if status != http.StatusServiceUnavailable || resp.Output.Error == nil || resp.Output.Error.Code != wire.CodeBackendUnavailable || resp.ReceiptID == "" {
		t.Errorf("got %d %+v, want 503 backend_unavailable with a receipt", status, resp)
	}
	if tool.runs.Load() != 0 {
		t.Error("the call ran without a policy")
	}
	ev.mu.Lock()
	var dec *evidence.Event
	for i := range ev.events {
		if ev.events[i].Kind == evidence.KindDecision {
			dec = &ev.events[i]
		}
	}
	ev.mu.Unlock()
	if dec == nil || dec.Decision != wire.DecisionDeny || dec.ErrorCode != string(wire.CodeBackendUnavailable) {
		t.Errorf("decision event = %+v, want deny backend_unavailable", dec)
	}
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/tools", ""},
		{http.MethodPost, "/v1/decisions", `{"tool":"Count","input":{}}`},
	} {
		req, _ := http.NewRequestWithContext(context.Background(), tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+agentKey)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body wire.ErrorBody
		_ = json.NewDecoder(r.Body).Decode(&body)
		r.Body.Close()
		if r.StatusCode != http.StatusServiceUnavailable || body.Error == nil || body.Error.Code != wire.CodeBackendUnavailable {
			t.Errorf("%s %s = %d %+v, want 503 backend_unavailable", tc.method, tc.path, r.StatusCode, body.Error)
		}
	}
}

// TestAPIAnswersNotSniffable: every answer outside the explorer (JSON,
// errors before and after authentication, a 404, a tool call's answer
// echoing the caller's HTML, the MCP endpoint) carries nosniff and a
// Content-Security-Policy that runs nothing and frames nothing, so a
// browser that is sent there can never render one as a page that runs
// script; the explorer's own stricter policy is left as it is.
func TestAPIAnswersNotSniffable(t *testing.T) {
	t.Parallel()
	ts, _ := testServer(t, fakePolicy{allow: true}, &memEvidence{})
	html := `<html><script>alert(1)</script>`
	for _, tc := range []struct {
		name, method, path, key, body string
	}{
		{"no key", http.MethodGet, "/v1/receipts", "", ""},
		{"unknown route", http.MethodGet, "/v1/" + html, agentKey, ""},
		{"tool call echoing HTML", http.MethodPost, "/v1/tool-calls", agentKey, `{"tool":"` + html + `","input":{}}`},
		{"tool call", http.MethodPost, "/v1/tool-calls", agentKey, `{"tool":"Count","input":{"x":"` + html + `"}}`},
		{"openapi", http.MethodGet, "/openapi.json", "", ""},
		{"healthz", http.MethodGet, "/healthz", "", ""},
		{"mcp without session", http.MethodGet, "/mcp", agentKey, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("%s %s (HTTP %d, %s): X-Content-Type-Options %q, want nosniff", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), got)
			}
			if got := resp.Header.Get("Content-Security-Policy"); got != apiCSP {
				t.Errorf("%s %s: Content-Security-Policy %q, want %q", tc.method, tc.path, got, apiCSP)
			}
		})
	}
	resp, err := http.Get(ts.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got := resp.Header.Get("Content-Security-Policy"); got == apiCSP || !strings.Contains(got, "script-src 'self'") {
		t.Errorf("/ui/ Content-Security-Policy %q: the explorer's own policy must stand", got)
	}
}
