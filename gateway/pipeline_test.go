package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// The pipeline's fail-closed paths need a store and a policy that fail on
// demand; these stand-ins record what the pipeline asked of them.

type fakePolicy struct {
	allow bool
	err   error
}

func (f fakePolicy) Decide(_ context.Context, in wire.PolicyInput) (wire.Decision, error) {
	if f.err != nil {
		return wire.Decision{}, f.err
	}
	return wire.Decision{Allow: f.allow, Reasons: []string{"because " + in.Tool}, PolicyRevision: "rev-1"}, nil
}
func (fakePolicy) Ready() bool { return true }

type memEvidence struct {
	mu     sync.Mutex
	err    error
	events []evidence.Event
}

func (m *memEvidence) Append(_ context.Context, ev ...evidence.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	m.events = append(m.events, ev...)
	return nil
}
func (m *memEvidence) Receipt(context.Context, uuid.UUID) (wire.Receipt, error) {
	return wire.Receipt{}, evidence.ErrNotFound
}
func (m *memEvidence) Receipts(context.Context, evidence.Filter) (wire.ReceiptList, error) {
	return wire.ReceiptList{}, nil
}
func (m *memEvidence) Ping(context.Context) error { return m.err }

type countingTool struct{ runs atomic.Int32 }

func (t *countingTool) Name() string                { return "Count" }
func (t *countingTool) Description() string         { return "counts runs" }
func (t *countingTool) Parameters() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (t *countingTool) Prepare(_ context.Context, in json.RawMessage) (tools.Call, error) {
	var m map[string]any
	if err := json.Unmarshal(in, &m); err != nil || m["bad"] != nil {
		return nil, wire.FieldError(wire.CodeInvalidInput, "bad", "bad input")
	}
	return &countingCall{t: t, args: m}, nil
}

type countingCall struct {
	t    *countingTool
	args map[string]any
}

func (c *countingCall) Args() map[string]any     { return c.args }
func (c *countingCall) Resolved() map[string]any { return map[string]any{} }
func (c *countingCall) Enforce(context.Context, wire.Decision) (wire.Scope, error) {
	if c.args["outside"] != nil {
		return wire.Scope{}, wire.FieldError(wire.CodeFSDenied, "path", "outside the grants")
	}
	return wire.Scope{Backend: "test"}, nil
}
func (c *countingCall) Run(context.Context, wire.Scope) tools.Result {
	c.t.runs.Add(1)
	return tools.Result{Output: wire.ToolOutput{Success: true, Data: map[string]any{"ran": true}, Metadata: map[string]any{}},
		Status: wire.StatusSucceeded, Backend: "test"}
}

const agentKey, auditorKey = "agent-key", "auditor-key"

func testServer(t *testing.T, pol Decider, ev *memEvidence) (*httptest.Server, *countingTool) {
	t.Helper()
	tool := &countingTool{}
	key := func(k, id, role string) Key {
		return Key{SHA256: sha256.Sum256([]byte(k)), Principal: wire.Principal{ID: id, Roles: []string{role}}}
	}
	s := New(Options{
		Keys:   []Key{key(agentKey, "agent-1", wire.RoleAgent), key(auditorKey, "auditor-1", wire.RoleAuditor)},
		Policy: pol, Evidence: ev, Receipts: ev, Tools: []tools.Tool{tool},
		InstanceID: "test", MaxBodyBytes: 4096, OpenAPI: OpenAPIDocument,
		PolicyRevision: func() string { return "rev-live" },
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, tool
}

func post(t *testing.T, url, key, body string) (int, wire.ToolCallResponse) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/tool-calls", strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out wire.ToolCallResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("response is not a ToolCallResponse: %v", err)
	}
	return resp.StatusCode, out
}

