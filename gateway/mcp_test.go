package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// mcpReq sends one raw body to /mcp and returns status, headers and the
// decoded JSON-RPC answer (zero when there is no body).
type mcpAnswer struct {
	status int
	header http.Header
	raw    string
	msg    struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
		Error   *rpcError       `json:"error"`
	}
}

// mcpCallResult is a tools/call result as the tests read it.
type mcpCallResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent *wire.ToolOutput `json:"structuredContent,omitempty"`
	IsError           bool             `json:"isError"`
	Meta              map[string]any   `json:"_meta"`
}

func mcpDo(t *testing.T, base, method, key, session string, body string, hdr map[string]string) mcpAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, base+"/mcp", strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	if session != "" {
		req.Header.Set(headerMCPSession, session)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := mcpAnswer{status: resp.StatusCode, header: resp.Header, raw: string(b)}
	if len(b) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if !json.Valid(b) {
			t.Fatalf("answer is not JSON: %s", b)
		}
		if strings.Contains(string(b), `"jsonrpc"`) {
			if err := json.Unmarshal(b, &a.msg); err != nil {
				t.Fatalf("answer is not a JSON-RPC message: %v: %s", err, b)
			}
		}
	}
	return a
}

// mcpStream opens a session's GET stream and answers its status and
// content type (the stream itself is closed at once).
func mcpStream(t *testing.T, base, key, session string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(headerMCPSession, session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Content-Type")
}

// mcpOpenStream opens session's GET stream as key (bearer), bounded by a
// minute (a bound, not an assertion); the body is closed when the test ends.
func mcpOpenStream(t *testing.T, base, key, session string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(headerMCPSession, session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func mcpInit(t *testing.T, base, key string) string {
	t.Helper()
	a := mcpDo(t, base, http.MethodPost, key, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`, nil)
	if a.status != http.StatusOK || a.msg.Error != nil {
		t.Fatalf("initialize: %d %s", a.status, a.raw)
	}
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	_ = json.Unmarshal(a.msg.Result, &res)
	if res.ProtocolVersion != "2025-06-18" {
		t.Errorf("negotiated %q, want the client's 2025-06-18", res.ProtocolVersion)
	}
	id := a.header.Get(headerMCPSession)
	if id == "" {
		t.Fatal("initialize answered no Mcp-Session-Id")
	}
	return id
}

func TestMCPJSONRPC(t *testing.T) {
	t.Parallel()
	ts, _ := testServer(t, fakePolicy{allow: true}, &memEvidence{})
	sid := mcpInit(t, ts.URL, agentKey)

	cases := []struct {
		name       string
		session    string
		body       string
		hdr        map[string]string
		wantStatus int
		wantCode   int // JSON-RPC error code; 0 = none expected
	}{
		{"bad JSON", sid, `{"jsonrpc":"2.0",`, nil, 400, rpcParseError},
		{"batch", sid, `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, nil, 400, rpcInvalidRequest},
		{"not an object", sid, `42`, nil, 400, rpcInvalidRequest},
		{"wrong version", sid, `{"jsonrpc":"1.0","id":1,"method":"ping"}`, nil, 400, rpcInvalidRequest},
		{"fractional id", sid, `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, nil, 400, rpcInvalidRequest},
		{"no method", sid, `{"jsonrpc":"2.0","id":1}`, nil, 400, rpcInvalidRequest},
		{"unknown method", sid, `{"jsonrpc":"2.0","id":"a","method":"resources/list"}`, nil, 200, rpcMethodNotFound},
		{"ping", sid, `{"jsonrpc":"2.0","id":2,"method":"ping"}`, nil, 200, 0},
		{"notification", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil, 202, 0},
		{"client response", sid, `{"jsonrpc":"2.0","id":9,"result":{}}`, nil, 202, 0},
		{"no session", "", `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, nil, 400, rpcInvalidRequest},
		{"unknown session", "00000000-0000-4000-8000-000000000000", `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, nil, 404, rpcInvalidRequest},
		{"bad protocol header", sid, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, map[string]string{"MCP-Protocol-Version": "1999-01-01"}, 400, rpcInvalidRequest},
		{"wrong content type", sid, `{"jsonrpc":"2.0","id":3,"method":"ping"}`, map[string]string{"Content-Type": "text/plain"}, 415, rpcInvalidRequest},
		{"unacceptable", sid, `{"jsonrpc":"2.0","id":3,"method":"ping"}`, map[string]string{"Accept": "text/html"}, 406, rpcInvalidRequest},
		{"call without name", sid, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{}}`, nil, 200, rpcInvalidParams},
		{"too large", sid, `{"jsonrpc":"2.0","id":5,"method":"ping","params":{"pad":"` + strings.Repeat("x", 5000) + `"}}`, nil, 413, rpcInvalidRequest},
	}
	for _, tc := range cases {
		a := mcpDo(t, ts.URL, http.MethodPost, agentKey, tc.session, tc.body, tc.hdr)
		if a.status != tc.wantStatus {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, a.status, tc.wantStatus, a.raw)
			continue
		}
		switch {
		case tc.wantCode == 0 && a.msg.Error != nil:
			t.Errorf("%s: unexpected error %+v", tc.name, a.msg.Error)
		case tc.wantCode != 0 && (a.msg.Error == nil || a.msg.Error.Code != tc.wantCode):
			t.Errorf("%s: error %+v, want code %d (%s)", tc.name, a.msg.Error, tc.wantCode, a.raw)
		case tc.wantStatus == 202 && a.raw != "":
			t.Errorf("%s: 202 with a body %q", tc.name, a.raw)
		}
	}
}

func TestMCPToolsAreGoverned(t *testing.T) {
	t.Parallel()
	ev := &memEvidence{}
	ts, tool := testServer(t, fakePolicy{allow: true}, ev)
	sid := mcpInit(t, ts.URL, agentKey)

	a := mcpDo(t, ts.URL, http.MethodPost, agentKey, sid, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil)
	if !strings.Contains(string(a.msg.Result), `"name":"Count"`) || !strings.Contains(string(a.msg.Result), `"inputSchema":{"type":"object"}`) {
		t.Fatalf("tools/list = %s", a.raw)
	}

	call := func(args string) (mcpCallResult, mcpAnswer) {
		a := mcpDo(t, ts.URL, http.MethodPost, agentKey, sid,
			`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"Count","arguments":`+args+`,"_meta":{"portcullis/call_id":"c-1"}}}`, nil)
		var res mcpCallResult
		if a.msg.Error == nil {
			if err := json.Unmarshal(a.msg.Result, &res); err != nil {
				t.Fatalf("tools/call result: %v: %s", err, a.raw)
			}
		}
		return res, a
	}
	res, a := call(`{}`)
	if res.IsError || res.Meta["portcullis/receipt_id"] == nil || tool.runs.Load() != 1 {
		t.Fatalf("allowed call: %s (runs %d)", a.raw, tool.runs.Load())
	}
	var out wire.ToolOutput
	if err := json.Unmarshal([]byte(res.Content[0].Text), &out); err != nil || !out.Success {
		t.Fatalf("text content is not the ToolOutput: %v %q", err, res.Content[0].Text)
	}
	ev.mu.Lock()
	var dec evidence.Event
	for _, e := range ev.events {
		if e.Kind == evidence.KindDecision {
			dec = e
		}
	}
	ev.mu.Unlock()
	if dec.SessionID != sid || dec.CallID != "c-1" || dec.PrincipalID != "agent-1" || dec.ID.String() != res.Meta["portcullis/receipt_id"] {
		t.Errorf("receipt event %+v: want session %s, call c-1, agent-1, id %v", dec, sid, res.Meta["portcullis/receipt_id"])
	}

	res, a = call(`{"bad":1}`)
	if !res.IsError || !strings.Contains(res.Content[0].Text, `"invalid_input"`) || res.Meta["portcullis/receipt_id"] == nil {
		t.Errorf("invalid call: %s", a.raw)
	}
	a = mcpDo(t, ts.URL, http.MethodPost, agentKey, sid, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"Nope","arguments":{}}}`, nil)
	if a.msg.Error == nil || a.msg.Error.Code != rpcInvalidParams {
		t.Errorf("unknown tool: %s", a.raw)
	}
	if tool.runs.Load() != 1 {
		t.Errorf("runs = %d, want 1", tool.runs.Load())
	}
}

func TestMCPDenied(t *testing.T) {
	t.Parallel()
	ts, tool := testServer(t, fakePolicy{allow: false}, &memEvidence{})
	sid := mcpInit(t, ts.URL, agentKey)
	a := mcpDo(t, ts.URL, http.MethodPost, agentKey, sid, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil)
	if string(a.msg.Result) != `{"tools":[]}` {
		t.Errorf("denied tools are listed: %s", a.raw)
	}
	a = mcpDo(t, ts.URL, http.MethodPost, agentKey, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Count","arguments":{}}}`, nil)
	var res mcpCallResult
	_ = json.Unmarshal(a.msg.Result, &res)
	if !res.IsError || !strings.Contains(res.Content[0].Text, `"permission_denied"`) || tool.runs.Load() != 0 {
		t.Errorf("denied call: %s", a.raw)
	}
}

