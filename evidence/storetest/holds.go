package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

func holdStore(t *testing.T, s evidence.Store) evidence.RetentionStore {
	t.Helper()
	r := retentionStore(t, s)
	if _, ok := s.(evidence.HoldStore); !ok {
		t.Fatalf("%T does not implement evidence.HoldStore", s)
	}
	return r
}

// monthsFixture writes one call (a decision and an outcome) on the 10th
// of each of the months `ago` months before now, each month by its own
// writer (one chain_start each), and returns the receipt ids by month.
func monthsFixture(t *testing.T, s evidence.Store, now time.Time, ago ...int) map[int]uuid.UUID {
	t.Helper()
	ctx := ctxFor(t)
	ids := map[int]uuid.UUID{}
	for _, a := range ago {
		at := time.Date(now.Year(), now.Month(), 10, 12, 0, 0, 0, time.UTC).AddDate(0, -a, 0)
		if pe, ok := s.(PartitionEnsurer); ok {
			if err := pe.EnsurePartitions(ctx, at); err != nil {
				t.Fatal(err)
			}
		}
		var clock atomic.Int64
		clock.Store(at.UnixMicro())
		w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: fmt.Sprintf("m%d", a),
			Now: func() time.Time { return time.UnixMicro(clock.Add(1000)) }})
		id := newID(t)
		d := evidence.Event{ID: id, Kind: evidence.KindDecision, Decision: wire.DecisionAllow, Tool: "Exec", PrincipalID: "p", SessionID: "s"}
		o := evidence.Event{Kind: evidence.KindOutcome, ReceiptID: id, Outcome: &wire.Outcome{Status: wire.StatusSucceeded}}
		if err := w.Append(ctx, d, o); err != nil {
			t.Fatal(err)
		}
		closeWriter(t, w)
		ids[a] = id
	}
	return ids
}

func monthAgo(now time.Time, a int) time.Time {
	return evidence.MonthStart(now).AddDate(0, -a, 0)
}

func checkpoint(t *testing.T, l evidence.Ledger, k keys) {
	t.Helper()
	c, err := evidence.NewCheckpointer(l, evidence.CheckpointerOptions{Signer: k.signer})
	if err != nil {
		t.Fatal(err)
	}
	for {
		before, _, err := l.TreeHeads(ctxFor(t))
		if err != nil {
			t.Fatal(err)
		}
		size, err := c.Pass(ctxFor(t))
		if err != nil {
			t.Fatalf("checkpointer pass: %v", err)
		}
		if size == before {
			return
		}
	}
}

func mustVerify(t *testing.T, l evidence.Ledger, k keys, when string) *evidence.Report {
	t.Helper()
	checkpoint(t, l, k)
	r := verify(t, l, k)
	if !r.OK() || r.NotCheckpointed != 0 {
		t.Fatalf("Verify %s = %+v; want OK and all checkpointed", when, r)
	}
	return r
}

