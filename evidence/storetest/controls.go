package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

func controls(t *testing.T, s evidence.Store) evidence.ControlStore {
	t.Helper()
	c, ok := s.(evidence.ControlStore)
	if !ok {
		t.Fatalf("%T is not an evidence.ControlStore", s)
	}
	return c
}

// testQuotaExact: 64 callers racing for a quota of 10 get exactly 10
// draws; a call over a second quota takes nothing from the first (all or
// none); a refund gives a unit back; a new window starts from zero.
func testQuotaExact(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	c := controls(t, s)
	now := time.Date(2026, 11, 22, 10, 0, 30, 0, time.UTC)
	q := wire.Quota{Key: "agent-alpha/Exec", Limit: 10, WindowS: 60, Cost: 1}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			draws, ex, err := c.ConsumeQuotas(ctx, []wire.Quota{q}, now)
			switch {
			case err != nil:
				t.Errorf("ConsumeQuotas: %v", err)
			case ex == nil && len(draws) == 1:
				admitted.Add(1)
			case ex != nil && ex.RetryAfter != 30*time.Second:
				t.Errorf("RetryAfter = %v, want 30s (the window's end)", ex.RetryAfter)
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != 10 {
		t.Fatalf("admitted %d of 64 against a limit of 10", n)
	}
	// All or none: the second quota (limit 0) refuses, the first keeps 10.
	other := wire.Quota{Key: "agent-alpha/*", Limit: 5, WindowS: 60, Cost: 1}
	if _, ex, err := c.ConsumeQuotas(ctx, []wire.Quota{other, q}, now); err != nil || ex == nil || ex.Quota.Key != q.Key {
		t.Fatalf("ConsumeQuotas over a full quota = %+v, %v; want exceeded on %s", ex, err, q.Key)
	}
	usage, err := c.QuotaUsage(ctx, other.Key, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(usage) == 1 && usage[0].Used != 0 {
		t.Errorf("the refused call drew %d from %s; want nothing", usage[0].Used, other.Key)
	}
	usage, err = c.QuotaUsage(ctx, q.Key, 10)
	if err != nil || len(usage) != 1 || usage[0].Used != 10 || usage[0].Limit != 10 || !usage[0].WindowStart.Equal(now.Truncate(time.Minute)) {
		t.Fatalf("QuotaUsage = %+v, %v; want one window at %v with 10 of 10 used", usage, err, now.Truncate(time.Minute))
	}
	if err := c.RefundQuotas(ctx, []evidence.QuotaDraw{{Key: q.Key, WindowS: 60, WindowStart: evidence.WindowStart(now, 60), Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	if draws, ex, err := c.ConsumeQuotas(ctx, []wire.Quota{q}, now); err != nil || ex != nil || len(draws) != 1 {
		t.Fatalf("after a refund ConsumeQuotas = %v, %+v, %v; want one draw", draws, ex, err)
	}
	if _, ex, err := c.ConsumeQuotas(ctx, []wire.Quota{q}, now.Add(time.Minute)); err != nil || ex != nil {
		t.Fatalf("next window ConsumeQuotas = %+v, %v; want admitted", ex, err)
	}
	if _, ex, _ := c.ConsumeQuotas(ctx, []wire.Quota{{Key: "k", Limit: 1, WindowS: 60, Cost: 2}}, now); ex == nil {
		t.Error("a cost above the limit was admitted")
	}
	// Pruning deletes the windows that ended by then, and only those.
	windows := func() int {
		usage, err := c.QuotaUsage(ctx, q.Key, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(usage)
	}
	if n := windows(); n != 2 {
		t.Fatalf("%d windows of %s before pruning; want 2", n, q.Key)
	}
	if n, err := c.PruneQuotas(ctx, now.Truncate(time.Minute).Add(time.Minute-time.Second)); err != nil || n != 0 || windows() != 2 {
		t.Fatalf("pruning before the first window ended = %d, %v; want nothing pruned", n, err)
	}
	if n, err := c.PruneQuotas(ctx, now.Truncate(time.Minute).Add(time.Minute)); err != nil || n < 1 || windows() != 1 {
		t.Fatalf("pruning as the first window ended = %d, %v, %d windows left; want it pruned and the next kept", n, err, windows())
	}
}

// testParkedExactlyOnce: of 16 settlers racing to approve one parked
// call, exactly one wins and gets its input; the stored input is gone once
// the run's end is recorded; an expired call cannot be approved, and a
// rejected one keeps no input.
func testParkedExactlyOnce(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	c := controls(t, s)
	now := time.Now().UTC().Truncate(time.Millisecond)
	park := func(expires time.Time) evidence.ParkedCall {
		p := evidence.ParkedCall{ID: uuid.Must(uuid.NewV7()), ReceiptID: uuid.Must(uuid.NewV7()),
			Principal: wire.Principal{ID: "agent-alpha", Roles: []string{"agent"}, Attributes: map[string]any{"environment": "prod"}},
			Tool:      "Exec", Input: json.RawMessage(`{"argv":["/usr/bin/true"],"env":{"X_TOKEN":"s3cret"}}`), ArgsSHA256: "ab",
			Args: json.RawMessage(`{"argv":["/usr/bin/true"]}`), PolicyRevision: "rev1", Reason: "prod", Approvers: []string{"role:approver"},
			CreatedAt: now, ExpiresAt: expires}
		if err := c.ParkCall(ctx, p); err != nil {
			t.Fatalf("ParkCall: %v", err)
		}
		return p
	}
	p := park(now.Add(time.Hour))
	var wins atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			got, err := c.SettleParked(ctx, evidence.Settle{ID: p.ID, From: wire.ApprovalPending, To: wire.ApprovalApproved, By: "approver-" + string(rune('a'+i)), At: now})
			switch {
			case err == nil:
				wins.Add(1)
				if string(got.Input) != string(p.Input) || got.Principal.ID != "agent-alpha" {
					t.Errorf("winner got %q as %q, want the parked input and principal", got.Input, got.Principal.ID)
				}
			case !errors.Is(err, evidence.ErrApprovalSettled):
				t.Errorf("SettleParked: %v", err)
			}
		})
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Fatalf("%d settlers won; want exactly one", n)
	}
	if _, err := c.SettleParked(ctx, evidence.Settle{ID: p.ID, From: wire.ApprovalApproved, To: wire.ApprovalApproved, At: now, Response: json.RawMessage(`{"ok":true}`)}); err != nil {
		t.Fatalf("record the run's end: %v", err)
	}
	got, err := c.ParkedCallByReceipt(ctx, p.ReceiptID)
	if err != nil || got.Status != wire.ApprovalApproved || got.Input != nil || string(got.Response) == "" || got.DecidedBy == "" {
		t.Fatalf("after the run: %+v, %v; want approved, input cleared, response kept, decided_by set", got, err)
	}

	expired := park(now.Add(-time.Second))
	if _, err := c.SettleParked(ctx, evidence.Settle{ID: expired.ID, From: wire.ApprovalPending, To: wire.ApprovalApproved, By: "x", At: now}); !errors.Is(err, evidence.ErrApprovalSettled) {
		t.Fatalf("approving an expired call = %v, want ErrApprovalSettled", err)
	}
	ids, err := c.ExpiredParked(ctx, now, 10)
	if err != nil || len(ids) != 1 || ids[0] != expired.ID {
		t.Fatalf("ExpiredParked = %v, %v; want [%s]", ids, err, expired.ID)
	}
	rejected := park(now.Add(time.Hour))
	if _, err := c.SettleParked(ctx, evidence.Settle{ID: rejected.ID, From: wire.ApprovalPending, To: wire.ApprovalRejected, By: "x", Reason: "no", At: now}); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.ParkedCall(ctx, rejected.ID); got.Input != nil || got.DecisionReason != "no" {
		t.Errorf("rejected call kept input %q / reason %q", got.Input, got.DecisionReason)
	}
	pending, err := c.ParkedCalls(ctx, wire.ApprovalPending, 10)
	if err != nil || len(pending) != 1 || pending[0].ID != expired.ID {
		t.Errorf("ParkedCalls(pending) = %d calls, %v; want only the expired-but-unswept one", len(pending), err)
	}
	for _, tc := range []struct {
		principal string
		limit     int
		want      int
	}{{"agent-alpha", 10, 1}, {"agent-alpha", 1, 1}, {"Agent-Alpha", 10, 0}, {"agent-beta", 10, 0}} {
		if n, err := c.PendingParked(ctx, tc.principal, tc.limit); err != nil || n != tc.want {
			t.Errorf("PendingParked(%s, %d) = %d, %v; want %d", tc.principal, tc.limit, n, err, tc.want)
		}
	}
	more := park(now.Add(time.Hour))
	if n, err := c.PendingParked(ctx, "agent-alpha", 10); err != nil || n != 2 {
		t.Errorf("PendingParked after another = %d, %v; want 2", n, err)
	}
	if n, err := c.PendingParked(ctx, "agent-alpha", 1); err != nil || n != 1 {
		t.Errorf("PendingParked up to 1 = %d, %v; want 1", n, err)
	}
	if _, err := c.SettleParked(ctx, evidence.Settle{ID: more.ID, From: wire.ApprovalPending, To: wire.ApprovalRejected, By: "x", At: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ParkedCall(ctx, uuid.Must(uuid.NewV7())); !errors.Is(err, evidence.ErrApprovalNotFound) {
		t.Errorf("unknown approval = %v, want ErrApprovalNotFound", err)
	}
	// The approval event kind is chained evidence on the call's receipt.
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-approval"})
	body, _ := json.Marshal(evidence.ApprovalBody{ApprovalID: p.ID.String(), Action: evidence.ApprovalActionApproved, By: "approver-a", Reason: "ok"})
	if err := w.Append(ctx, evidence.Event{Kind: evidence.KindApproval, ReceiptID: p.ReceiptID, Body: body}); err != nil {
		t.Fatalf("Append approval event: %v", err)
	}
	closeWriter(t, w)
}

// testQuotaInDecisionCommit: two writers (two replicas' worth) sharing the
// store draw a quota of 10 in the commits of 48 racing decisions
// (Writer.AppendDrawing): exactly 10 are admitted with their allow
// decision, the other 38 are recorded as their refusals (deny decision and
// outcome), the counter says 10, and both chains link and hash as written.
// A cost above its limit is refused without a counter.
func testQuotaInDecisionCommit(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	c := controls(t, s)
	now := time.Date(2026, 11, 22, 10, 0, 30, 0, time.UTC)
	q := wire.Quota{Key: "agent-alpha/fs.read", Limit: 10, WindowS: 60, Cost: 1}
	writers := []*evidence.Writer{
		evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-q1"}),
		evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-q2"}),
	}
	if !writers[0].DrawsQuotas() {
		t.Fatalf("%T cannot draw quotas in its append transaction", s)
	}
	refusal := func(d evidence.Event) func(*evidence.QuotaExceeded) []evidence.Event {
		return func(ex *evidence.QuotaExceeded) []evidence.Event {
			d.Decision, d.RuleIDs, d.Reasons = wire.DecisionDeny, []string{"gateway.rate_limited"}, []string{"quota " + ex.Quota.Key}
			return []evidence.Event{d, {Kind: evidence.KindOutcome, ReceiptID: d.ID,
				Outcome: &wire.Outcome{Status: wire.StatusError, ErrorCode: ptr("rate_limited"), Backend: "none"}}}
		}
	}
	var (
		mu      sync.Mutex
		allowed = map[uuid.UUID]bool{}
		wg      sync.WaitGroup
	)
	for i := range 48 {
		w := writers[i%2]
		wg.Go(func() {
			d := decision(t, "q")
			d.ReceiptID = d.ID
			ex, err := w.AppendDrawing(ctx, []wire.Quota{q}, now, refusal(d), d)
			if err != nil {
				t.Errorf("AppendDrawing: %v", err)
				return
			}
			if ex != nil && (ex.Quota.Key != q.Key || ex.RetryAfter != 30*time.Second) {
				t.Errorf("exceeded = %+v; want %s, retry after 30s", ex, q.Key)
			}
			mu.Lock()
			allowed[d.ID] = ex == nil
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	n := 0
	for id, ok := range allowed {
		rc, err := s.Receipt(ctx, id)
		if err != nil {
			t.Fatalf("Receipt(%s): %v", id, err)
		}
		switch {
		case ok:
			n++
			if rc.Decision != wire.DecisionAllow || (rc.Outcome != nil && rc.Outcome.Status != wire.StatusPending) {
				t.Errorf("admitted receipt = %s with outcome %+v; want allow, pending", rc.Decision, rc.Outcome)
			}
		case rc.Decision != wire.DecisionDeny || rc.Outcome == nil || rc.Outcome.ErrorCode == nil || *rc.Outcome.ErrorCode != "rate_limited":
			t.Errorf("refused receipt = %s with outcome %+v; want deny / rate_limited", rc.Decision, rc.Outcome)
		}
	}
	if n != 10 {
		t.Fatalf("admitted %d of 48 against a limit of 10", n)
	}
	usage, err := c.QuotaUsage(ctx, q.Key, 10)
	if err != nil || len(usage) != 1 || usage[0].Used != 10 || usage[0].Limit != 10 {
		t.Fatalf("QuotaUsage = %+v, %v; want 10 of 10 used", usage, err)
	}
	// A cost above its limit never fits: refused, no counter touched.
	big := wire.Quota{Key: "agent-alpha/big", Limit: 1, WindowS: 60, Cost: 2}
	d := decision(t, "big")
	d.ReceiptID = d.ID
	if ex, err := writers[0].AppendDrawing(ctx, []wire.Quota{big}, now, refusal(d), d); err != nil || ex == nil {
		t.Fatalf("a cost above the limit = %+v, %v; want refused", ex, err)
	}
	if usage, err := c.QuotaUsage(ctx, big.Key, 10); err != nil || len(usage) != 0 {
		t.Errorf("QuotaUsage of a never-fitting quota = %+v, %v; want no window", usage, err)
	}
	for _, w := range writers {
		closeWriter(t, w)
		chain, _, _, err := s.ChainHead(ctx, w.InstanceID())
		if err != nil {
			t.Fatal(err)
		}
		evs := chainEvents(t, s, chain)
		for i, e := range evs {
			h, err := evidence.ChainHash(e.PrevHash, e)
			if err != nil || !bytes.Equal(h, e.Hash) || (i > 0 && !bytes.Equal(e.PrevHash, evs[i-1].Hash)) {
				t.Fatalf("%s event %d (%s %s) does not hash or link as written (%v)", w.InstanceID(), i, e.Kind, e.Decision, err)
			}
		}
	}
}
