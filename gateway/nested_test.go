package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// nestingTool calls "Count" through the dispatcher the pipeline hands it,
// as code.run's bridge does, and reports what the nested call answered.
type nestingTool struct{ countingTool }

func (t *nestingTool) Name() string { return "Nest" }
func (t *nestingTool) Prepare(_ context.Context, in json.RawMessage) (tools.Call, error) {
	return &nestingCall{}, nil
}

type nestingCall struct{ countingCall }

func (c *nestingCall) Args() map[string]any { return map[string]any{} }
func (c *nestingCall) Enforce(context.Context, wire.Decision) (wire.Scope, error) {
	return wire.Scope{Backend: "test"}, nil
}
func (c *nestingCall) Run(ctx context.Context, _ wire.Scope) tools.Result {
	d, ok := tools.DispatcherFrom(ctx)
	if !ok {
		return tools.Result{Status: wire.StatusError, Output: wire.ToolOutput{Error: wire.Errorf(wire.CodeInternal, "no dispatcher")}}
	}
	status, resp := d.Dispatch(ctx, "Count", json.RawMessage(`{}`))
	return tools.Result{Status: wire.StatusSucceeded, Output: wire.ToolOutput{Success: true,
		Data: map[string]any{"status": status, "receipt": resp.ReceiptID, "nested_ok": resp.Output.Success}, Metadata: map[string]any{}}}
}

func TestNestedCallsAreGovernedAndLinked(t *testing.T) {
	t.Parallel()
	ev := &memEvidence{}
	count := &countingTool{}
	s := New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		Policy: fakePolicy{allow: true}, Evidence: ev, Receipts: ev,
		Tools: []tools.Tool{count, &nestingTool{}}, OpenAPI: OpenAPIDocument,
	})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	status, out := post(t, ts.URL, agentKey, `{"tool":"Nest","input":{},"session_id":"run-1"}`)
	if status != 200 || !out.Output.Success {
		t.Fatalf("outer call: %d %+v", status, out.Output)
	}
	data := out.Output.Data.(map[string]any)
	if data["nested_ok"] != true || count.runs.Load() != 1 {
		t.Fatalf("nested call did not run: %+v (runs %d)", data, count.runs.Load())
	}
	var outer, inner *evidence.Event
	for i, e := range ev.events {
		if e.Kind != evidence.KindDecision {
			continue
		}
		switch e.Tool {
		case "Nest":
			outer = &ev.events[i]
		case "Count":
			inner = &ev.events[i]
		}
	}
	if outer == nil || inner == nil {
		t.Fatalf("want decision events for both calls, got %d events", len(ev.events))
	}
	if inner.ParentReceiptID == nil || *inner.ParentReceiptID != outer.ID {
		t.Errorf("nested receipt parent = %v, want %s", inner.ParentReceiptID, outer.ID)
	}
	if outer.ParentReceiptID != nil {
		t.Errorf("outer receipt has a parent %v", outer.ParentReceiptID)
	}
	if inner.PrincipalID != "agent-1" || inner.SessionID != "run-1" {
		t.Errorf("nested call ran as %q in session %q, want the outer call's", inner.PrincipalID, inner.SessionID)
	}
	if data["receipt"] != inner.ID.String() {
		t.Errorf("nested answer names receipt %v, evidence has %s", data["receipt"], inner.ID)
	}
}