func TestPipelineOutcomes(t *testing.T) {
	t.Parallel()
	unavailable := fmt.Errorf("commit: %w", evidence.ErrUnavailable)
	cases := []struct {
		name        string
		policy      fakePolicy
		evidenceErr error
		key, body   string
		wantStatus  int
		wantCode    wire.Code // "" = success
		wantRuns    int32
		wantEvents  []string // decision values of decision events written
	}{
		{"allowed call runs after its decision is durable", fakePolicy{allow: true}, nil, agentKey, `{"tool":"Count","input":{}}`, 200, "", 1, []string{"allow"}},
		{"evidence down: never run", fakePolicy{allow: true}, unavailable, agentKey, `{"tool":"Count","input":{}}`, 503, wire.CodeEvidenceUnavailable, 0, nil},
		{"evidence down on a denial: 503, not unrecorded", fakePolicy{allow: false}, unavailable, agentKey, `{"tool":"Count","input":{}}`, 503, wire.CodeEvidenceUnavailable, 0, nil},
		{"policy denies", fakePolicy{allow: false}, nil, agentKey, `{"tool":"Count","input":{}}`, 403, wire.CodePermissionDenied, 0, []string{"deny"}},
		{"policy error fails closed", fakePolicy{err: errors.New("boom")}, nil, agentKey, `{"tool":"Count","input":{}}`, 500, wire.CodeInternal, 0, []string{"deny"}},
		{"enforcement refuses", fakePolicy{allow: true}, nil, agentKey, `{"tool":"Count","input":{"outside":1}}`, 403, wire.CodeFSDenied, 0, []string{"deny"}},
		{"unknown tool", fakePolicy{allow: true}, nil, agentKey, `{"tool":"Nope","input":{}}`, 404, wire.CodeUnknownTool, 0, []string{"invalid"}},
		{"tool rejects input", fakePolicy{allow: true}, nil, agentKey, `{"tool":"Count","input":{"bad":1}}`, 400, wire.CodeInvalidInput, 0, []string{"invalid"}},
		{"malformed JSON", fakePolicy{allow: true}, nil, agentKey, `{"tool":`, 400, wire.CodeInvalidInput, 0, []string{"invalid"}},
		{"unknown top-level field", fakePolicy{allow: true}, nil, agentKey, `{"tool":"Count","input":{},"x":1}`, 400, wire.CodeInvalidInput, 0, []string{"invalid"}},
		{"input not an object", fakePolicy{allow: true}, nil, agentKey, `{"tool":"Count","input":[1]}`, 400, wire.CodeInvalidInput, 0, []string{"invalid"}},
		{"invalid UTF-8", fakePolicy{allow: true}, nil, agentKey, "{\"tool\":\"Count\xff\",\"input\":{}}", 400, wire.CodeInvalidInput, 0, []string{"invalid"}},
		{"body too large", fakePolicy{allow: true}, nil, agentKey, `{"tool":"Count","input":{"x":"` + strings.Repeat("a", 5000) + `"}}`, 413, wire.CodeTooLarge, 0, []string{"invalid"}},
		{"wrong role", fakePolicy{allow: true}, nil, auditorKey, `{"tool":"Count","input":{}}`, 403, wire.CodeForbidden, 0, []string{"deny"}},
		{"no key: no receipt", fakePolicy{allow: true}, nil, "", `{"tool":"Count","input":{}}`, 401, wire.CodeUnauthenticated, 0, nil},
		{"unknown key", fakePolicy{allow: true}, nil, "nope", `{"tool":"Count","input":{}}`, 401, wire.CodeUnauthenticated, 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev := &memEvidence{err: tc.evidenceErr}
			ts, tool := testServer(t, tc.policy, ev)
			status, out := post(t, ts.URL, tc.key, tc.body)
			if status != tc.wantStatus {
				t.Errorf("status = %d, want %d (output %+v)", status, tc.wantStatus, out.Output.Error)
			}
			if tc.wantCode == "" {
				if !out.Output.Success || out.Output.Error != nil {
					t.Errorf("output = %+v, want success", out.Output)
				}
			} else if out.Output.Error == nil || out.Output.Error.Code != tc.wantCode {
				t.Errorf("error = %+v, want code %s", out.Output.Error, tc.wantCode)
			}
			if got := tool.runs.Load(); got != tc.wantRuns {
				t.Errorf("tool ran %d times, want %d", got, tc.wantRuns)
			}
			var decisions []string
			for _, e := range ev.events {
				if e.Kind == evidence.KindDecision {
					decisions = append(decisions, e.Decision)
					if e.PolicyRevision == "" {
						t.Errorf("decision event has no policy_revision: every receipt names the live policy")
					}
					if out.ReceiptID != e.ID.String() {
						t.Errorf("receipt_id = %q, decision event id = %s", out.ReceiptID, e.ID)
					}
				}
			}
			if strings.Join(decisions, ",") != strings.Join(tc.wantEvents, ",") {
				t.Errorf("decision events = %v, want %v", decisions, tc.wantEvents)
			}
			if len(tc.wantEvents) == 0 && out.ReceiptID != "" {
				t.Errorf("receipt_id %q set but no receipt was written", out.ReceiptID)
			}
			// Every receipt written is complete: decision plus outcome.
			if len(tc.wantEvents) > 0 && len(ev.events) != 2 {
				t.Errorf("wrote %d events, want decision + outcome", len(ev.events))
			}
		})
	}
}

func TestReceiptsNeedAuditor(t *testing.T) {
	t.Parallel()
	ts, _ := testServer(t, fakePolicy{allow: true}, &memEvidence{})
	for _, tc := range []struct {
		key, path string
		want      int
	}{
		{agentKey, "/v1/receipts", 403},
		{auditorKey, "/v1/receipts", 200},
		{"", "/v1/receipts", 401},
		{auditorKey, "/v1/receipts/not-a-uuid", 400},
		{auditorKey, "/v1/receipts/" + uuid.NewString(), 404},
		{auditorKey, "/v1/receipts?limit=0", 400},
		{auditorKey, "/v1/receipts?decision=maybe", 400},
		{auditorKey, "/v1/receipts?since=yesterday", 400},
		{auditorKey, "/v1/receipts?bogus=1", 400},
		{auditorKey, "/v1/tools", 403},
		{agentKey, "/v1/tools", 200},
		{"", "/healthz", 200},
		{"", "/openapi.json", 200},
	} {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+tc.path, nil)
		if tc.key != "" {
			req.Header.Set("Authorization", "Bearer "+tc.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s with %q: status %d, want %d (%v)", tc.path, tc.key, resp.StatusCode, tc.want, body)
		}
		if resp.StatusCode >= 400 {
			e, _ := body["error"].(map[string]any)
			if e == nil || e["code"] == "" || e["message"] == "" {
				t.Errorf("GET %s: error body %v lacks {error:{code,message}}", tc.path, body)
			}
		}
	}
}
