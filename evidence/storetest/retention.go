package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// PartitionEnsurer is implemented by stores that must create a month's
// storage before events of that month land in it (PostgreSQL's monthly
// partitions; otherwise old rows go to the DEFAULT partition, which
// retention never drops).
type PartitionEnsurer interface {
	EnsurePartitions(ctx context.Context, at time.Time) error
}

func retentionStore(t *testing.T, s evidence.Store) evidence.RetentionStore {
	t.Helper()
	r, ok := s.(evidence.RetentionStore)
	if !ok {
		t.Fatalf("%T does not implement evidence.RetentionStore", s)
	}
	return r
}

// retentionFixture seeds events 14 months ago (chain a wholly old, chain b
// spanning the cut) and after (a's next chain, linking to the old one). It
// returns the receipts that retention must drop and those it must keep.
func retentionFixture(t *testing.T, s evidence.Store, now time.Time) (old time.Time, oldIDs, newIDs []uuid.UUID) {
	t.Helper()
	ctx := ctxFor(t)
	old = time.Date(now.Year(), now.Month(), 10, 12, 0, 0, 0, time.UTC).AddDate(0, -14, 0)
	if pe, ok := s.(PartitionEnsurer); ok {
		if err := pe.EnsurePartitions(ctx, old); err != nil {
			t.Fatal(err)
		}
	}
	var clock atomic.Int64
	clock.Store(old.UnixMicro())
	tick := func() time.Time { return time.UnixMicro(clock.Add(1000)) }
	call := func(w *evidence.Writer) uuid.UUID {
		t.Helper()
		id := newID(t)
		d := evidence.Event{ID: id, Kind: evidence.KindDecision, Decision: wire.DecisionAllow, Tool: "Exec", PrincipalID: "p"}
		o := evidence.Event{Kind: evidence.KindOutcome, ReceiptID: id, Outcome: &wire.Outcome{Status: wire.StatusSucceeded}}
		if err := w.Append(ctx, d, o); err != nil {
			t.Fatal(err)
		}
		return id
	}
	wa := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "a", Now: tick})
	wb := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "b", Now: tick})
	for range 3 {
		oldIDs = append(oldIDs, call(wa), call(wb))
	}
	closeWriter(t, wa)
	clock.Store(now.UnixMicro()) // b's chain spans the cut
	newIDs = append(newIDs, call(wb), call(wb))
	closeWriter(t, wb)
	wa2 := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "a"}) // links to a's old chain
	newIDs = append(newIDs, call(wa2))
	closeWriter(t, wa2)
	return old, oldIDs, newIDs
}

