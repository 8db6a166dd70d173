package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// reloadablePolicy allows everything until a reload, after which it denies
// principal denyAfter everything (the other principals keep their tools).
type reloadablePolicy struct {
	denyAfter string
	reloaded  atomic.Bool
}

func (p *reloadablePolicy) Decide(_ context.Context, in wire.PolicyInput) (wire.Decision, error) {
	allow := !(p.reloaded.Load() && in.Principal.ID == p.denyAfter)
	return wire.Decision{Allow: allow, Reasons: []string{"test"}, PolicyRevision: "rev"}, nil
}
func (*reloadablePolicy) Ready() bool { return true }

// Status and Reload make it the PolicyAdmin too: Reload activates the
// denying bundle.
func (*reloadablePolicy) Status() wire.PolicyStatus { return wire.PolicyStatus{} }
func (p *reloadablePolicy) Reload(context.Context) wire.PolicyReload {
	p.reloaded.Store(true)
	return wire.PolicyReload{Status: "activated", Revision: "rev-2"}
}

// bearer adds an API key to each request of the go-sdk client.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

func sdkConnect(t *testing.T, url, key string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "0"}, opts)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: bearer{key}}}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func toolNamesOf(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// TestMCPToolsListChanged: the official Go SDK client, connected to /mcp,
// receives notifications/tools/list_changed when a policy reload takes a
// tool away from its principal, and the list it then fetches is the new
// one.
func TestMCPToolsListChanged(t *testing.T) {
	t.Parallel()
	pol := &reloadablePolicy{denyAfter: "agent-1"}
	key := func(k, id, role string) Key {
		return Key{SHA256: sha256.Sum256([]byte(k)), Principal: wire.Principal{ID: id, Roles: []string{role}}}
	}
	s, ts, _ := mcpTestServer(t, Options{
		Keys:   []Key{key(agentKey, "agent-1", wire.RoleAgent), key("admin-key", "admin-1", wire.RoleAdmin)},
		Policy: pol, PolicyAdmin: pol,
	})

	// A bound on the waits below, so a missing notification fails the
	// test rather than hanging it (nothing asserts how long anything took).
	wait, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	changed := make(chan struct{}, 8)
	cs := sdkConnect(t, ts.URL, agentKey, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	if init := cs.InitializeResult(); init.Capabilities.Tools == nil || !init.Capabilities.Tools.ListChanged {
		t.Fatalf("capabilities %+v: want tools.listChanged", init.Capabilities)
	}
	if got := toolNamesOf(t, cs); !slices.Equal(got, []string{"Count"}) {
		t.Fatalf("tools before the reload = %v", got)
	}
	// The client opens its GET stream in the background; a notification
	// sent before it is open has nowhere to go (the spec's SSE stream is
	// best-effort), so wait until the server holds it.
	for !sessionListening(s, cs.ID()) {
		select {
		case <-wait.Done():
			t.Fatal("the client's GET stream never opened")
		case <-time.After(5 * time.Millisecond):
		}
	}
	select {
	case <-changed:
		t.Fatal("list_changed before anything changed")
	default:
	}

	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/policy/reload", nil)
	req.Header.Set("Authorization", "Bearer admin-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("reload: %v %v", resp, err)
	}
	resp.Body.Close()

	select {
	case <-changed:
	case <-wait.Done():
		t.Fatal("no notifications/tools/list_changed after the reload")
	}
	if got := toolNamesOf(t, cs); len(got) != 0 {
		t.Errorf("tools after the reload = %v, want none", got)
	}
}

func sessionListening(s *Server, id string) bool {
	s.mcp.mu.Lock()
	defer s.mcp.mu.Unlock()
	sess, ok := s.mcp.sessions[id]
	return ok && sess.streams > 0
}

// TestMCPSessionBoundToPrincipal: a session serves only the exact principal
// that opened it: not another principal, and not the same id with other
// attributes (another token's claims). Each is told the session does not
// exist, and nothing runs.
func TestMCPSessionBoundToPrincipal(t *testing.T) {
	t.Parallel()
	ev := &memEvidence{}
	tool := &countingTool{}
	key := func(k, id string, attrs map[string]any) Key {
		return Key{SHA256: sha256.Sum256([]byte(k)), Principal: wire.Principal{ID: id, Roles: []string{wire.RoleAgent}, Attributes: attrs}}
	}
	s := New(Options{
		Keys: []Key{key(agentKey, "agent-1", map[string]any{"team": "a"}), key("same-id-key", "agent-1", map[string]any{"team": "b"}),
			key("other-key", "agent-2", nil)},
		Policy: fakePolicy{allow: true}, Evidence: ev, Receipts: ev, Tools: []tools.Tool{tool},
		MaxBodyBytes: 4096, OpenAPI: OpenAPIDocument,
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	cs := sdkConnect(t, ts.URL, agentKey, nil)
	sid := cs.ID()
	call := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"Count","arguments":{}}}`
	sse := map[string]string{"Accept": "text/event-stream"}
	for _, k := range []string{"same-id-key", "other-key"} {
		for _, tc := range []struct {
			method, body string
			hdr          map[string]string
		}{
			{http.MethodPost, call, nil},
			{http.MethodPost, `{"jsonrpc":"2.0","id":6,"method":"tools/list"}`, nil},
			{http.MethodGet, "", sse},
			{http.MethodDelete, "", nil},
		} {
			if a := mcpDo(t, ts.URL, tc.method, k, sid, tc.body, tc.hdr); a.status != http.StatusNotFound {
				t.Errorf("%s %s on agent-1's session: %d %s, want 404", k, tc.method, a.status, a.raw)
			}
		}
	}
	if n := tool.runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times on a foreign session", n)
	}
	// An initialize naming the session opens a session of its own.
	a := mcpDo(t, ts.URL, http.MethodPost, "other-key", sid, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`, nil)
	if own := a.header.Get(headerMCPSession); a.status != http.StatusOK || a.msg.Error != nil || own == "" || own == sid {
		t.Errorf("initialize carrying agent-1's session: %d %s (session %q)", a.status, a.raw, own)
	}
	// The owner's session is untouched.
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "Count", Arguments: map[string]any{}})
	if err != nil || res.IsError || tool.runs.Load() != 1 {
		t.Fatalf("owner's call: %+v %v (runs %d)", res, err, tool.runs.Load())
	}
	if rid, _ := res.Meta["portcullis/receipt_id"].(string); rid == "" {
		t.Errorf("owner's call has no receipt id: %+v", res.Meta)
	}
}