// testLegalHoldBlocksRetention: with calls in the months 14, 13 and 12
// months ago, an active hold on part of month -13 makes Retain drop -14
// and -12, keep -13 and fail with ErrLegalHold naming the hold and its
// reason; the retention event records the kept month; the database still
// refuses to delete the held events; Verify passes throughout. Releasing
// the hold lets the next run drop -13, and the hold stays listed,
// released, with who and why.
func testLegalHoldBlocksRetention(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	rs := holdStore(t, s)
	now := time.Now().UTC()
	ids := monthsFixture(t, s, now, 14, 13, 12)
	k := newKeys(t, "test.portcullis/holds")
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "admin-api"})
	defer closeWriter(t, w)

	const reason = "Doe v. Acme, case 24-cv-1234: preserve agent activity"
	h, err := evidence.PlaceHold(ctx, rs, w, evidence.PlaceHoldRequest{
		Since: monthAgo(now, 13).AddDate(0, 0, 8), Until: monthAgo(now, 13).Add(9*24*time.Hour + 12*time.Hour + 1500*time.Millisecond),
		Reason: reason, PlacedBy: "admin-1",
	})
	if err != nil {
		t.Fatalf("PlaceHold: %v", err)
	}
	if h.Until == nil || !h.Until.Equal(monthAgo(now, 13).Add(9*24*time.Hour+12*time.Hour+2*time.Second)) {
		t.Errorf("hold until = %v; want widened to the next whole second", h.Until)
	}
	mustVerify(t, rs, k, "after placing a hold")
	holds, err := evidence.ListHolds(ctx, rs)
	if err != nil || len(holds) != 1 || holds[0].ID != h.ID || !holds[0].Active || holds[0].PlacedBy != "admin-1" || holds[0].Reason != reason {
		t.Fatalf("ListHolds = %+v, %v; want the one active hold %+v", holds, err, h)
	}

	opts := evidence.RetainOptions{Retention: 200 * 24 * time.Hour, Now: now, InstanceID: "retention", Signer: k.signer}
	dry := opts
	dry.DryRun = true
	plan, err := evidence.Retain(ctx, rs, dry)
	if !errors.Is(err, evidence.ErrLegalHold) || len(plan.Kept) != 1 || !hasMonths(plan.Months, now, 14, 12) || hasMonths(plan.Months, now, 13) {
		t.Fatalf("dry run = %+v, %v; want months -14 and -12 to drop, -13 kept, ErrLegalHold", plan, err)
	}

	plan, err = evidence.Retain(ctx, rs, opts)
	var he *evidence.HeldError
	if !errors.As(err, &he) || !errors.Is(err, evidence.ErrLegalHold) {
		t.Fatalf("Retain with a hold = %v; want a *HeldError (ErrLegalHold)", err)
	}
	if msg := err.Error(); !strings.Contains(msg, h.ID) || !strings.Contains(msg, reason) {
		t.Errorf("error %q does not name the hold %s and its reason", msg, h.ID)
	}
	if len(plan.Kept) != 1 || !plan.Kept[0].From.Equal(monthAgo(now, 13)) || !slices.Equal(plan.Kept[0].HoldIDs, []string{h.ID}) {
		t.Fatalf("kept = %+v; want month -13 under hold %s", plan.Kept, h.ID)
	}
	if !hasMonths(plan.Months, now, 14, 12) || hasMonths(plan.Months, now, 13) {
		t.Fatalf("dropped %+v; want months -14 and -12, not -13", plan.Months)
	}
	if plan.Before.Before(monthAgo(now, 11)) {
		t.Errorf("before = %s; want at least the end of month -12", plan.Before)
	}
	for a, id := range ids {
		_, err := s.Receipt(ctx, id)
		if a == 13 && err != nil {
			t.Errorf("held receipt of month -%d: %v", a, err)
		}
		if a != 13 && !errors.Is(err, evidence.ErrNotFound) {
			t.Errorf("receipt of month -%d: %v; want dropped", a, err)
		}
	}
	// The retention event records the month it kept, and why.
	chain, _, _, err := s.ChainHead(ctx, "retention")
	if err != nil {
		t.Fatal(err)
	}
	evs := chainEvents(t, s, chain)
	var body evidence.RetentionBody
	if err := json.Unmarshal(evs[len(evs)-1].Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Held) != 1 || body.Held[0].Month != monthAgo(now, 13).Format("2006-01") || !slices.Equal(body.Held[0].Holds, []string{h.ID}) ||
		slices.Contains(body.Months, monthAgo(now, 13).Format("2006-01")) {
		t.Errorf("retention body = %+v; want month -13 held by %s, not dropped", body, h.ID)
	}
	r := mustVerify(t, rs, k, "after retention kept a held month")
	if r.Retained == 0 {
		t.Errorf("Verify = %+v; want the dropped months' leaves reported as retained", r)
	}
	// Below the retention bound, checkpointed, yet held: the database
	// refuses to delete it where it enforces retention itself (SQLite).
	if raw, ok := s.(RawExecer); ok {
		if err := raw.RawExec(ctx, fmt.Sprintf("DELETE FROM evidence_events WHERE receipt_id = '%s'", ids[13])); err == nil {
			t.Errorf("DELETE of held evidence succeeded")
		}
	}

	rel, err := evidence.ReleaseHold(ctx, rs, w, evidence.ReleaseHoldRequest{ID: uuid.MustParse(h.ID), Reason: "case settled 2026-01-15", ReleasedBy: "admin-2"})
	if err != nil || rel.Active || rel.ReleasedBy != "admin-2" || rel.ReleaseReason != "case settled 2026-01-15" || rel.ReleasedAt == nil {
		t.Fatalf("ReleaseHold = %+v, %v", rel, err)
	}
	mustVerify(t, rs, k, "after releasing the hold")
	plan, err = evidence.Retain(ctx, rs, opts)
	if err != nil || !hasMonths(plan.Months, now, 13) || len(plan.Kept) != 0 {
		t.Fatalf("Retain after release = %+v, %v; want month -13 dropped", plan, err)
	}
	if _, err := s.Receipt(ctx, ids[13]); !errors.Is(err, evidence.ErrNotFound) {
		t.Errorf("released receipt: %v; want dropped", err)
	}
	mustVerify(t, rs, k, "after the second retention")
	holds, err = evidence.ListHolds(ctx, rs)
	if err != nil || len(holds) != 1 || holds[0].Active || holds[0].ReleasedBy != "admin-2" || holds[0].ReleaseEventID != rel.ReleaseEventID {
		t.Fatalf("ListHolds after release = %+v, %v", holds, err)
	}
}