func TestMCPSessionsAndAuth(t *testing.T) {
	t.Parallel()
	ev := &memEvidence{}
	tool := &countingTool{}
	key := func(k, id, role string) Key {
		return Key{SHA256: sha256.Sum256([]byte(k)), Principal: wire.Principal{ID: id, Roles: []string{role}}}
	}
	s := New(Options{
		Keys: []Key{key(agentKey, "agent-1", wire.RoleAgent), key("agent-2-key", "agent-2", wire.RoleAgent),
			key(auditorKey, "auditor-1", wire.RoleAuditor)},
		Policy: fakePolicy{allow: true}, Evidence: ev, Receipts: ev, Tools: []tools.Tool{tool},
		MaxBodyBytes: 4096, OpenAPI: OpenAPIDocument, MCPAllowedOrigins: []string{"https://Console.Example.com:443"},
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`

	if a := mcpDo(t, ts.URL, http.MethodPost, "", "", ping, nil); a.status != 401 || a.header.Get("WWW-Authenticate") == "" {
		t.Errorf("no key: %d %s", a.status, a.raw)
	}
	if a := mcpDo(t, ts.URL, http.MethodPost, auditorKey, "", ping, nil); a.status != 403 {
		t.Errorf("auditor: %d, want 403", a.status)
	}
	sid := mcpInit(t, ts.URL, agentKey)
	// Another principal cannot use, or end, agent-1's session.
	if a := mcpDo(t, ts.URL, http.MethodPost, "agent-2-key", sid, ping, nil); a.status != 404 {
		t.Errorf("foreign session: %d, want 404", a.status)
	}
	if a := mcpDo(t, ts.URL, http.MethodDelete, "agent-2-key", sid, "", nil); a.status != 404 {
		t.Errorf("foreign delete: %d, want 404", a.status)
	}
	for _, tc := range []struct {
		origin string
		want   int
	}{
		{"https://evil.example", 403},
		{"http://127.0.0.1:8080", 403},
		{"null", 403},
		{"https://console.example.com", 200},
	} {
		if a := mcpDo(t, ts.URL, http.MethodPost, agentKey, sid, ping, map[string]string{"Origin": tc.origin}); a.status != tc.want {
			t.Errorf("Origin %s: %d, want %d (%s)", tc.origin, a.status, tc.want, a.raw)
		}
	}
	// GET is the session's SSE stream (notifications/tools/list_changed):
	// a client that cannot read SSE is refused, another principal cannot
	// open it, the owner can.
	if a := mcpDo(t, ts.URL, http.MethodGet, agentKey, sid, "", nil); a.status != 406 || a.msg.Error == nil {
		t.Errorf("GET without Accept: text/event-stream: %d %s, want 406", a.status, a.raw)
	}
	sse := map[string]string{"Accept": "text/event-stream"}
	if a := mcpDo(t, ts.URL, http.MethodGet, "agent-2-key", sid, "", sse); a.status != 404 {
		t.Errorf("foreign GET stream: %d, want 404", a.status)
	}
	if st, ct := mcpStream(t, ts.URL, agentKey, sid); st != 200 || ct != "text/event-stream" {
		t.Errorf("GET stream: %d %q, want 200 text/event-stream", st, ct)
	}
	if a := mcpDo(t, ts.URL, http.MethodDelete, agentKey, sid, "", nil); a.status != 204 {
		t.Errorf("DELETE: %d, want 204", a.status)
	}
	if a := mcpDo(t, ts.URL, http.MethodPost, agentKey, sid, ping, nil); a.status != 404 {
		t.Errorf("ended session: %d, want 404", a.status)
	}
	// An unknown protocol revision is answered with the newest supported.
	a := mcpDo(t, ts.URL, http.MethodPost, agentKey, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2099-01-01"}}`, nil)
	if !strings.Contains(string(a.msg.Result), `"protocolVersion":"`+mcpVersions[0]+`"`) {
		t.Errorf("negotiation: %s", a.raw)
	}
}

func TestNormalizeOrigin(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"HTTPS://Example.COM:443": "https://example.com",
		"http://localhost:80":     "http://localhost",
		"http://[::1]:3000":       "http://[::1]:3000",
		"null":                    "",
		"file://x":                "",
		"https://a.example/path":  "",
		"https://u:p@a.example":   "",
	} {
		got, _ := normalizeOrigin(in)
		if got != want {
			t.Errorf("normalizeOrigin(%q) = %q, want %q", in, got, want)
		}
	}
}