// TestMCPStreamsEndAtShutdown: StopMCPStreams (serve calls it when the
// shutdown begins) ends an open GET stream, which would otherwise hold
// http.Server.Shutdown for its whole grace; the session itself stays.
func TestMCPStreamsEndAtShutdown(t *testing.T) {
	t.Parallel()
	s, ts, _ := mcpTestServer(t, Options{
		Keys: []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
	})
	sid := mcpInit(t, ts.URL, agentKey)

	resp := mcpOpenStream(t, ts.URL, agentKey, sid)
	first := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != ": ok\n" {
		t.Fatalf("stream start %q %v", first, err)
	}
	s.StopMCPStreams()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatalf("the stream did not end cleanly: %v", err)
	}
	if a := mcpDo(t, ts.URL, http.MethodPost, agentKey, sid, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil); a.status != http.StatusOK || a.msg.Error != nil {
		t.Errorf("the session after its stream ended: %d %s", a.status, a.raw)
	}
}

// TestMCPToolsListChangedOnUpstreamChange: when the upstreams' tools change
// (an upstream's own list_changed, a quarantine approval), the watch of
// their version pushes notifications/tools/list_changed to the go-sdk
// client, whose next tools/list has the new tools; a quarantined tool is
// not listed.
func TestMCPToolsListChangedOnUpstreamChange(t *testing.T) {
	t.Parallel()
	ups := &fakeUpstreams{}
	ups.set(&namedTool{name: "every.echo"})
	pol := &grantPolicy{grant: map[string]bool{"every.echo": true, "every.add": true, "every.hidden": true}}
	ev := &memEvidence{}
	s := New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		Policy: pol, Evidence: ev, Receipts: ev, Upstreams: ups, MaxBodyBytes: 1 << 16, OpenAPI: OpenAPIDocument,
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	wait, cancel := context.WithTimeout(t.Context(), time.Minute) // a bound, not an assertion
	defer cancel()
	go s.watchTools(wait, 5*time.Millisecond)

	changed := make(chan struct{}, 8)
	cs := sdkConnect(t, ts.URL, agentKey, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	if got := toolNamesOf(t, cs); !slices.Equal(got, []string{"every.echo"}) {
		t.Fatalf("tools before = %v", got)
	}
	for !sessionListening(s, cs.ID()) {
		select {
		case <-wait.Done():
			t.Fatal("the client's GET stream never opened")
		case <-time.After(5 * time.Millisecond):
		}
	}
	ups.set(&namedTool{name: "every.add"}, &quarantinedTool{namedTool{name: "every.hidden"}})
	select {
	case <-changed:
	case <-wait.Done():
		t.Fatal("no notifications/tools/list_changed after the upstreams changed")
	}
	if got := toolNamesOf(t, cs); !slices.Equal(got, []string{"every.add"}) {
		t.Errorf("tools after = %v, want [every.add]", got)
	}
}

// TestMCPSessionsPerPrincipal: a principal holding mcpSessionsPerIdentity
// sessions loses its least recently used one when it opens another;
// another principal's session is untouched.
func TestMCPSessionsPerPrincipal(t *testing.T) {
	t.Parallel()
	key := func(k, id string) Key {
		return Key{SHA256: sha256.Sum256([]byte(k)), Principal: wire.Principal{ID: id, Roles: []string{wire.RoleAgent}}}
	}
	_, ts, _ := mcpTestServer(t, Options{
		Keys: []Key{key(agentKey, "agent-1"), key("other-key", "agent-2")},
	})
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`

	other := mcpInit(t, ts.URL, "other-key")
	first := mcpInit(t, ts.URL, agentKey)
	second := mcpInit(t, ts.URL, agentKey)
	for range mcpSessionsPerIdentity - 2 {
		mcpInit(t, ts.URL, agentKey)
	}
	// first is now the least recently used unless it is used: use it, so
	// second is the one to go.
	if a := mcpDo(t, ts.URL, http.MethodPost, agentKey, first, ping, nil); a.status != http.StatusOK {
		t.Fatalf("first session before the limit: %d %s", a.status, a.raw)
	}
	mcpInit(t, ts.URL, agentKey) // one more than the limit
	for _, tc := range []struct {
		name, key, sid string
		want           int
	}{
		{"least recently used", agentKey, second, http.StatusNotFound},
		{"recently used", agentKey, first, http.StatusOK},
		{"another principal's", "other-key", other, http.StatusOK},
	} {
		if a := mcpDo(t, ts.URL, http.MethodPost, tc.key, tc.sid, ping, nil); a.status != tc.want {
			t.Errorf("%s session: %d %s, want %d", tc.name, a.status, a.raw, tc.want)
		}
	}
}

// TestMCPToolsListChangedBeforeStream: a change made while the session has
// no GET stream open is notified when the stream opens, so a client that
// opens its stream late does not miss it.
func TestMCPToolsListChangedBeforeStream(t *testing.T) {
	t.Parallel()
	pol := &reloadablePolicy{denyAfter: "agent-1"}
	key := func(k, id, role string) Key {
		return Key{SHA256: sha256.Sum256([]byte(k)), Principal: wire.Principal{ID: id, Roles: []string{role}}}
	}
	_, ts, _ := mcpTestServer(t, Options{
		Keys:   []Key{key(agentKey, "agent-1", wire.RoleAgent), key("admin-key", "admin-1", wire.RoleAdmin)},
		Policy: pol, PolicyAdmin: pol,
	})
	sid := mcpInit(t, ts.URL, agentKey)
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if a := mcpDo(t, ts.URL, http.MethodPost, agentKey, sid, list, nil); !strings.Contains(a.raw, `"name":"Count"`) {
		t.Fatalf("tools/list before: %s", a.raw)
	}
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/policy/reload", nil)
	req.Header.Set("Authorization", "Bearer admin-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("reload: %v %v", resp, err)
	}
	resp.Body.Close()

	resp = mcpOpenStream(t, ts.URL, agentKey, sid)
	sc := bufio.NewScanner(resp.Body)
	got := ""
	for got == "" && sc.Scan() {
		got, _ = strings.CutPrefix(sc.Text(), "data: ")
		if !strings.HasPrefix(sc.Text(), "data: ") {
			got = ""
		}
	}
	if !strings.Contains(got, `"method":"notifications/tools/list_changed"`) {
		t.Fatalf("first event %q (%v), want notifications/tools/list_changed", got, sc.Err())
	}
	if a := mcpDo(t, ts.URL, http.MethodPost, agentKey, sid, list, nil); string(a.msg.Result) != `{"tools":[]}` {
		t.Errorf("tools/list after: %s", a.raw)
	}
}

// mcpTestServer starts a gateway for the MCP tests: opts with, where unset,
// an allowing policy, in-memory evidence, the counting tool, a 4 KiB body
// limit and the OpenAPI document.
func mcpTestServer(t *testing.T, opts Options) (*Server, *httptest.Server, *memEvidence) {
	t.Helper()
	ev := &memEvidence{}
	if opts.Policy == nil {
		opts.Policy = fakePolicy{allow: true}
	}
	opts.Evidence, opts.Receipts = ev, ev
	if opts.Tools == nil {
		opts.Tools = []tools.Tool{&countingTool{}}
	}
	opts.MaxBodyBytes, opts.OpenAPI = 4096, OpenAPIDocument
	s := New(opts)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts, ev
}
