package gateway

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// flakyStore is an evidence store whose appends fail on demand, either
// cleanly (nothing stored) or with the result lost (stored, yet reported
// failed, as when a connection dies after COMMIT). It enforces unique event
// ids like the real stores and answers Receipt from what it holds.
type flakyStore struct {
	mu      sync.Mutex
	events  []evidence.Event
	ids     map[uuid.UUID]bool
	fail    func(ev []evidence.Event) (store bool, err error) // nil: succeed
	healthy atomic.Bool
}

func newFlakyStore() *flakyStore {
	f := &flakyStore{ids: map[uuid.UUID]bool{}}
	f.healthy.Store(true)
	return f
}

func (f *flakyStore) Append(_ context.Context, ev ...evidence.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range ev {
		if f.ids[e.ID] {
			return fmt.Errorf("event %s: duplicate id", e.ID)
		}
	}
	store, err := true, error(nil)
	if f.fail != nil {
		store, err = f.fail(ev)
	}
	if store {
		for _, e := range ev {
			f.ids[e.ID] = true
		}
		f.events = append(f.events, ev...)
	}
	return err
}

func (f *flakyStore) Healthy() bool { return f.healthy.Load() }

func (f *flakyStore) Receipt(_ context.Context, id uuid.UUID) (wire.Receipt, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var rc wire.Receipt
	found := false
	for _, e := range f.events {
		if e.ReceiptID != id {
			continue
		}
		switch e.Kind {
		case evidence.KindDecision:
			found, rc.Decision = true, e.Decision
		case evidence.KindOutcome:
			rc.Outcome = e.Outcome
		}
	}
	if !found {
		return wire.Receipt{}, evidence.ErrNotFound
	}
	if rc.Outcome == nil {
		rc.Outcome = &wire.Outcome{Status: wire.StatusPending}
	}
	return rc, nil
}

func (f *flakyStore) Receipts(context.Context, evidence.Filter) (wire.ReceiptList, error) {
	return wire.ReceiptList{}, nil
}
func (f *flakyStore) Ping(context.Context) error { return nil }

// outcomes returns the outcome events stored for receipt id.
func (f *flakyStore) outcomes(id uuid.UUID) []evidence.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []evidence.Event
	for _, e := range f.events {
		if e.ReceiptID == id && e.Kind == evidence.KindOutcome {
			out = append(out, e)
		}
	}
	return out
}

var errDown = fmt.Errorf("commit: %w", evidence.ErrUnavailable)

// failKind fails the next append holding an event of kind, storing it
// when lost is true (the commit's result lost) and not otherwise.
func failKind(kind string, lost bool) func([]evidence.Event) (bool, error) {
	var done atomic.Bool
	return func(ev []evidence.Event) (bool, error) {
		if len(ev) == 1 && ev[0].Kind == kind && done.CompareAndSwap(false, true) {
			return lost, errDown
		}
		return true, nil
	}
}

// TestLateOutcomes: when an allowed call's outcome write fails, or its
// decision write fails with the result lost, the outcome the gateway knows
// is recorded once the store commits again, exactly once; a decision that
// never committed gets no orphan outcome.
func TestLateOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		fail       func([]evidence.Event) (bool, error)
		wantStatus int
		wantRuns   int32
		// After recovery: the receipt's outcomes (status, error code).
		wantOutcome string
		wantCode    string
		wantMetric  string
	}{
		{"outcome write failed", failKind(evidence.KindOutcome, false), http.StatusOK, 1, wire.StatusSucceeded, "", "recorded"},
		{"outcome committed, result lost", failKind(evidence.KindOutcome, true), http.StatusOK, 1, wire.StatusSucceeded, "", "already_recorded"},
		{"decision committed, result lost", failKind(evidence.KindDecision, true), http.StatusServiceUnavailable, 0, wire.StatusError, string(wire.CodeEvidenceUnavailable), "recorded"},
		{"decision never committed", failKind(evidence.KindDecision, false), http.StatusServiceUnavailable, 0, "", "", "no_decision"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newFlakyStore()
			var attempted atomic.Value // the receipt id of the decision written
			st.fail = func(ev []evidence.Event) (bool, error) {
				for _, e := range ev {
					if e.Kind == evidence.KindDecision {
						attempted.Store(e.ReceiptID)
					}
				}
				return tc.fail(ev)
			}
			var now atomic.Int64
			now.Store(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano())
			reg := prometheus.NewRegistry()
			tool := &countingTool{}
			s := New(Options{
				Keys:   []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
				Policy: fakePolicy{allow: true}, Evidence: st, Receipts: st, Tools: []tools.Tool{tool},
				InstanceID: "test", Registry: reg, Now: func() time.Time { return time.Unix(0, now.Load()) },
			})
			ts := httptest.NewServer(s.Handler())
			t.Cleanup(ts.Close)

			st.healthy.Store(false) // the store is failing while the call runs
			code, resp := post(t, ts.URL, agentKey, `{"tool":"Count","input":{}}`)
			if code != tc.wantStatus || tool.runs.Load() != tc.wantRuns {
				t.Fatalf("answer %d (ran %d times), want %d (ran %d): %+v", code, tool.runs.Load(), tc.wantStatus, tc.wantRuns, resp.Output)
			}
			if tc.wantStatus == http.StatusOK && resp.Output.Metadata["evidence_outcome"] != "unrecorded" {
				t.Errorf("metadata = %v, want evidence_outcome unrecorded", resp.Output.Metadata)
			}
			id, _ := attempted.Load().(uuid.UUID)

			// While the store is unhealthy nothing is tried.
			if n := s.FlushLate(context.Background()); n != 1 || len(st.outcomes(id)) > 1 {
				t.Fatalf("FlushLate while unhealthy left %d queued, %d outcomes", n, len(st.outcomes(id)))
			}
			before := len(st.outcomes(id))
			if before != 0 && tc.wantMetric != "already_recorded" {
				t.Fatalf("outcome stored before recovery: %+v", st.outcomes(id))
			}

			// Healthy again, but only just: nothing is tried until the
			// store has answered for evidence.LateSettle.
			st.healthy.Store(true)
			if n := s.FlushLate(context.Background()); n != 1 {
				t.Fatalf("FlushLate right after recovery left %d queued, want 1", n)
			}
			now.Add(int64(evidence.LateSettle))
			left := s.FlushLate(context.Background())
			if tc.wantStatus != http.StatusOK {
				// A "did not run" outcome waits out the decision write's
				// own deadline, then is checked once.
				if left != 1 {
					t.Fatalf("a refused call's outcome was checked before its write's deadline (%d queued)", left)
				}
				now.Add(int64(15 * time.Second)) // Options.EvidenceTimeout's default
				left = s.FlushLate(context.Background())
			}
			if left != 0 {
				t.Fatalf("%d outcomes still queued after recovery", left)
			}
			got := st.outcomes(id)
			if tc.wantOutcome == "" {
				if len(got) != 0 {
					t.Fatalf("orphan outcome written for a decision that never committed: %+v", got)
				}
			} else {
				if len(got) != 1 {
					t.Fatalf("receipt %s has %d outcomes, want exactly 1: %+v", id, len(got), got)
				}
				o := got[0].Outcome
				gotCode := ""
				if o.ErrorCode != nil {
					gotCode = *o.ErrorCode
				}
				if o.Status != tc.wantOutcome || gotCode != tc.wantCode {
					t.Errorf("outcome %s/%q, want %s/%q", o.Status, gotCode, tc.wantOutcome, tc.wantCode)
				}
			}
			if n := s.late.Counts()[tc.wantMetric]; n != 1 {
				t.Errorf("portcullis_evidence_late_outcomes_total{result=%q} = %v, want 1", tc.wantMetric, n)
			}
		})
	}
}