// testLegalHoldRecordKept: an open-ended hold placed 14 months ago on
// evidence from 12 months ago keeps both its own record (month -14) and
// month -12 while month -13 is dropped: retention never silently lifts a
// hold by dropping the event that placed it.
func testLegalHoldRecordKept(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	rs := holdStore(t, s)
	now := time.Now().UTC()
	ids := monthsFixture(t, s, now, 14, 13, 12)
	k := newKeys(t, "test.portcullis/holds")
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "admin-cli"})
	defer closeWriter(t, w)
	h, err := evidence.PlaceHold(ctx, rs, w, evidence.PlaceHoldRequest{
		Since: monthAgo(now, 12), Reason: "regulator inquiry 7", PlacedBy: "cli:ops", Now: monthAgo(now, 14).AddDate(0, 0, 20),
	})
	if err != nil {
		t.Fatalf("PlaceHold: %v", err)
	}
	plan, err := evidence.Retain(ctx, rs, evidence.RetainOptions{Retention: 200 * 24 * time.Hour, Now: now, InstanceID: "retention", Signer: k.signer})
	if !errors.Is(err, evidence.ErrLegalHold) {
		t.Fatalf("Retain = %v; want ErrLegalHold", err)
	}
	var kept []evidence.RetentionMonth
	for _, k := range plan.Kept {
		kept = append(kept, k.RetentionMonth)
	}
	if !hasMonths(plan.Months, now, 13) || hasMonths(plan.Months, now, 14, 12) || !hasMonths(kept, now, 14, 12) {
		t.Fatalf("plan = %+v; want month -13 dropped, -14 and -12 kept", plan)
	}
	if _, err := s.Receipt(ctx, ids[14]); err != nil {
		t.Errorf("receipt of the hold's own month: %v", err)
	}
	holds, err := evidence.ListHolds(ctx, rs)
	if err != nil || len(holds) != 1 || holds[0].ID != h.ID || !holds[0].Active || holds[0].Until != nil {
		t.Fatalf("ListHolds = %+v, %v; want the open-ended hold, still active", holds, err)
	}
	mustVerify(t, rs, k, "after retention kept the hold's record")
}

// testLegalHoldLock: retention and placements serialize on the hold lock.
// While it is taken, a placement waits (and gives up with its context);
// once it is free, the placement goes through.
func testLegalHoldLock(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	rs := holdStore(t, s)
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "admin-api"})
	defer closeWriter(t, w)
	unlock, err := rs.LockHolds(ctx)
	if err != nil {
		t.Fatalf("LockHolds: %v", err)
	}
	req := evidence.PlaceHoldRequest{Since: time.Now().AddDate(-1, 0, 0), Reason: "audit", PlacedBy: "admin-1"}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = evidence.PlaceHold(short, rs, w, req)
	cancel()
	if err == nil {
		t.Fatal("PlaceHold went through while the hold lock was taken")
	}
	unlock()
	if _, err := evidence.PlaceHold(ctx, rs, w, req); err != nil {
		t.Fatalf("PlaceHold after unlock: %v", err)
	}
	if holds, err := evidence.ListHolds(ctx, rs); err != nil || len(holds) != 1 {
		t.Fatalf("ListHolds = %+v, %v; want exactly the second placement", holds, err)
	}
}

