package gateway

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// hintedTool is countingTool with MCP behaviour hints.
type hintedTool struct{ countingTool }

func (*hintedTool) Annotations() map[string]any { return tools.Hints(true, false, true, false) }

func metaServer(t *testing.T, pr *ProtectedResource) *httptest.Server {
	t.Helper()
	ev := &memEvidence{}
	s := New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		Policy: fakePolicy{allow: true}, Evidence: ev, Receipts: ev, Tools: []tools.Tool{&hintedTool{}},
		InstanceID: "test", MaxBodyBytes: 4096, OpenAPI: OpenAPIDocument, PolicyRevision: func() string { return "rev" },
		ProtectedResource: pr,
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

// TestMCPToolsListHints: tools/list carries each tool's annotations, and
// an outputSchema that the structuredContent of a real call satisfies (an
// MCP client validates one against the other) for revisions that have it.
func TestMCPToolsListHints(t *testing.T) {
	t.Parallel()
	ts := metaServer(t, nil)
	sid := mcpInit(t, ts.URL, agentKey)
	a := mcpDo(t, ts.URL, http.MethodPost, agentKey, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, nil)
	var list struct {
		Tools []struct {
			Name         string          `json:"name"`
			Annotations  map[string]any  `json:"annotations"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(a.msg.Result, &list); err != nil || len(list.Tools) != 1 {
		t.Fatalf("tools/list: %v %s", err, a.raw)
	}
	got := list.Tools[0]
	if got.Annotations["readOnlyHint"] != true || got.Annotations["idempotentHint"] != true || got.Annotations["openWorldHint"] != false {
		t.Errorf("annotations = %v", got.Annotations)
	}
	if _, ok := got.Annotations["destructiveHint"]; ok {
		t.Errorf("a read-only tool carries destructiveHint: %v", got.Annotations)
	}
	c := jsonschema.NewCompiler()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(got.OutputSchema)))
	if err != nil {
		t.Fatalf("outputSchema %s: %v", got.OutputSchema, err)
	}
	if err := c.AddResource("out.json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("out.json")
	if err != nil {
		t.Fatalf("outputSchema does not compile: %v", err)
	}
	for _, args := range []string{`{}`, `{"bad":1}`} {
		call := mcpDo(t, ts.URL, http.MethodPost, agentKey, sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"Count","arguments":`+args+`}}`, nil)
		var res struct {
			StructuredContent json.RawMessage `json:"structuredContent"`
		}
		if err := json.Unmarshal(call.msg.Result, &res); err != nil || len(res.StructuredContent) == 0 {
			t.Fatalf("tools/call %s: %v %s", args, err, call.raw)
		}
		v, _ := jsonschema.UnmarshalJSON(strings.NewReader(string(res.StructuredContent)))
		if err := schema.Validate(v); err != nil {
			t.Errorf("structuredContent of %s does not satisfy the advertised outputSchema: %v\n%s", args, err, res.StructuredContent)
		}
	}

	// 2025-03-26 has no structuredContent: no outputSchema either.
	old := mcpDo(t, ts.URL, http.MethodPost, agentKey, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`, nil)
	l2 := mcpDo(t, ts.URL, http.MethodPost, agentKey, old.header.Get(headerMCPSession), `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, nil)
	if strings.Contains(l2.raw, "outputSchema") || !strings.Contains(l2.raw, "readOnlyHint") {
		t.Errorf("tools/list under 2025-03-26: %s", l2.raw)
	}
}

// TestProtectedResourceMetadata: with JWTs configured the MCP endpoint's
// RFC 9728 document names the issuer and the resource, and a refused
// request points to it; without, the well-known URLs are 404 (not 401).
func TestProtectedResourceMetadata(t *testing.T) {
	t.Parallel()
	get := func(t *testing.T, url string) (int, http.Header, map[string]any) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var doc map[string]any
		_ = json.Unmarshal(b, &doc)
		return resp.StatusCode, resp.Header, doc
	}
	off := metaServer(t, nil)
	for _, p := range protectedResourcePaths {
		if status, _, _ := get(t, off.URL+p); status != http.StatusNotFound {
			t.Errorf("%s without JWT auth: %d, want 404", p, status)
		}
	}
	if _, h, _ := get(t, off.URL+"/v1/tools"); strings.Contains(h.Get("WWW-Authenticate"), "resource_metadata") {
		t.Errorf("WWW-Authenticate names metadata that is not served: %s", h.Get("WWW-Authenticate"))
	}

	on := metaServer(t, &ProtectedResource{AuthorizationServers: []string{"https://idp.example.com"}})
	for _, p := range protectedResourcePaths {
		status, h, doc := get(t, on.URL+p)
		if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Fatalf("%s: %d %v", p, status, doc)
		}
		servers, _ := doc["authorization_servers"].([]any)
		if doc["resource"] != on.URL+"/mcp" || len(servers) != 1 || servers[0] != "https://idp.example.com" {
			t.Errorf("%s: %v", p, doc)
		}
	}
	status, h, _ := get(t, on.URL+"/v1/tools")
	if want := `resource_metadata="` + on.URL + protectedResourcePaths[0] + `"`; status != http.StatusUnauthorized || !strings.Contains(h.Get("WWW-Authenticate"), want) {
		t.Errorf("unauthenticated: %d WWW-Authenticate %q, want %s", status, h.Get("WWW-Authenticate"), want)
	}
}