// TestLateOutcomesStoreStillFailing: a pass that cannot write keeps every
// outcome queued, in order, for the next one.
func TestLateOutcomesStoreStillFailing(t *testing.T) {
	t.Parallel()
	st := newFlakyStore()
	st.fail = failKind(evidence.KindOutcome, false)
	tool := &countingTool{}
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano())
	s := New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		Policy: fakePolicy{allow: true}, Evidence: st, Receipts: st, Tools: []tools.Tool{tool}, InstanceID: "test",
		Now: func() time.Time { return time.Unix(0, now.Load()) },
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	for range 3 {
		st.fail = failKind(evidence.KindOutcome, false)
		if code, _ := post(t, ts.URL, agentKey, `{"tool":"Count","input":{}}`); code != http.StatusOK {
			t.Fatalf("answer %d", code)
		}
	}
	st.fail = func([]evidence.Event) (bool, error) { return false, errDown }
	now.Add(int64(evidence.LateSettle))
	if n := s.FlushLate(context.Background()); n != 3 {
		t.Fatalf("FlushLate with the store failing left %d queued, want 3", n)
	}
	st.fail = nil
	now.Add(int64(evidence.LateSettle)) // the failed attempt counts as a failure of the store
	if n := s.FlushLate(context.Background()); n != 0 {
		t.Fatalf("FlushLate after recovery left %d queued", n)
	}
	outcomes := 0
	for _, e := range st.events {
		if e.Kind == evidence.KindOutcome {
			outcomes++
		}
	}
	if outcomes != 3 {
		t.Errorf("%d outcomes stored, want 3", outcomes)
	}
}

// TestLateOutcomesFloodKeepsKnown: an outage refuses every call, each a
// "did not run" candidate; however many there are, they never push out an
// outcome the gateway knows (a call that ran).
func TestLateOutcomesFloodKeepsKnown(t *testing.T) {
	t.Parallel()
	st := newFlakyStore()
	s := New(Options{Policy: fakePolicy{allow: true}, Evidence: st, Receipts: st, InstanceID: "test"})
	ran := evidence.Event{ID: uuid.New(), ReceiptID: uuid.New(), Kind: evidence.KindOutcome, Outcome: &wire.Outcome{Status: wire.StatusSucceeded}}
	s.late.Queue(ran, false)
	for range evidence.LateMax + 5 {
		s.late.Queue(evidence.NotRunOutcome(uuid.New(), s.opts.InstanceID, s.opts.Now()), true)
	}
	known, maybe := s.late.Pending()
	if known != 1 {
		t.Fatalf("%d known outcomes queued after the flood, want 1", known)
	}
	if maybe != evidence.LateMax {
		t.Errorf("%d did-not-run outcomes queued, want the bound %d", maybe, evidence.LateMax)
	}
	if n := s.late.Counts()["overflow"]; n != 5 {
		t.Errorf("overflow = %v, want 5", n)
	}
}
