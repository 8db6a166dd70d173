package tests

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// mcpPost sends one JSON-RPC message to /mcp as a Streamable HTTP client
// would and returns status, session header and body.
func mcpPost(t *testing.T, g *gateway, key, session, body string, extra map[string]string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.baseURL+"/mcp", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	}
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b)
}

func mcpSession(t *testing.T, g *gateway, key string) string {
	t.Helper()
	st, sid, body := mcpPost(t, g, key, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`, nil)
	if st != http.StatusOK || sid == "" || !strings.Contains(body, `"protocolVersion":"2025-11-25"`) {
		t.Fatalf("initialize: %d %q %s", st, sid, body)
	}
	if st, _, _ := mcpPost(t, g, key, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil); st != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d", st)
	}
	return sid
}

type mcpToolResult struct {
	Result struct {
		Content []struct{ Type, Text string } `json:"content"`
		IsError bool                          `json:"isError"`
		Meta    map[string]any                `json:"_meta"`
	} `json:"result"`
}

// TestMCPGovernedLikeREST: an MCP client sees the tools GET /v1/tools shows,
// and its calls are decided and recorded exactly like REST calls, with the
// MCP session as the receipt's session_id.
func TestMCPGovernedLikeREST(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	g := d.start(t)
	sid := mcpSession(t, g, d.keys[agentFull])

	_, _, body := mcpPost(t, g, d.keys[agentFull], sid, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil)
	var list struct {
		Result struct {
			Tools []struct {
				Name        string         `json:"name"`
				InputSchema map[string]any `json:"inputSchema"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Result.Tools) != 1 ||
		list.Result.Tools[0].Name != "Exec" || list.Result.Tools[0].InputSchema["type"] != "object" {
		t.Fatalf("tools/list for agent-full (policy grants only Exec): %v %s", err, body)
	}

	_, _, body = mcpPost(t, g, d.keys[agentFull], sid,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"Exec","arguments":{"argv":["/bin/echo","via mcp"]},"_meta":{"portcullis/call_id":"mcp-call-1"}}}`, nil)
	var ok mcpToolResult
	if err := json.Unmarshal([]byte(body), &ok); err != nil || ok.Result.IsError || len(ok.Result.Content) != 1 ||
		!strings.Contains(ok.Result.Content[0].Text, `via mcp\n`) {
		t.Fatalf("allowed tools/call: %v %s", err, body)
	}
	rid, _ := ok.Result.Meta["portcullis/receipt_id"].(string)
	rc, found := g.getReceipt(t, rid)
	if !found || rc.PrincipalID != agentFull || rc.SessionID != sid || rc.CallID != "mcp-call-1" ||
		rc.Decision != "allow" || rc.status() != "succeeded" {
		t.Fatalf("receipt of the MCP call: %s", rc.raw)
	}

	// Identity comes from the key: agent-noexec opening its own session is
	// denied, recorded, and cannot use agent-full's session.
	nsid := mcpSession(t, g, d.keys[agentNoExec])
	if st, _, b := mcpPost(t, g, d.keys[agentNoExec], sid, `{"jsonrpc":"2.0","id":3,"method":"ping"}`, nil); st != http.StatusNotFound {
		t.Errorf("foreign session: %d %s", st, b)
	}
	_, _, body = mcpPost(t, g, d.keys[agentNoExec], nsid,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"Exec","arguments":{"argv":["/bin/echo","no"]}}}`, nil)
	var denied mcpToolResult
	if err := json.Unmarshal([]byte(body), &denied); err != nil || !denied.Result.IsError ||
		!strings.Contains(denied.Result.Content[0].Text, `"permission_denied"`) {
		t.Fatalf("denied tools/call: %v %s", err, body)
	}
	rid, _ = denied.Result.Meta["portcullis/receipt_id"].(string)
	if rc, found := g.getReceipt(t, rid); !found || rc.Decision != "deny" || rc.PrincipalID != agentNoExec {
		t.Errorf("receipt of the denied MCP call: %s", rc.raw)
	}

	// DNS rebinding: a browser page on another origin is refused.
	if st, _, b := mcpPost(t, g, d.keys[agentFull], sid, `{"jsonrpc":"2.0","id":5,"method":"ping"}`,
		map[string]string{"Origin": "http://attacker.example:8080"}); st != http.StatusForbidden {
		t.Errorf("cross-origin request: %d %s", st, b)
	}
	// No key, no MCP.
	req, _ := http.NewRequest(http.MethodPost, g.baseURL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := httpClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unauthenticated /mcp: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}
