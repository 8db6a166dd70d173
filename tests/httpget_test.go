package tests

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// httpServer is a loopback server for http.get: /ok, /big, and /redirect
// to a host no policy allows.
func httpServer(t *testing.T) (port int) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Set-Cookie", "s=secret")
		fmt.Fprint(w, "hello from loopback")
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, strings.Repeat("x", 5000))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port = ln.Addr().(*net.TCPAddr).Port
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, fmt.Sprintf("http://denied.invalid:%d/ok", port), http.StatusFound)
	})
	// /redirect-to?u=<url>: a redirect to any address the test names.
	mux.HandleFunc("/redirect-to", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("u"), http.StatusFound)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return port
}

// TestHTTPGet runs http.get through the real gateway against a loopback
// server: a CIDR grant lets agent-full reach it by IP and by localhost;
// agent-noexec lists localhost without a CIDR (refused: it resolves to
// loopback); agent-narrow has posture off.
func TestHTTPGet(t *testing.T) {
	t.Parallel()
	port := httpServer(t)
	d := newDeployment(t, storeSQLite)
	rego, err := os.ReadFile(filepath.Join("testdata", "sandbox", "sandbox.rego"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.bundleDir, "e2e.rego"), rego)
	tools := []string{"http.get"}
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), map[string]any{"e2e": map[string]any{"principals": map[string]any{
		agentFull: map[string]any{"tools": tools, "network": map[string]any{"posture": "allowlist", "allow": []string{
			fmt.Sprintf("localhost:%d", port), fmt.Sprintf("127.0.0.0/8:%d", port)}}},
		agentNoExec: map[string]any{"tools": tools, "network": map[string]any{"posture": "allowlist", "allow": []string{"localhost"}}},
		agentNarrow: map[string]any{"tools": tools, "network": map[string]any{"posture": "off", "allow": []string{}}},
	}}})
	g := d.start(t)
	get := func(key string, in map[string]any) *toolCallResult {
		return g.call(t, g.dep.keys[key], map[string]any{"tool": "http.get", "input": in})
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	type data struct {
		Status    int               `json:"status"`
		Body      string            `json:"body"`
		Headers   map[string]string `json:"headers"`
		Truncated bool              `json:"truncated"`
		Bytes     int               `json:"bytes"`
		Redirects []string          `json:"redirects"`
	}
	decode := func(r *toolCallResult) data {
		var v data
		if err := json.Unmarshal(r.Output.Data, &v); err != nil {
			t.Fatalf("%v\n%s", err, r.response)
		}
		return v
	}

	t.Run("CIDR grant: by IP and by localhost", func(t *testing.T) {
		for _, u := range []string{base + "/ok", fmt.Sprintf("http://localhost:%d/ok", port)} {
			r := get(agentFull, map[string]any{"url": u})
			if r.status != 200 || !r.Output.Success {
				t.Fatalf("%s: %s", u, r.response)
			}
			v := decode(r)
			if v.Body != "hello from loopback" || v.Headers["set-cookie"] != "" {
				t.Errorf("%+v", v)
			}
			rc := g.waitReceipt(t, r.ReceiptID, 5*time.Second, func(rc receipt) bool { return rc.status() == "succeeded" })
			if rc.Outcome.Backend != "gateway-http" {
				t.Errorf("backend %q", rc.Outcome.Backend)
			}
		}
	})
	t.Run("body cap", func(t *testing.T) {
		v := decode(get(agentFull, map[string]any{"url": base + "/big", "max_bytes": 100}))
		if !v.Truncated || v.Bytes != 100 {
			t.Errorf("%+v", v)
		}
	})
	t.Run("denied host", func(t *testing.T) {
		r := get(agentFull, map[string]any{"url": fmt.Sprintf("http://denied.invalid:%d/ok", port)})
		if r.status != 403 || r.errCode() != "network_denied" || r.Output.Error.Details["field"] != "url" {
			t.Fatalf("%s", r.response)
		}
	})
	t.Run("other port on a granted address", func(t *testing.T) {
		r := get(agentFull, map[string]any{"url": fmt.Sprintf("http://127.0.0.1:%d/ok", port+1)})
		if r.errCode() != "network_denied" {
			t.Fatalf("%s", r.response)
		}
	})
	t.Run("redirect to a denied host is refused at the hop and recorded", func(t *testing.T) {
		r := get(agentFull, map[string]any{"url": base + "/redirect"})
		if r.Output.Success || r.errCode() != "network_denied" {
			t.Fatalf("%s", r.response)
		}
		rc := g.waitReceipt(t, r.ReceiptID, 5*time.Second, func(rc receipt) bool { return rc.status() != "pending" && rc.status() != "" })
		if rc.Outcome.ErrorCode == nil || *rc.Outcome.ErrorCode != "network_denied" || !strings.Contains(rc.raw, "denied.invalid") {
			t.Errorf("receipt does not record the refused hop: %s", rc.raw)
		}
	})
	t.Run("redirect to a refused address is refused at the hop and recorded", func(t *testing.T) {
		// A granted address on a port the CIDR entry does not cover, and
		// the cloud metadata address: both refused after the first hop,
		// which was allowed; outcome.network names both.
		for target, refused := range map[string]string{
			fmt.Sprintf("http://127.0.0.1:%d/ok", port+1): fmt.Sprintf("127.0.0.1:%d", port+1),
			"http://169.254.169.254/latest/meta-data/":    "169.254.169.254:80",
		} {
			r := get(agentFull, map[string]any{"url": base + "/redirect-to?u=" + url.QueryEscape(target)})
			if r.Output.Success || r.errCode() != "network_denied" {
				t.Fatalf("%s: %s", target, r.response)
			}
			rc := g.waitReceipt(t, r.ReceiptID, 5*time.Second, func(rc receipt) bool { return rc.status() != "pending" && rc.status() != "" })
			n, first := rc.Outcome.Network, fmt.Sprintf("127.0.0.1:%d", port)
			if rc.errorCode() != "network_denied" || n == nil || len(n.Allowed) != 1 || n.Allowed[0] != first ||
				len(n.Refused) != 1 || n.Refused[0] != refused || n.Denials[refused] == "" {
				t.Errorf("receipt does not record the allowed hop %s and the refused %s: %s", first, refused, rc.raw)
			}
		}
	})
	t.Run("localhost without a CIDR grant", func(t *testing.T) {
		r := get(agentNoExec, map[string]any{"url": fmt.Sprintf("http://localhost:%d/ok", port)})
		if r.status != 403 || r.errCode() != "network_denied" {
			t.Fatalf("%s", r.response)
		}
	})
	t.Run("posture off", func(t *testing.T) {
		r := get(agentNarrow, map[string]any{"url": base + "/ok"})
		if r.status != 403 || r.errCode() != "network_denied" {
			t.Fatalf("%s", r.response)
		}
	})
	t.Run("invalid input", func(t *testing.T) {
		for _, in := range []map[string]any{{"url": "file:///etc/passwd"}, {"url": base, "headers": map[string]string{"authorization": "x"}}, {"url": base, "method": "POST"}} {
			r := get(agentFull, in)
			if r.status != 400 || r.errCode() != "invalid_input" || r.Output.Error.Details["field"] == nil {
				t.Errorf("%v: %s", in, r.response)
			}
		}
	})
}