// testRetention: a dry run changes nothing; Retain checkpoints, appends a
// chained retention event and drops the old month (14 events: two chain
// starts and six calls); old receipts are gone, newer ones intact; Verify
// passes, counting the 14 retained leaves and reporting the bound; the
// database still refuses a DELETE of anything newer; a second run is a
// no-op; and deleting a newer event behind retention's back is still found.
func testRetention(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	rs := retentionStore(t, s)
	now := time.Now().UTC()
	old, oldIDs, newIDs := retentionFixture(t, s, now)
	k := newKeys(t, "test.portcullis/evidence")

	opts := evidence.RetainOptions{Retention: 200 * 24 * time.Hour, Now: now, DryRun: true, InstanceID: "retention", Signer: k.signer}
	plan, err := evidence.Retain(ctx, rs, opts)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	var rows int64
	for _, m := range plan.Months {
		rows += m.Rows
		if m.To.After(plan.Before) || plan.Before.After(plan.Cutoff) || !m.To.Before(evidence.MonthStart(now)) {
			t.Errorf("month %+v is not before %s (cutoff %s, now %s)", m, plan.Before, plan.Cutoff, now)
		}
	}
	if len(plan.Months) == 0 || !plan.Months[0].From.Equal(evidence.MonthStart(old)) || plan.Months[0].Rows != 14 || rows != 14 {
		t.Fatalf("dry-run plan = %+v; want the month of %s first, with 14 events, and 14 in all", plan, old)
	}
	if _, err := s.Receipt(ctx, oldIDs[0]); err != nil {
		t.Fatalf("dry run dropped something: %v", err)
	}
	if r := verify(t, rs, k); r.Leaves != 0 {
		t.Fatalf("dry run checkpointed: %+v", r)
	}

	opts.DryRun = false
	opts.HeadDir = t.TempDir()
	if _, err := evidence.Retain(ctx, rs, opts); err != nil {
		t.Fatalf("Retain: %v", err)
	}
	for _, id := range oldIDs {
		if _, err := s.Receipt(ctx, id); !errors.Is(err, evidence.ErrNotFound) {
			t.Errorf("old receipt %s: err %v, want not found", id, err)
		}
	}
	for _, id := range newIDs {
		if r, err := s.Receipt(ctx, id); err != nil || r.Outcome == nil {
			t.Errorf("new receipt %s: %+v, %v", id, r, err)
		}
	}
	r := verify(t, rs, k)
	wantBefore := plan.Before.UTC().Format(time.RFC3339)
	if !r.OK() || r.Retained != 14 || r.RetainedBefore != wantBefore || r.Checkpoints == 0 || r.NotCheckpointed != 0 {
		t.Fatalf("Verify after retention = %+v; want OK, 14 retained before %s, all checkpointed", r, wantBefore)
	}
	// The retention event is chained under its own instance, whose head
	// was copied out: with it, Verify lists the retention chain as headed.
	chain, seq, _, err := s.ChainHead(ctx, "retention")
	if err != nil || seq != 2 {
		t.Fatalf("retention chain head = %s seq %d, %v; want a chain_start and the retention event", chain, seq, err)
	}
	af, err := evidence.ReadAnchorDir(opts.HeadDir)
	if err != nil || len(af.Heads) != 1 {
		t.Fatalf("retention chain head copied out: %+v, %v; want one head", af, err)
	}
	if r := verifyWith(t, rs, k, evidence.VerifyOptions{Heads: af.Heads}); !r.OK() || slices.ContainsFunc(r.UnheadedChains, func(u evidence.UnheadedChain) bool { return u.ChainID == chain.String() }) {
		t.Fatalf("Verify with the retention head = %+v, unheaded %+v; want OK, the retention chain headed", r.Problems, r.UnheadedChains)
	}
	evs := chainEvents(t, s, chain)
	if evs[1].Kind != evidence.KindRetention {
		t.Fatalf("retention chain holds %q, want %q", evs[1].Kind, evidence.KindRetention)
	}
	if raw, ok := s.(RawExecer); ok {
		for _, stmt := range []string{
			"DELETE FROM evidence_events",
			fmt.Sprintf("DELETE FROM evidence_events WHERE receipt_id = '%s'", newIDs[0]),
		} {
			if err := raw.RawExec(ctx, stmt); err == nil {
				t.Errorf("%q succeeded after retention; newer evidence must stay append-only", stmt)
			}
		}
	}
	if p, err := evidence.Retain(ctx, rs, opts); err != nil || len(p.Months) != 0 {
		t.Fatalf("second Retain = %+v, %v; want nothing to do", p, err)
	}
	// A retention event covers only what it says: deleting a newer,
	// checkpointed event is still a deletion.
	tm, ok := s.(Tamperer)
	if !ok {
		return
	}
	if err := tm.Tamper(ctx, fmt.Sprintf("DELETE FROM evidence_events WHERE id = '%s'", newIDs[0])); err != nil {
		t.Fatal(err)
	}
	r = verify(t, rs, k)
	found := false
	for _, p := range r.Problems {
		found = found || p.Kind == "missing_sequence" || p.Kind == "not_in_tree"
	}
	if !found {
		t.Fatalf("Verify after deleting a newer event = %+v; want missing_sequence or not_in_tree", r.Problems)
	}
}

// testRetentionRefusesUnsealed: without a checkpointer, expiring events are
// not in the signed tree, so Retain refuses and deletes nothing, and writes
// no retention event.
func testRetentionRefusesUnsealed(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	rs := retentionStore(t, s)
	now := time.Now().UTC()
	_, oldIDs, _ := retentionFixture(t, s, now)
	_, err := evidence.Retain(ctx, rs, evidence.RetainOptions{Retention: 200 * 24 * time.Hour, Now: now, InstanceID: "retention"})
	if !errors.Is(err, evidence.ErrUnsealed) {
		t.Fatalf("Retain without checkpoints = %v, want ErrUnsealed", err)
	}
	for _, id := range oldIDs {
		if _, err := s.Receipt(ctx, id); err != nil {
			t.Errorf("receipt %s after refused retention: %v", id, err)
		}
	}
	if chain, _, _, err := s.ChainHead(ctx, "retention"); err != nil || chain != uuid.Nil {
		t.Errorf("refused retention wrote a retention chain %s (%v)", chain, err)
	}
}
