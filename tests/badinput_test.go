package tests

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
)

// testBadHTTPInput throws malformed, mistyped, oversized and hostile bodies at
// POST /v1/tool-calls: each must get the right 4xx in the ToolCallResponse
// shape, and the gateway must stay healthy and keep serving afterwards.
func testBadHTTPInput(t *testing.T, g *gateway) {
	d := g.dep
	key := d.keys[agentFull]
	huge := append([]byte(`{"tool": "Exec", "input": {"argv": ["/bin/echo", "`), bytes.Repeat([]byte("A"), 16<<20)...)
	huge = append(huge, []byte(`"]}}`)...)
	cases := []struct {
		name   string
		body   []byte
		status int
		code   string
	}{
		{"malformed JSON", []byte(`{"tool": "Exec", "input": `), 400, "invalid_input"},
		{"empty body", []byte(``), 400, "invalid_input"},
		{"JSON null", []byte(`null`), 400, "invalid_input"},
		{"JSON array", []byte(`[{"tool": "Exec"}]`), 400, "invalid_input"},
		{"JSON string", []byte(`"Exec"`), 400, "invalid_input"},
		{"trailing data", []byte(`{"tool": "Exec", "input": {"argv": ["/bin/echo"]}} {"tool": "Exec"}`), 400, "invalid_input"},
		{"tool wrong type", []byte(`{"tool": 5, "input": {"argv": ["/bin/echo"]}}`), 400, "invalid_input"},
		{"call_id wrong type", []byte(`{"tool": "Exec", "input": {"argv": ["/bin/echo"]}, "call_id": 7}`), 400, "invalid_input"},
		{"session_id wrong type", []byte(`{"tool": "Exec", "input": {"argv": ["/bin/echo"]}, "session_id": {}}`), 400, "invalid_input"},
		{"missing tool", []byte(`{"input": {"argv": ["/bin/echo"]}}`), 400, "invalid_input"},
		{"missing input", []byte(`{"tool": "Exec"}`), 400, "invalid_input"},
		{"unknown top-level field", []byte(`{"tool": "Exec", "input": {"argv": ["/bin/echo"]}, "principal": "admin-1"}`), 400, "invalid_input"},
		{"unknown tool", []byte(`{"tool": "NoSuchTool", "input": {}}`), 404, "unknown_tool"},
		{"NUL in argument", []byte(`{"tool": "Exec", "input": {"argv": ["/bin/echo", "a\u0000b"]}}`), 400, "invalid_input"},
		{"NUL in argv0", []byte(`{"tool": "Exec", "input": {"argv": ["/bin/echo\u0000x"]}}`), 400, "invalid_input"},
		{"NUL in cwd", []byte(`{"tool": "Exec", "input": {"argv": ["/bin/echo"], "cwd": "/tmp\u0000/x"}}`), 400, "invalid_input"},
		{"NUL in env value", []byte(`{"tool": "Exec", "input": {"argv": ["/bin/echo"], "env": {"A": "x\u0000y"}}}`), 400, "invalid_input"},
		{"NUL in env key", []byte(`{"tool": "Exec", "input": {"argv": ["/bin/echo"], "env": {"A\u0000B": "x"}}}`), 400, "invalid_input"},
		{"equals in env key", []byte(`{"tool": "Exec", "input": {"argv": ["/bin/echo"], "env": {"A=B": "x"}}}`), 400, "invalid_input"},
		{"invalid UTF-8 in argument", []byte("{\"tool\": \"Exec\", \"input\": {\"argv\": [\"/bin/echo\", \"a\xff\xfeb\"]}}"), 400, "invalid_input"},
		{"invalid UTF-8 in argv0", []byte("{\"tool\": \"Exec\", \"input\": {\"argv\": [\"/bin/ech\xc3\x28\"]}}"), 400, "invalid_input"},
		{"invalid UTF-8 in tool", []byte("{\"tool\": \"Ex\xffec\", \"input\": {\"argv\": [\"/bin/echo\"]}}"), 400, "invalid_input"},
		{"body over the limit", huge, 413, "too_large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := g.tryDo(context.Background(), http.MethodPost, "/v1/tool-calls", "Bearer "+key, c.body)
			if err != nil {
				t.Fatalf("POST: %v", err)
			}
			if r.status != c.status {
				t.Fatalf("got %s, want HTTP %d %s", r, c.status, c.code)
			}
			res := decodeToolCall(t, r)
			if res.errCode() != c.code {
				t.Fatalf("code %q, want %q\n%s", res.errCode(), c.code, r)
			}
			if res.ReceiptID != "" {
				rc, ok := g.getReceipt(t, res.ReceiptID)
				if !ok {
					t.Errorf("answer names receipt %s but the auditor cannot find it", res.ReceiptID)
				} else if rc.Decision != "invalid" && !(c.code == "unknown_tool" && rc.Decision == "deny") {
					t.Errorf("receipt decision = %q, want invalid", rc.Decision)
				}
			}
		})
	}

	// Query parameters of evidence endpoints are validated too.
	for _, q := range []string{"limit=abc", "limit=-1", "since=yesterday", "decision=maybe", "cursor=%00%ff"} {
		r := g.do(t, http.MethodGet, "/v1/receipts?"+q, d.keys[auditor], nil)
		if r.status != http.StatusBadRequest {
			t.Errorf("GET /v1/receipts?%s: got %s, want 400 invalid_input", q, r)
			continue
		}
		if code, _ := apiError(t, r); code != "invalid_input" {
			t.Errorf("GET /v1/receipts?%s: code %q, want invalid_input", q, code)
		}
	}

	// Still healthy, still serving.
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := g.do(t, http.MethodGet, p, "", nil); r.status != http.StatusOK {
			t.Errorf("GET %s after bad input: %s", p, r)
		}
	}
	res := g.call(t, key, execCall(map[string]any{"argv": []string{"/bin/echo", "still alive"}}, "", ""))
	wantStatus(t, res, http.StatusOK, "")
	if x := res.exec(t); x.Stdout != "still alive\n" {
		t.Errorf("stdout = %q after bad input", x.Stdout)
	}
	if strings.Contains(g.stderr.String(), `"level":"ERROR"`) && strings.Contains(g.stderr.String(), "panic") {
		t.Errorf("gateway logged a panic while handling bad input")
	}
}
