package gateway

import (
	"context"
	"crypto/sha256"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/upstream"
	"github.com/portcullis/portcullis/wire"
)

// fakeUpstreams is a ToolSource whose tools change under the server, as
// an upstream's do after tools/list_changed.
type fakeUpstreams struct {
	mu      sync.Mutex
	tools   []tools.Tool
	version atomic.Uint64
}

func (f *fakeUpstreams) set(ts ...tools.Tool) {
	f.mu.Lock()
	f.tools = ts
	f.mu.Unlock()
	f.version.Add(1)
}
func (f *fakeUpstreams) Tools() []tools.Tool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]tools.Tool(nil), f.tools...)
}
func (f *fakeUpstreams) Version() uint64                                               { return f.version.Load() }
func (f *fakeUpstreams) Status() []upstream.Status                                     { return nil }
func (f *fakeUpstreams) Ready() map[string]string                                      { return map[string]string{} }
func (f *fakeUpstreams) Approve(context.Context, string, string, string, string) error { return nil }

// callTool posts a call of tool with empty input: status and error code.
func callTool(t *testing.T, base, tool string) (int, string) {
	t.Helper()
	status, resp := post(t, base, agentKey, `{"tool":`+jsonString(tool)+`,"input":{}}`)
	code := ""
	if resp.Output.Error != nil {
		code = string(resp.Output.Error.Code)
	}
	return status, code
}

// quarantinedTool is an upstream tool in quarantine.
type quarantinedTool struct{ namedTool }

func (*quarantinedTool) Quarantined() bool { return true }

// TestCatalogueFollowsUpstreams: upstream tools appear beside the
// built-ins, by model-safe name, and the names map is rebuilt whole when
// they change: a tool gone is unknown by either name, a new one callable
// by both; a quarantined tool is not listed; a built-in is never shadowed.
func TestCatalogueFollowsUpstreams(t *testing.T) {
	t.Parallel()
	ups := &fakeUpstreams{}
	echo := &namedTool{name: "every.echo"}
	shadow := &namedTool{name: "Exec"}
	ups.set(echo, shadow)
	pol := &grantPolicy{grant: map[string]bool{"Exec": true, "every.echo": true, "every.add": true, "every.hidden": true}}
	ev := &memEvidence{}
	builtin := &namedTool{name: "Exec"}
	s := New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		Policy: pol, Evidence: ev, Receipts: ev, Tools: []tools.Tool{builtin}, Upstreams: ups,
		InstanceID: "test", MaxBodyBytes: 1 << 16, OpenAPI: OpenAPIDocument,
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	list, _ := getTools(t, ts.URL)
	if list.Names["every__echo"] != "every.echo" || list.Names["Exec"] != "Exec" || len(list.Names) != 2 {
		t.Fatalf("names: %v", list.Names)
	}
	if st, _ := callTool(t, ts.URL, "every__echo"); st != 200 || echo.runs.Load() != 1 {
		t.Fatalf("every__echo: %d, runs %d", st, echo.runs.Load())
	}
	if st, _ := callTool(t, ts.URL, "Exec"); st != 200 || builtin.runs.Load() != 1 || shadow.runs.Load() != 0 {
		t.Fatal("an upstream tool shadowed a built-in")
	}

	add := &namedTool{name: "every.add"}
	ups.set(add, &quarantinedTool{namedTool{name: "every.hidden"}})
	list, _ = getTools(t, ts.URL)
	if list.Names["every__add"] != "every.add" || list.Names["every__echo"] != "" || list.Names["every__hidden"] != "" {
		t.Fatalf("names after the change: %v", list.Names)
	}
	for _, name := range []string{"every__echo", "every.echo"} {
		if st, code := callTool(t, ts.URL, name); st != 404 || code != "unknown_tool" {
			t.Fatalf("a tool gone is still callable as %s: %d %s", name, st, code)
		}
	}
	if st, _ := callTool(t, ts.URL, "every__add"); st != 200 || add.runs.Load() != 1 {
		t.Fatal("a new upstream tool is not callable by its model-safe name")
	}
}
