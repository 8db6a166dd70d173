package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// nestTool calls itself again through the pipeline (as code.run's nested
// calls do) until the gateway refuses; it records each level's answer.
type nestTool struct {
	mu      sync.Mutex
	runs    int
	refusal *wire.Error
	status  int
}

func (t *nestTool) Name() string                { return "Nest" }
func (t *nestTool) Description() string         { return "calls itself" }
func (t *nestTool) Parameters() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (t *nestTool) Prepare(context.Context, json.RawMessage) (tools.Call, error) {
	return &nestCall{t: t}, nil
}

type nestCall struct{ t *nestTool }

func (c *nestCall) Args() map[string]any     { return map[string]any{} }
func (c *nestCall) Resolved() map[string]any { return map[string]any{} }
func (c *nestCall) Enforce(context.Context, wire.Decision) (wire.Scope, error) {
	return wire.Scope{Backend: "test"}, nil
}
func (c *nestCall) Run(ctx context.Context, _ wire.Scope) tools.Result {
	c.t.mu.Lock()
	c.t.runs++
	c.t.mu.Unlock()
	d, ok := tools.DispatcherFrom(ctx)
	if !ok {
		return tools.Result{Output: wire.ToolOutput{Error: wire.Errorf(wire.CodeInternal, "no dispatcher")}, Status: wire.StatusError, Backend: "test"}
	}
	status, resp := d.Dispatch(ctx, "Nest", json.RawMessage(`{}`))
	if !resp.Output.Success {
		c.t.mu.Lock()
		if c.t.refusal == nil {
			c.t.refusal, c.t.status = resp.Output.Error, status
		}
		c.t.mu.Unlock()
	}
	return tools.Result{Output: wire.ToolOutput{Success: true, Data: map[string]any{}, Metadata: map[string]any{}}, Status: wire.StatusSucceeded, Backend: "test"}
}

// TestNestingDepthBounded: a tool that calls tools that call tools (code
// that runs code) is refused past maxDepth levels below the agent's call:
// the agent's call and four nested levels run, the fifth nested call is
// refused invalid_input with a receipt (decision invalid) whose parent is
// the fourth level's, and nothing deeper is attempted.
func TestNestingDepthBounded(t *testing.T) {
	t.Parallel()
	nest := &nestTool{}
	ev := &memEvidence{}
	s := New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		Policy: fakePolicy{allow: true}, Evidence: ev, Receipts: ev, Tools: []tools.Tool{nest},
		InstanceID: "test", MaxBodyBytes: 4096, OpenAPI: OpenAPIDocument,
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	status, out := post(t, ts.URL, agentKey, `{"tool":"Nest","input":{}}`)
	if status != 200 || !out.Output.Success {
		t.Fatalf("the agent's call: %d %+v", status, out.Output.Error)
	}
	if nest.runs != maxDepth+1 {
		t.Errorf("ran %d levels, want the agent's call and %d nested", nest.runs, maxDepth)
	}
	if nest.refusal == nil || nest.refusal.Code != wire.CodeInvalidInput || nest.status != 400 {
		t.Fatalf("the call past the depth: %d %+v, want 400 invalid_input", nest.status, nest.refusal)
	}
	var decisions []string
	for _, e := range ev.events {
		if e.Kind == evidence.KindDecision {
			decisions = append(decisions, e.Decision)
		}
	}
	want := []string{"allow", "allow", "allow", "allow", "allow", "invalid"}
	if len(decisions) != len(want) {
		t.Fatalf("decisions %v, want %v", decisions, want)
	}
	invalid := 0
	for _, d := range decisions {
		if d == "invalid" {
			invalid++
		}
	}
	if invalid != 1 {
		t.Errorf("decisions %v: want exactly the refused level invalid", decisions)
	}
}
