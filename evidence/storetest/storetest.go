// Package storetest is the conformance suite every evidence.Store must
// pass, so PostgreSQL and SQLite provably keep the same promises: exact
// round trips, idempotent appends, filters and keyset pagination, pending
// and interrupted calls, append-only storage, dense, verifiable chains
// under concurrent group commit, and retention that verify accepts.
package storetest

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// RawExecer is implemented by stores that can run a raw statement; the
// suite uses it to prove the database refuses UPDATE and DELETE itself.
type RawExecer interface {
	RawExec(ctx context.Context, sql string) error
}

// Downgrader rolls a store's schema back to an older version, so a test can
// upgrade a store of that age.
type Downgrader interface {
	MigrateDownTo(ctx context.Context, version int64) error
}

// Run runs the suite. open must return a fresh, empty store for each call
// and arrange its cleanup (including Close) with t.Cleanup.
func Run(t *testing.T, open func(t *testing.T) evidence.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s evidence.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"ReceiptShape", testReceiptShape},
		{"Idempotent", testIdempotent},
		{"PendingAndNotFound", testPending},
		{"Filters", testFilters},
		{"Pagination", testPagination},
		{"ChainHead", testChainHead},
		{"AppendOnly", testAppendOnly},
		{"ConcurrentWriter", testConcurrentWriter},
		{"ChainLinksAcrossRestarts", testChainLinks},
		{"RecoverInterrupted", testRecover},
		{"BodyKinds", testBodyKinds},
		{"OutcomeFilterLatest", testOutcomeFilterLatest},
		{"AuditorProofsAndStats", testAuditor},
		{"StatsToolDecisionRules", testStatsToolDecisionRules},
		{"Checkpoints", testCheckpoints},
		{"TwoProcesses", testTwoProcesses},
		{"RuleIDs", testRuleIDs},
		{"Retention", testRetention},
		{"RetentionRefusesUnsealed", testRetentionRefusesUnsealed},
		{"LegalHoldBlocksRetention", testLegalHoldBlocksRetention},
		{"LegalHoldRecordKept", testLegalHoldRecordKept},
		{"LegalHoldLock", testLegalHoldLock},
		{"LegalHoldErrors", testLegalHoldErrors},
		{"QuotaExact", testQuotaExact},
		{"QuotaInDecisionCommit", testQuotaInDecisionCommit},
		{"ParkedExactlyOnce", testParkedExactlyOnce},
		{"UnansweredRuns", testUnansweredRuns},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, open func(t *testing.T) evidence.Store)
	}{
		{"Tampering", testTampering},
		{"VerifyEmpty", testVerifyEmpty},
		{"VerifyDeletedTail", testVerifyDeletedTail},
		{"VerifyRollups", testVerifyRollups},
		{"VerifyUnheadedChain", testVerifyUnheadedChain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open)
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func ptr[T any](v T) *T { return &v }

// fullDecision has every decision field set to something distinctive.
func fullDecision(t *testing.T, at time.Time) evidence.Event {
	id := newID(t)
	parent := newID(t)
	return evidence.Event{
		ID: id, ReceiptID: id, Kind: evidence.KindDecision, Time: at, InstanceID: "inst-a",
		PrincipalID: "agent-alpha", SessionID: "run-42", CallID: "call_abc", Tool: "Exec",
		Decision: wire.DecisionAllow, Reasons: []string{"granted by rule x", "ünïcode ✓"},
		PolicyRevision: "rev-7", ArgsSHA256: evidence.ArgsDigest([]byte(`{"argv":["/bin/echo","hi"]}`)),
		Args: json.RawMessage(`{"argv": ["/bin/echo", "hi"],  "env": {"K": "[REDACTED]"}, "n": 1.50}`),
		Scope: &wire.Scope{
			FSGrants: []wire.FSGrant{{Path: "/srv/work", Mode: wire.ModeReadWrite, Alias: "@project"}},
			Network:  wire.Network{Posture: wire.PostureAllowlist, Allow: []string{"api.github.com:443"}},
			EnvNames: []string{"CI"},
			Limits:   wire.Limits{TimeoutS: 60, MemoryBytes: 1 << 29},
			Backend:  "bwrap",
		},
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", ParentReceiptID: &parent, ErrorCode: "",
		RuleIDs: []string{"grant:role/agent/Exec", "exec.shape.git.log"},
		ChainID: newID(t), ChainSeq: 7, PrevHash: make([]byte, 32), Hash: []byte("0123456789abcdef0123456789abcdef"),
	}
}

func outcomeFor(t *testing.T, receipt uuid.UUID, at time.Time, status string) evidence.Event {
	ot := at.Add(time.Second)
	return evidence.Event{
		ID: newID(t), ReceiptID: receipt, Kind: evidence.KindOutcome, Time: at, InstanceID: "inst-a",
		Outcome: &wire.Outcome{Status: status, ExitCode: ptr(3), OutputSHA256: "ab12", DurationMS: 42,
			Backend: "bwrap", Time: &ot},
		ChainID: newID(t), ChainSeq: 8, PrevHash: []byte("0123456789abcdef0123456789abcdef"), Hash: []byte("fedcba9876543210fedcba9876543210"),
	}
}

func chainEvents(t *testing.T, s evidence.Store, chain uuid.UUID) []evidence.Event {
	t.Helper()
	evs, err := s.ChainEvents(ctxFor(t), chain)
	if err != nil {
		t.Fatalf("ChainEvents(%s): %v", chain, err)
	}
	return evs
}

// testRoundTrip appends events with every field set and reads them back
// unchanged, byte for byte where bytes are stored.
func testRoundTrip(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	at := evidence.NormalizeTime(time.Now())
	d := fullDecision(t, at)
	o := outcomeFor(t, d.ID, at.Add(5*time.Millisecond), wire.StatusSucceeded)
	o.Outcome.ErrorCode = ptr("timeout")
	bare := evidence.Event{ // optional fields absent
		ID: newID(t), Kind: evidence.KindDecision, Time: at, InstanceID: "inst-a", Decision: wire.DecisionDeny,
		ChainID: d.ChainID, ChainSeq: 9,
	}
	bare.ReceiptID = bare.ID
	if err := s.Append(ctx, []evidence.Event{d, o, bare}); err != nil {
		t.Fatalf("Append: %v", err)
	}
	for _, want := range []evidence.Event{d, o, bare} {
		got := chainEvents(t, s, want.ChainID)
		i := slices.IndexFunc(got, func(e evidence.Event) bool { return e.ID == want.ID })
		if i < 0 {
			t.Fatalf("event %s not in its chain", want.ID)
		}
		if diff := cmp.Diff(want, got[i]); diff != "" {
			t.Errorf("event %s round trip (-want +got):\n%s", want.Kind, diff)
		}
		// The content hash is the integrity contract: it must survive too.
		wantEnc, err := evidence.CanonicalEncoding(want)
		if err != nil {
			t.Fatal(err)
		}
		gotEnc, err := evidence.CanonicalEncoding(got[i])
		if err != nil {
			t.Fatal(err)
		}
		if string(wantEnc) != string(gotEnc) {
			t.Errorf("canonical encoding of %s changed across the store", want.ID)
		}
	}
}

// testReceiptShape checks the API receipt assembled from the two events.
func testReceiptShape(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	at := evidence.NormalizeTime(time.Now())
	d := fullDecision(t, at)
	first := outcomeFor(t, d.ID, at.Add(time.Millisecond), wire.StatusInterrupted)
	last := outcomeFor(t, d.ID, at.Add(2*time.Millisecond), wire.StatusSucceeded)
	if err := s.Append(ctx, []evidence.Event{d, last, first}); err != nil {
		t.Fatalf("Append: %v", err)
	}
	got, err := s.Receipt(ctx, d.ID)
	if err != nil {
		t.Fatalf("Receipt: %v", err)
	}
	want := wire.Receipt{
		ID: d.ID.String(), Time: at, PrincipalID: d.PrincipalID, SessionID: d.SessionID, CallID: d.CallID,
		Tool: d.Tool, Decision: d.Decision, Reasons: d.Reasons, RuleIDs: d.RuleIDs, PolicyRevision: d.PolicyRevision,
		ArgsSHA256: d.ArgsSHA256, Args: d.Args, Scope: d.Scope, Outcome: last.Outcome, TraceID: d.TraceID,
		ParentReceiptID: ptr(d.ParentReceiptID.String()),
		InstanceID:      "inst-a", CompletedAt: last.Outcome.Time, DurationMS: ptr(int64(42)),
		Chain: &wire.ReceiptChain{ID: d.ChainID.String(), Seq: 7, Hash: hex.EncodeToString(d.Hash)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Receipt (-want +got):\n%s", diff)
	}
	list, err := s.Receipts(ctx, evidence.Filter{})
	if err != nil {
		t.Fatalf("Receipts: %v", err)
	}
	if len(list.Receipts) != 1 {
		t.Fatalf("Receipts returned %d receipts, want 1 (outcomes are not receipts)", len(list.Receipts))
	}
	if diff := cmp.Diff(want, list.Receipts[0]); diff != "" {
		t.Errorf("Receipts[0] (-want +got):\n%s", diff)
	}
}

func testIdempotent(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	at := evidence.NormalizeTime(time.Now())
	d := fullDecision(t, at)
	o := outcomeFor(t, d.ID, at, wire.StatusSucceeded)
	o.ChainID = d.ChainID
	evs := []evidence.Event{d, o}
	for i := range 3 {
		if err := s.Append(ctx, evs); err != nil {
			t.Fatalf("Append #%d: %v", i+1, err)
		}
	}
	// A retry that mixes old and new events keeps the old once and adds the new.
	d2 := fullDecision(t, at)
	d2.ChainID = d.ChainID
	if err := s.Append(ctx, []evidence.Event{d, d2}); err != nil {
		t.Fatalf("Append mixed retry: %v", err)
	}
	got := chainEvents(t, s, d.ChainID)
	if len(got) != 3 {
		t.Fatalf("chain holds %d events after retries, want 3", len(got))
	}
	list, err := s.Receipts(ctx, evidence.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Receipts) != 2 {
		t.Errorf("%d receipts after retries, want 2", len(list.Receipts))
	}
}

func testPending(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	at := evidence.NormalizeTime(time.Now())
	open := fullDecision(t, at)
	closed := fullDecision(t, at)
	deny := fullDecision(t, at)
	deny.Decision = wire.DecisionDeny
	other := fullDecision(t, at)
	other.InstanceID = "inst-b"
	if err := s.Append(ctx, []evidence.Event{open, closed, deny, other, outcomeFor(t, closed.ID, at, wire.StatusFailed)}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Receipt(ctx, open.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&wire.Outcome{Status: wire.StatusPending}, r.Outcome); diff != "" {
		t.Errorf("receipt without outcome (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		instance string
		want     []uuid.UUID
	}{
		{"inst-a", []uuid.UUID{open.ID}},
		{"inst-b", []uuid.UUID{other.ID}},
		{"inst-c", nil},
	} {
		got, err := s.PendingDecisions(ctx, tc.instance)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got, cmpEmpty); diff != "" {
			t.Errorf("PendingDecisions(%s) (-want +got):\n%s", tc.instance, diff)
		}
	}
	_, err = s.Receipt(ctx, newID(t))
	if !errors.Is(err, evidence.ErrNotFound) {
		t.Errorf("Receipt(unknown) error = %v, want ErrNotFound", err)
	}
	// An outcome id is not a receipt id.
	_, err = s.Receipt(ctx, closed.ID)
	if err != nil {
		t.Errorf("Receipt(closed): %v", err)
	}
}

var cmpEmpty = cmp.Comparer(func(a, b []uuid.UUID) bool { return slices.Equal(a, b) })

// dataset writes receipts spread over principals, tools, decisions,
// sessions and time, some sharing a timestamp, and returns their decision
// events newest first (the order the API promises).
func dataset(t *testing.T, s evidence.Store, n int) []evidence.Event {
	ctx := ctxFor(t)
	base := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	principals := []string{"agent-alpha", "agent-beta"}
	tools := []string{"Exec", "fs.read", "http.get"}
	decisions := []string{wire.DecisionAllow, wire.DecisionDeny, wire.DecisionInvalid}
	var evs, decs []evidence.Event
	chain := newID(t)
	for i := range n {
		at := base.Add(time.Duration(i/2) * time.Hour) // pairs share a timestamp
		id := newID(t)
		d := evidence.Event{
			ID: id, ReceiptID: id, Kind: evidence.KindDecision, Time: at, InstanceID: "inst-a",
			PrincipalID: principals[i%2], Tool: tools[i%3], Decision: decisions[i%3],
			SessionID: fmt.Sprintf("run-%d", i%4), ChainID: chain, ChainSeq: int64(len(evs) + 1),
			PrevHash: []byte{}, Hash: []byte{}, RuleIDs: datasetRules[i%4],
		}
		if i%2 == 0 {
			d.Args, _ = json.Marshal(map[string]string{"path": fmt.Sprintf("/srv/Work/file-%d.txt", i%5), "html": "<b>x</b> 100%"})
		}
		if d.Decision == wire.DecisionDeny {
			d.Reasons = []string{fmt.Sprintf("Denied: ticket_%d needs approval", i%4)}
		}
		evs = append(evs, d)
		decs = append(decs, d)
		if d.Decision != wire.DecisionAllow || i%2 == 0 {
			o := evidence.Event{ID: newID(t), ReceiptID: id, Kind: evidence.KindOutcome, Time: at.Add(time.Millisecond),
				InstanceID: "inst-a", Outcome: &wire.Outcome{Status: wire.StatusError, ErrorCode: ptr("permission_denied")},
				ChainID: chain, ChainSeq: int64(len(evs) + 1), PrevHash: []byte{}, Hash: []byte{}}
			evs = append(evs, o)
		}
	}
	// Insert in a scrambled order: the store, not insertion, orders.
	slices.Reverse(evs[len(evs)/2:])
	if err := s.Append(ctx, evs); err != nil {
		t.Fatalf("Append dataset: %v", err)
	}
	slices.SortFunc(decs, func(a, b evidence.Event) int {
		if c := b.Time.Compare(a.Time); c != 0 {
			return c
		}
		return slices.Compare(b.ID[:], a.ID[:])
	})
	return decs
}

// datasetRules are the rule ids of dataset's decision i: datasetRules[i%4].
var datasetRules = [][]string{
	{"grants.no_grant"},
	{"grant:role/agent/Exec", "exec.shape.git.log"},
	nil,
	{"exec.shape.git.log", "exec.env_deny", "exec.caller_env"},
}

func ids(rs []wire.Receipt) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// textIn is the text filter's oracle: a decoded argument value or a
// reason contains text, ASCII case folded.
func textIn(text string) func(e evidence.Event) bool {
	return func(e evidence.Event) bool {
		var args map[string]string
		_ = json.Unmarshal(e.Args, &args)
		for _, v := range args {
			if strings.Contains(strings.ToLower(v), text) {
				return true
			}
		}
		for _, r := range e.Reasons {
			if strings.Contains(strings.ToLower(r), text) {
				return true
			}
		}
		return false
	}
}

func testFilters(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	decs := dataset(t, s, 24)
	base := decs[len(decs)-1].Time
	since, until := base.Add(3*time.Hour), base.Add(8*time.Hour)
	tests := []struct {
		name string
		f    evidence.Filter
		keep func(e evidence.Event) bool
	}{
		{"none", evidence.Filter{}, func(evidence.Event) bool { return true }},
		{"principal", evidence.Filter{Principal: "agent-beta"}, func(e evidence.Event) bool { return e.PrincipalID == "agent-beta" }},
		{"tool", evidence.Filter{Tool: "fs.read"}, func(e evidence.Event) bool { return e.Tool == "fs.read" }},
		{"decision", evidence.Filter{Decision: wire.DecisionDeny}, func(e evidence.Event) bool { return e.Decision == wire.DecisionDeny }},
		{"session", evidence.Filter{SessionID: "run-3"}, func(e evidence.Event) bool { return e.SessionID == "run-3" }},
		{"since", evidence.Filter{Since: since}, func(e evidence.Event) bool { return !e.Time.Before(since) }},
		{"until", evidence.Filter{Until: until}, func(e evidence.Event) bool { return e.Time.Before(until) }},
		{"since+until", evidence.Filter{Since: since, Until: until}, func(e evidence.Event) bool {
			return !e.Time.Before(since) && e.Time.Before(until)
		}},
		{"combined", evidence.Filter{Principal: "agent-alpha", Tool: "Exec", Since: since}, func(e evidence.Event) bool {
			return e.PrincipalID == "agent-alpha" && e.Tool == "Exec" && !e.Time.Before(since)
		}},
		{"no match", evidence.Filter{Principal: "agent-alpha", Decision: wire.DecisionAllow, SessionID: "run-1"}, func(e evidence.Event) bool {
			return e.PrincipalID == "agent-alpha" && e.Decision == wire.DecisionAllow && e.SessionID == "run-1"
		}},
		{"outcome pending", evidence.Filter{Status: wire.StatusPending}, func(e evidence.Event) bool { return !hasOutcome(e) }},
		{"outcome error", evidence.Filter{Status: wire.StatusError}, hasOutcome},
		{"outcome succeeded", evidence.Filter{Status: wire.StatusSucceeded}, func(evidence.Event) bool { return false }},
		{"error_code", evidence.Filter{ErrorCode: "permission_denied"}, hasOutcome},
		{"error_code no match", evidence.Filter{ErrorCode: "timeout"}, func(evidence.Event) bool { return false }},
		{"outcome+decision+since", evidence.Filter{Status: wire.StatusError, Decision: wire.DecisionAllow, Since: since}, func(e evidence.Event) bool {
			return hasOutcome(e) && e.Decision == wire.DecisionAllow && !e.Time.Before(since)
		}},
		{"rule", evidence.Filter{Rule: "exec.shape.git.log"}, func(e evidence.Event) bool { return slices.Contains(e.RuleIDs, "exec.shape.git.log") }},
		{"rule single", evidence.Filter{Rule: "grants.no_grant"}, func(e evidence.Event) bool { return slices.Contains(e.RuleIDs, "grants.no_grant") }},
		{"rule is an exact element, not a prefix", evidence.Filter{Rule: "exec.shape.git"}, func(evidence.Event) bool { return false }},
		{"rule+principal+until", evidence.Filter{Rule: "exec.env_deny", Principal: "agent-beta", Until: until}, func(e evidence.Event) bool {
			return slices.Contains(e.RuleIDs, "exec.env_deny") && e.PrincipalID == "agent-beta" && e.Time.Before(until)
		}},
		{"rule+error_code", evidence.Filter{Rule: "grants.no_grant", ErrorCode: "permission_denied"}, func(e evidence.Event) bool {
			return slices.Contains(e.RuleIDs, "grants.no_grant") && hasOutcome(e)
		}},
		{"text in args, any case", evidence.Filter{Text: "work/FILE-3"}, textIn("work/file-3")},
		{"text in reasons", evidence.Filter{Text: "ticket_1 needs"}, textIn("ticket_1 needs")},
		{"text that JSON escapes", evidence.Filter{Text: "<b>X</b>"}, textIn("<b>x</b>")},
		{"text % is literal", evidence.Filter{Text: "100%"}, textIn("100%")},
		{"text _ is literal", evidence.Filter{Text: "ticket_"}, textIn("ticket_")},
		{"text wildcard no match", evidence.Filter{Text: "t%t"}, func(evidence.Event) bool { return false }},
		{"text quote no match", evidence.Filter{Text: `'); DROP TABLE evidence_events; --`}, func(evidence.Event) bool { return false }},
		{"text+decision", evidence.Filter{Text: "file-", Decision: wire.DecisionInvalid}, func(e evidence.Event) bool {
			return textIn("file-")(e) && e.Decision == wire.DecisionInvalid
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var want []string
			for _, d := range decs {
				if tc.keep(d) {
					want = append(want, d.ID.String())
				}
			}
			list, err := s.Receipts(ctx, tc.f)
			if err != nil {
				t.Fatalf("Receipts(%+v): %v", tc.f, err)
			}
			if diff := cmp.Diff(want, ids(list.Receipts), cmp.Comparer(func(a, b []string) bool { return slices.Equal(a, b) })); diff != "" {
				t.Errorf("Receipts(%+v) ids (-want +got):\n%s", tc.f, diff)
			}
			if list.NextCursor != "" {
				t.Errorf("NextCursor = %q on a complete page, want empty", list.NextCursor)
			}
			for _, r := range list.Receipts {
				if r.Outcome == nil {
					t.Fatalf("receipt %s has no outcome", r.ID)
				}
				wantStatus := wire.StatusError
				if r.Decision == wire.DecisionAllow {
					wantStatus = r.Outcome.Status // allow: pending or error, checked below
					if wantStatus != wire.StatusPending && wantStatus != wire.StatusError {
						t.Errorf("allow receipt %s status %q", r.ID, wantStatus)
					}
				}
				if r.Outcome.Status != wantStatus {
					t.Errorf("receipt %s status %q, want %q", r.ID, r.Outcome.Status, wantStatus)
				}
			}
		})
	}
	t.Run("bad decision", func(t *testing.T) {
		t.Parallel()
		if _, err := s.Receipts(ctx, evidence.Filter{Decision: "maybe"}); !errors.Is(err, evidence.ErrBadFilter) {
			t.Errorf("error = %v, want ErrBadFilter", err)
		}
	})
	t.Run("bad rule", func(t *testing.T) {
		t.Parallel()
		if _, err := s.Receipts(ctx, evidence.Filter{Rule: "no spaces allowed"}); !errors.Is(err, evidence.ErrBadFilter) {
			t.Errorf("error = %v, want ErrBadFilter", err)
		}
	})
	t.Run("bad outcome", func(t *testing.T) {
		t.Parallel()
		if _, err := s.Receipts(ctx, evidence.Filter{Status: "done"}); !errors.Is(err, evidence.ErrBadFilter) {
			t.Errorf("error = %v, want ErrBadFilter", err)
		}
	})
}

// hasOutcome says which of dataset's decisions got an outcome event: every
// refusal, and the allowed calls of even i (principal agent-alpha).
func hasOutcome(e evidence.Event) bool {
	return e.Decision != wire.DecisionAllow || e.PrincipalID == "agent-alpha"
}

// testOutcomeFilterLatest: the outcome filters match the outcome the
// receipt shows (the latest), not any outcome ever written for it.
func testOutcomeFilterLatest(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	at := time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)
	d := fullDecision(t, at)
	first := outcomeFor(t, d.ID, at.Add(time.Second), wire.StatusSucceeded)
	second := outcomeFor(t, d.ID, at.Add(2*time.Second), wire.StatusFailed)
	second.Outcome.ErrorCode = ptr("fs_denied")
	if err := s.Append(ctx, []evidence.Event{d, first, second}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    evidence.Filter
		want int
	}{
		{evidence.Filter{Status: wire.StatusFailed}, 1},
		{evidence.Filter{Status: wire.StatusSucceeded}, 0},
		{evidence.Filter{Status: wire.StatusPending}, 0},
		{evidence.Filter{ErrorCode: "fs_denied"}, 1},
		{evidence.Filter{ErrorCode: "fs_denied", Status: wire.StatusFailed, Principal: "agent-alpha"}, 1},
	} {
		list, err := s.Receipts(ctx, tc.f)
		if err != nil {
			t.Fatalf("Receipts(%+v): %v", tc.f, err)
		}
		if len(list.Receipts) != tc.want {
			t.Errorf("Receipts(%+v) = %d receipts, want %d", tc.f, len(list.Receipts), tc.want)
		}
	}
}

func testPagination(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	decs := dataset(t, s, 7)
	for _, f := range []evidence.Filter{{Limit: 2}, {Limit: 3, Principal: "agent-alpha"}, {Limit: 1, Tool: "Exec"}} {
		var got []string
		var expect []string
		for _, d := range decs {
			if (f.Principal == "" || d.PrincipalID == f.Principal) && (f.Tool == "" || d.Tool == f.Tool) {
				expect = append(expect, d.ID.String())
			}
		}
		pages := 0
		for {
			list, err := s.Receipts(ctx, f)
			if err != nil {
				t.Fatalf("Receipts(%+v): %v", f, err)
			}
			pages++
			if len(list.Receipts) > f.Limit {
				t.Fatalf("page of %d receipts, limit %d", len(list.Receipts), f.Limit)
			}
			got = append(got, ids(list.Receipts)...)
			if list.NextCursor == "" {
				break
			}
			if pages > len(decs)+1 {
				t.Fatalf("pagination does not terminate")
			}
			f.Cursor = list.NextCursor
		}
		if !slices.Equal(expect, got) {
			t.Errorf("walked pages %v\nwant %v", got, expect)
		}
	}
	for _, bad := range []string{"not-a-cursor!", "Zm9v", evidence.EncodeCursor(time.Now(), uuid.Nil)[:10]} {
		if _, err := s.Receipts(ctx, evidence.Filter{Cursor: bad}); !errors.Is(err, evidence.ErrBadCursor) {
			t.Errorf("Receipts(cursor %q) error = %v, want ErrBadCursor", bad, err)
		}
	}
	list, err := s.Receipts(ctx, evidence.Filter{Limit: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Receipts) != len(decs) {
		t.Errorf("limit above max returned %d receipts, want %d", len(list.Receipts), len(decs))
	}
}

func testChainHead(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	chain, seq, hash, err := s.ChainHead(ctx, "inst-a")
	if err != nil || chain != uuid.Nil || seq != 0 || hash != nil {
		t.Fatalf("ChainHead on empty store = %s %d %x %v, want zero", chain, seq, hash, err)
	}
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-a"})
	for i := range 3 {
		if err := w.Append(ctx, decision(t, fmt.Sprintf("call-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	closeWriter(t, w)
	chain, seq, hash, err = s.ChainHead(ctx, "inst-a")
	if err != nil {
		t.Fatal(err)
	}
	evs := chainEvents(t, s, chain)
	if len(evs) != 4 || seq != 4 || string(hash) != string(evs[3].Hash) {
		t.Errorf("ChainHead = seq %d hash %x; chain has %d events ending %x", seq, hash, len(evs), evs[len(evs)-1].Hash)
	}
	if c, _, _, _ := s.ChainHead(ctx, "inst-b"); c != uuid.Nil {
		t.Errorf("ChainHead of another instance = %s, want none", c)
	}
}

func decision(t *testing.T, call string) evidence.Event {
	return evidence.Event{ID: newID(t), Kind: evidence.KindDecision, PrincipalID: "agent-alpha", Tool: "Exec",
		CallID: call, Decision: wire.DecisionAllow, Args: json.RawMessage(`{"argv":["/bin/true"]}`)}
}

// testRuleIDs: rule ids written through the Writer come back in order on
// the receipt, are covered by the chain hash, and page with the rule filter.
func testRuleIDs(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-r"})
	with := decision(t, "with")
	with.Decision = wire.DecisionDeny
	with.RuleIDs = []string{"exec.shape_mismatch", "exec.argv0_dir"}
	without := decision(t, "without")
	var paged []evidence.Event
	for i := range 3 {
		d := decision(t, fmt.Sprintf("paged-%d", i))
		d.RuleIDs = []string{"grant:role/agent/Exec", "exec.shape.any.--version"}
		paged = append(paged, d)
	}
	for _, e := range append([]evidence.Event{with, without}, paged...) {
		if err := w.Append(ctx, e); err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	bad := decision(t, "bad")
	bad.RuleIDs = []string{"has space"}
	if err := w.Append(ctx, bad); !errors.Is(err, evidence.ErrInvalidEvent) {
		t.Errorf("Append with a malformed rule id = %v, want ErrInvalidEvent", err)
	}
	closeWriter(t, w)

	r, err := s.Receipt(ctx, with.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.RuleIDs, with.RuleIDs) {
		t.Errorf("receipt rule_ids = %q, want %q (in policy order)", r.RuleIDs, with.RuleIDs)
	}
	r, err = s.Receipt(ctx, without.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.RuleIDs == nil || len(r.RuleIDs) != 0 {
		t.Errorf("receipt without rule ids: rule_ids = %#v, want an empty array", r.RuleIDs)
	}

	// The chain verifies from stored rows, and a changed rule id breaks it.
	chain, _, _, err := s.ChainHead(ctx, "inst-r")
	if err != nil {
		t.Fatal(err)
	}
	evs := chainEvents(t, s, chain)
	if err := evidence.VerifyChain(evs); err != nil {
		t.Fatalf("VerifyChain: %v", err)
	}
	for i := range evs {
		if evs[i].ID == with.ID {
			evs[i].RuleIDs = []string{"exec.shape_mismatch"}
		}
	}
	if err := evidence.VerifyChain(evs); !errors.Is(err, evidence.ErrChainBroken) {
		t.Errorf("VerifyChain after dropping a rule id = %v, want ErrChainBroken", err)
	}

	// Keyset pages under the rule filter see each match exactly once.
	var got []string
	f := evidence.Filter{Rule: "exec.shape.any.--version", Limit: 2}
	for {
		list, err := s.Receipts(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(list.Receipts)...)
		if list.NextCursor == "" {
			break
		}
		f.Cursor = list.NextCursor
	}
	slices.Sort(got)
	var want []string
	for _, d := range paged {
		want = append(want, d.ID.String())
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("rule filter pages = %v, want %v", got, want)
	}
}

func closeWriter(t *testing.T, w *evidence.Writer) {
	t.Helper()
	if err := w.Close(ctxFor(t)); err != nil {
		t.Fatalf("Writer.Close: %v", err)
	}
}

func testAppendOnly(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	raw, ok := s.(RawExecer)
	if !ok {
		t.Skip("store has no RawExec")
	}
	d := fullDecision(t, evidence.NormalizeTime(time.Now()))
	if err := s.Append(ctx, []evidence.Event{d}); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"UPDATE evidence_events SET tool = 'forged'",
		"DELETE FROM evidence_events",
		"DELETE FROM evidence_events WHERE tool = 'Exec'",
	} {
		if err := raw.RawExec(ctx, stmt); err == nil {
			t.Errorf("%q succeeded; evidence must be append-only", stmt)
		}
	}
	r, err := s.Receipt(ctx, d.ID)
	if err != nil || r.Tool != "Exec" {
		t.Errorf("after refused changes: receipt tool %q, err %v", r.Tool, err)
	}
}

// testConcurrentWriter: 64 goroutines × 50 events through one Writer. Every
// event is stored, the chain is dense and every hash recomputes.
func testConcurrentWriter(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	const goroutines, per = 64, 50
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-a"})
	var (
		mu   sync.Mutex
		want = map[uuid.UUID]bool{}
		wg   sync.WaitGroup
		errs = make(chan error, goroutines)
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i += 2 {
				d := decision(t, fmt.Sprintf("g%d-%d", g, i))
				o := evidence.Event{ID: newID(t), ReceiptID: d.ID, Kind: evidence.KindOutcome,
					Outcome: &wire.Outcome{Status: wire.StatusSucceeded, ExitCode: ptr(0)}}
				if err := w.Append(ctx, d); err != nil {
					errs <- err
					return
				}
				if err := w.Append(ctx, o); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				want[d.ID], want[o.ID] = true, true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Append: %v", err)
	}
	closeWriter(t, w)
	chain, seq, _, err := s.ChainHead(ctx, "inst-a")
	if err != nil {
		t.Fatal(err)
	}
	evs := chainEvents(t, s, chain)
	if got, wantN := int64(len(evs)), int64(goroutines*per+1); got != wantN || seq != wantN {
		t.Fatalf("chain has %d events, head seq %d; want %d (chain_start + %d)", got, seq, wantN, goroutines*per)
	}
	for _, e := range evs[1:] {
		if !want[e.ID] {
			t.Errorf("unexpected event %s in chain", e.ID)
		}
		delete(want, e.ID)
	}
	if len(want) != 0 {
		t.Errorf("%d acknowledged events missing from the chain", len(want))
	}
	if err := evidence.VerifyChain(evs); err != nil {
		t.Errorf("VerifyChain: %v", err)
	}
	pending, err := s.PendingDecisions(ctx, "inst-a")
	if err != nil || len(pending) != 0 {
		t.Errorf("PendingDecisions = %d, %v; want none", len(pending), err)
	}
}

// testChainLinks: a second writer process of the same instance starts a new
// chain whose chain_start links to the first chain's head.
func testChainLinks(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	var chains []uuid.UUID
	for run := range 3 {
		w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-a"})
		for i := range 2 + run {
			if err := w.Append(ctx, decision(t, fmt.Sprintf("r%d-%d", run, i))); err != nil {
				t.Fatal(err)
			}
		}
		closeWriter(t, w)
		c, _, _, err := s.ChainHead(ctx, "inst-a")
		if err != nil {
			t.Fatal(err)
		}
		chains = append(chains, c)
	}
	var prev []evidence.Event
	for i, c := range chains {
		evs := chainEvents(t, s, c)
		if err := evidence.VerifyChain(evs); err != nil {
			t.Fatalf("chain %d: %v", i, err)
		}
		if len(evs) != 3+i {
			t.Errorf("chain %d has %d events, want %d", i, len(evs), 3+i)
		}
		var link evidence.ChainLink
		if err := json.Unmarshal(evs[0].Args, &link); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if link.PrevChainID != "" || link.PrevChainSeq != 0 || string(evs[0].PrevHash) != string(make([]byte, 32)) {
				t.Errorf("first chain links to %+v", link)
			}
		} else {
			head := prev[len(prev)-1]
			if link.PrevChainID != head.ChainID.String() || link.PrevChainSeq != head.ChainSeq || string(evs[0].PrevHash) != string(head.Hash) {
				t.Errorf("chain %d links to %+v, want %s/%d", i, link, head.ChainID, head.ChainSeq)
			}
		}
		prev = evs
	}
	// Tampering with any stored event is detected.
	evs := chainEvents(t, s, chains[2])
	evs[2].Tool = "forged"
	if err := evidence.VerifyChain(evs); !errors.Is(err, evidence.ErrChainBroken) {
		t.Errorf("VerifyChain(tampered) = %v, want ErrChainBroken", err)
	}
}

func testRecover(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	w1 := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-a"})
	inflight1, inflight2, done := decision(t, "a"), decision(t, "b"), decision(t, "c")
	deny := decision(t, "d")
	deny.Decision = wire.DecisionDeny
	if err := w1.Append(ctx, inflight1, inflight2, done, deny); err != nil {
		t.Fatal(err)
	}
	if err := w1.Append(ctx, evidence.Event{Kind: evidence.KindOutcome, ReceiptID: done.ID,
		Outcome: &wire.Outcome{Status: wire.StatusSucceeded}}); err != nil {
		t.Fatal(err)
	}
	closeWriter(t, w1) // the "process" dies with two calls in flight

	w2 := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-a"})
	t.Cleanup(func() { closeWriter(t, w2) })
	other := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-b"})
	if err := other.Append(ctx, decision(t, "other")); err != nil {
		t.Fatal(err)
	}
	closeWriter(t, other)
	n, err := evidence.RecoverInterrupted(ctx, s, w2, "inst-a")
	if err != nil || n != 2 {
		t.Fatalf("RecoverInterrupted = %d, %v; want 2", n, err)
	}
	for id, want := range map[uuid.UUID]string{inflight1.ID: wire.StatusInterrupted, inflight2.ID: wire.StatusInterrupted,
		done.ID: wire.StatusSucceeded, deny.ID: wire.StatusPending} {
		r, err := s.Receipt(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Outcome.Status != want {
			t.Errorf("receipt %s status %q, want %q", id, r.Outcome.Status, want)
		}
	}
	if n, err := evidence.RecoverInterrupted(ctx, s, w2, "inst-a"); err != nil || n != 0 {
		t.Errorf("second RecoverInterrupted = %d, %v; want 0", n, err)
	}
	if p, _ := s.PendingDecisions(ctx, "inst-b"); len(p) != 1 {
		t.Errorf("other instance's pending decisions = %d, want 1 (untouched)", len(p))
	}
}

// testBodyKinds appends the non-receipt kinds through the Writer: their Body
// round-trips byte for byte, their chain verifies, and none of them ever
// shows up as a receipt, by id or in a listing.
func testBodyKinds(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-body"})
	bodies := map[string]json.RawMessage{
		evidence.KindPolicyActivated: json.RawMessage(`{"revision":"sha256:ab",  "by":"ops-1"}`),
		evidence.KindShadowDiff:      json.RawMessage(`{"receipt_id":"x","active":"allow","shadow":"deny"}`),
		evidence.KindRetention:       json.RawMessage(`{"before":"2025-01-01T00:00:00Z"}`),
	}
	var events []evidence.Event
	for _, kind := range []string{evidence.KindPolicyActivated, evidence.KindShadowDiff, evidence.KindRetention} {
		events = append(events, evidence.Event{ID: newID(t), Kind: kind, PrincipalID: "ops-1", PolicyRevision: "sha256:ab", Body: bodies[kind]})
	}
	d := decision(t, "call-body")
	if err := w.Append(ctx, append(events, d)...); err != nil {
		t.Fatalf("Append body kinds: %v", err)
	}
	if err := w.Append(ctx, evidence.Event{Kind: evidence.KindShadowDiff}); !errors.Is(err, evidence.ErrInvalidEvent) {
		t.Errorf("Append shadow_diff without body = %v, want ErrInvalidEvent", err)
	}
	closeWriter(t, w)
	chain, _, _, err := s.ChainHead(ctx, "inst-body")
	if err != nil {
		t.Fatal(err)
	}
	got := chainEvents(t, s, chain)
	if err := evidence.VerifyChain(got); err != nil {
		t.Fatalf("VerifyChain: %v", err)
	}
	if len(got) != 5 {
		t.Fatalf("chain has %d events, want chain_start + 4", len(got))
	}
	for i, want := range events {
		e := got[i+1]
		if e.ID != want.ID || e.Kind != want.Kind || string(e.Body) != string(want.Body) || e.ReceiptID != want.ID {
			t.Errorf("event %d = %s %s body %s, want %s %s body %s", i, e.Kind, e.ID, e.Body, want.Kind, want.ID, want.Body)
		}
		if _, err := s.Receipt(ctx, e.ID); !errors.Is(err, evidence.ErrNotFound) {
			t.Errorf("Receipt(%s event) = %v, want ErrNotFound", e.Kind, err)
		}
	}
	if got[4].Body != nil {
		t.Errorf("decision body = %s, want nil", got[4].Body)
	}
	list, err := s.Receipts(ctx, evidence.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Receipts) != 1 || list.Receipts[0].ID != d.ID.String() {
		t.Errorf("Receipts = %v, want only the decision %s", ids(list.Receipts), d.ID)
	}
}

func readFile(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Quota modes of BenchWriter.
const (
	// BenchNoQuota: no decision draws a quota.
	BenchNoQuota = "none"
	// BenchQuotaSeparate: every decision first draws on one hot counter in
	// a transaction of its own (ControlStore.ConsumeQuotas, group-committed
	// apart from the events), as the gateway did before issue 15's fix
	// and still does on the approval path.
	BenchQuotaSeparate = "separate"
	// BenchQuotaInCommit: every decision draws on the hot counter in its
	// own commit (Writer.AppendDrawing).
	BenchQuotaInCommit = "in-commit"
)

// BenchWriter measures the Writer on s as the gateway drives it: 64
// concurrent callers (b.SetParallelism), each call a decision then its
// outcome, reported as calls/s. mode says how each decision draws on a
// quota that is never reached (BenchNoQuota and the others): what a quota
// on every call costs the evidence path.
func BenchWriter(b *testing.B, s evidence.Store, mode string) {
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "bench"})
	defer func() { _ = w.Close(context.Background()) }()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	var calls atomic.Int64
	b.ResetTimer() // not the store's opening
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := benchCall(ctx, s, w, mode); err != nil {
				b.Error(err)
				return
			}
			calls.Add(1)
		}
	})
	b.ReportMetric(float64(calls.Load())/time.Since(start).Seconds(), "calls/s")
}

var benchQuota = []wire.Quota{{Key: "agent-alpha/Exec", Limit: 1 << 50, WindowS: 3600, Cost: 1}}

func benchCall(ctx context.Context, s evidence.Store, w *evidence.Writer, mode string) error {
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	d := evidence.Event{ID: id, Kind: evidence.KindDecision, PrincipalID: "agent-alpha", Tool: "Exec",
		Decision: wire.DecisionAllow, Reasons: []string{}, PolicyRevision: "rev",
		ArgsSHA256: evidence.ArgsDigest([]byte("x")), Args: []byte(`{"argv":["/usr/bin/git","status"],"cwd":"/srv/work/repo"}`),
		Scope: &wire.Scope{FSGrants: []wire.FSGrant{{Path: "/srv/work", Mode: "rw"}}, Network: wire.Network{Posture: "off"}}}
	switch mode {
	case BenchQuotaSeparate:
		_, ex, err := s.(evidence.ControlStore).ConsumeQuotas(ctx, benchQuota, time.Now())
		if err == nil && ex != nil {
			err = fmt.Errorf("refused: %+v", ex)
		}
		if err != nil {
			return fmt.Errorf("quota: %w", err)
		}
	case BenchQuotaInCommit:
		refusal := func(*evidence.QuotaExceeded) []evidence.Event { return nil }
		ex, err := w.AppendDrawing(ctx, benchQuota, time.Now(), refusal, d)
		if err == nil && ex != nil {
			err = fmt.Errorf("refused: %+v", ex)
		}
		if err != nil {
			return fmt.Errorf("decision drawing a quota: %w", err)
		}
		d = evidence.Event{}
	}
	if d.ID != uuid.Nil {
		if err := w.Append(ctx, d); err != nil {
			return fmt.Errorf("decision: %w", err)
		}
	}
	code := 0
	return w.Append(ctx, evidence.Event{Kind: evidence.KindOutcome, ReceiptID: id,
		Outcome: &wire.Outcome{Status: wire.StatusSucceeded, ExitCode: &code, DurationMS: 3, Backend: "bwrap"}})
}

// ConcurrentOpen opens one place four times at once, as four replicas
// starting together do, and fails t unless every open and close succeeds.
func ConcurrentOpen(t *testing.T, open func() (io.Closer, error)) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := open()
			if err == nil {
				err = s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open #%d: %v", i, err)
		}
	}
}