// testLegalHoldErrors: bad requests name their field; releasing an
// unknown hold is ErrNotFound, a released one ErrHoldReleased; hold events
// are as append-only as any evidence.
func testLegalHoldErrors(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	rs := holdStore(t, s)
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "admin-api"})
	defer closeWriter(t, w)
	since := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		req   evidence.PlaceHoldRequest
		field string
	}{
		{"no since", evidence.PlaceHoldRequest{Reason: "x", PlacedBy: "a"}, "since"},
		{"until before since", evidence.PlaceHoldRequest{Since: since, Until: since.Add(-time.Hour), Reason: "x", PlacedBy: "a"}, "until"},
		{"until equals since", evidence.PlaceHoldRequest{Since: since, Until: since, Reason: "x", PlacedBy: "a"}, "until"},
		{"blank reason", evidence.PlaceHoldRequest{Since: since, Reason: "  ", PlacedBy: "a"}, "reason"},
		{"long reason", evidence.PlaceHoldRequest{Since: since, Reason: strings.Repeat("x", evidence.MaxHoldReason+1), PlacedBy: "a"}, "reason"},
		{"control character", evidence.PlaceHoldRequest{Since: since, Reason: "a\x00b", PlacedBy: "a"}, "reason"},
		{"no principal", evidence.PlaceHoldRequest{Since: since, Reason: "x"}, "placed_by"},
	} {
		_, err := evidence.PlaceHold(ctx, rs, w, tc.req)
		var fe *evidence.HoldFieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, evidence.ErrInvalidHold) {
			t.Errorf("%s: PlaceHold = %v; want an ErrInvalidHold naming %q", tc.name, err, tc.field)
		}
	}
	if _, err := evidence.ReleaseHold(ctx, rs, w, evidence.ReleaseHoldRequest{ID: newID(t), Reason: "x", ReleasedBy: "a"}); !errors.Is(err, evidence.ErrNotFound) {
		t.Errorf("release of an unknown hold = %v; want ErrNotFound", err)
	}
	h, err := evidence.PlaceHold(ctx, rs, w, evidence.PlaceHoldRequest{Since: since, Reason: "x", PlacedBy: "a"})
	if err != nil {
		t.Fatal(err)
	}
	rel := evidence.ReleaseHoldRequest{ID: uuid.MustParse(h.ID), Reason: "done", ReleasedBy: "b"}
	if _, err := evidence.ReleaseHold(ctx, rs, w, rel); err != nil {
		t.Fatal(err)
	}
	if _, err := evidence.ReleaseHold(ctx, rs, w, rel); !errors.Is(err, evidence.ErrHoldReleased) {
		t.Errorf("second release = %v; want ErrHoldReleased", err)
	}
	raw, ok := s.(RawExecer)
	if !ok {
		return
	}
	for _, stmt := range []string{
		"UPDATE evidence_events SET body = NULL WHERE kind = 'legal_hold_release'",
		"DELETE FROM evidence_events WHERE kind = 'legal_hold_release'",
		"DELETE FROM evidence_events WHERE kind = 'legal_hold'",
	} {
		if err := raw.RawExec(ctx, stmt); err == nil {
			t.Errorf("%q succeeded; hold events must be append-only", stmt)
		}
	}
	if holds, err := evidence.ListHolds(ctx, rs); err != nil || len(holds) != 1 || holds[0].Active {
		t.Errorf("ListHolds = %+v, %v; want the released hold", holds, err)
	}
}

// hasMonths reports whether months holds each of the months `ago` months
// before now. (PostgreSQL plans may also list empty partitions.)
func hasMonths(months []evidence.RetentionMonth, now time.Time, ago ...int) bool {
	for _, a := range ago {
		if !slices.ContainsFunc(months, func(m evidence.RetentionMonth) bool { return m.From.Equal(monthAgo(now, a)) }) {
			return false
		}
	}
	return true
}
