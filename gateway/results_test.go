package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/evidence/results"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/tools/readresult"
	"github.com/portcullis/portcullis/wire"
)

// TestReadToolResultThroughPipeline: the pipeline keeps an allowed call's
// output and runs read_tool_result as the authenticated caller, so an
// agent reads back its own result in its own session, and another
// principal or session naming the same receipt id gets not_found. A call
// without a session keeps nothing; read_tool_result's answers are not
// kept themselves.
func TestReadToolResultThroughPipeline(t *testing.T) {
	t.Parallel()
	store := results.New(results.Options{Dir: filepath.Join(t.TempDir(), "results"), Retention: time.Hour})
	ev := &memEvidence{}
	key := func(k, id string) Key {
		return Key{SHA256: sha256.Sum256([]byte(k)), Principal: wire.Principal{ID: id, Roles: []string{wire.RoleAgent}}}
	}
	s := New(Options{
		Keys:   []Key{key(agentKey, "agent-1"), key("other-key", "agent-2")},
		Policy: fakePolicy{allow: true}, Evidence: ev, Receipts: ev,
		Tools: []tools.Tool{&countingTool{}, readresult.New(store)}, Results: store, InstanceID: "test",
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	code, first := post(t, ts.URL, agentKey, `{"tool":"Count","input":{},"session_id":"run-1"}`)
	if code != 200 || first.ReceiptID == "" {
		t.Fatalf("Count: %d %+v", code, first)
	}
	read := func(key, session, id string) wire.ToolCallResponse {
		t.Helper()
		body := `{"tool":"read_tool_result","input":{"receipt_id":"` + id + `"},"session_id":"` + session + `"}`
		code, resp := post(t, ts.URL, key, body)
		if code != 200 || resp.ReceiptID == "" {
			t.Fatalf("read_tool_result: HTTP %d %+v", code, resp)
		}
		return resp
	}
	own := read(agentKey, "run-1", first.ReceiptID)
	b, _ := json.Marshal(own.Output.Data)
	if !own.Output.Success || !strings.Contains(string(b), `"ran":true`) || !strings.Contains(string(b), first.ReceiptID) {
		t.Fatalf("own result read back: %+v %s", own.Output, b)
	}
	for _, c := range []struct{ key, session string }{{"other-key", "run-1"}, {agentKey, "run-2"}} {
		r := read(c.key, c.session, first.ReceiptID)
		if r.Output.Success || r.Output.Error == nil || r.Output.Error.Code != wire.CodeNotFound {
			t.Errorf("read as %s/%s: %+v, want not_found", c.key, c.session, r.Output)
		}
	}
	// read_tool_result's own answer is not kept (no result of a result).
	if again := read(agentKey, "run-1", own.ReceiptID); again.Output.Error == nil || again.Output.Error.Code != wire.CodeNotFound {
		t.Errorf("a read_tool_result answer was kept: %+v", again.Output)
	}
	_, nosess := post(t, ts.URL, agentKey, `{"tool":"Count","input":{}}`)
	if r := read(agentKey, "run-1", nosess.ReceiptID); r.Output.Error == nil || r.Output.Error.Code != wire.CodeNotFound {
		t.Errorf("a call without a session kept its result: %+v", r.Output)
	}
}

// noResultsFor denies read_tool_result to one principal, allows the rest.
type noResultsFor struct{ principal string }

func (p noResultsFor) Decide(_ context.Context, in wire.PolicyInput) (wire.Decision, error) {
	if in.Tool == readresult.Name && in.Principal.ID == p.principal {
		return wire.Decision{Allow: false, Reasons: []string{"no"}}, nil
	}
	return wire.Decision{Allow: true, PolicyRevision: "rev-1"}, nil
}
func (noResultsFor) Ready() bool { return true }

// TestResultsKeptOnlyForReaders: no copy of an output is kept for a
// principal the policy does not let read it back.
func TestResultsKeptOnlyForReaders(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "results")
	store := results.New(results.Options{Dir: dir, Retention: time.Hour})
	ev := &memEvidence{}
	key := func(k, id string) Key {
		return Key{SHA256: sha256.Sum256([]byte(k)), Principal: wire.Principal{ID: id, Roles: []string{wire.RoleAgent}}}
	}
	s := New(Options{
		Keys:   []Key{key(agentKey, "agent-1"), key("other-key", "agent-2")},
		Policy: noResultsFor{"agent-2"}, Evidence: ev, Receipts: ev,
		Tools: []tools.Tool{&countingTool{}, readresult.New(store)}, Results: store, InstanceID: "test",
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	_, kept := post(t, ts.URL, agentKey, `{"tool":"Count","input":{},"session_id":"run-1"}`)
	_, notKept := post(t, ts.URL, "other-key", `{"tool":"Count","input":{},"session_id":"run-1"}`)
	store.Flush()
	if _, err := os.Stat(filepath.Join(dir, kept.ReceiptID+".json")); err != nil {
		t.Errorf("result of a principal who may read it back not kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, notKept.ReceiptID+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("result kept for a principal the policy does not let read it: %v", err)
	}
}
