package sqlite_test

import (
	"context"
	"crypto/rand"
	"io"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/evidence/storetest"
	"github.com/portcullis/portcullis/wire"
)

// TestDeleteGuard: the append-only trigger lets retention delete only what
// Verify accepts. With old events checkpointed but no retention event, a
// DropMonth is refused and deletes nothing; an unchecked event stays
// undeletable even after a retention event covers its month.
func TestDeleteGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	now := time.Now().UTC()
	old := evidence.MonthStart(now).AddDate(0, -14, 3)
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "a", Now: func() time.Time { return old }})
	if err := w.Append(ctx, evidence.Event{Kind: evidence.KindDecision, Decision: wire.DecisionDeny, Tool: "Exec"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	skey, _, err := note.GenerateKey(rand.Reader, "test.portcullis/evidence")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := evidence.NewCheckpointer(s, evidence.CheckpointerOptions{Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.Pass(ctx); err != nil || n != 2 {
		t.Fatalf("Pass = %d, %v; want 2 leaves", n, err)
	}
	plan, err := s.PlanRetention(ctx, now.AddDate(0, -7, 0), now)
	if err != nil || len(plan.Months) != 1 || plan.Months[0].Rows != 2 {
		t.Fatalf("PlanRetention = %+v, %v; want one month of 2 events", plan, err)
	}
	if err := s.DropMonth(ctx, plan.Months[0]); err == nil {
		t.Fatal("DropMonth without a retention event succeeded")
	}
	if n, err := s.Unsealed(ctx, plan.Months[0]); err != nil || n != 0 {
		t.Fatalf("Unsealed = %d, %v", n, err)
	}
	again, err := s.PlanRetention(ctx, now.AddDate(0, -7, 0), now)
	if err != nil || len(again.Months) != 1 || again.Months[0].Rows != 2 {
		t.Fatalf("after the refused drop: %+v, %v; want both events kept", again, err)
	}

	// A retention event covering the month, then an event of that month
	// that never reached the tree: still undeletable.
	late := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "late", Now: func() time.Time { return old.Add(time.Hour) }})
	if err := late.Append(ctx, evidence.Event{Kind: evidence.KindRetention, Body: []byte(`{"before":"` + plan.Before.Format(time.RFC3339) + `"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := late.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.DropMonth(ctx, plan.Months[0]); err == nil {
		t.Fatal("DropMonth deleted events that are not in the signed tree")
	}
}

// TestConcurrentOpen: gateway processes starting at once on a fresh file
// migrate one after the other (a file lock), so every Open succeeds.
func TestConcurrentOpen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "evidence.db")
	storetest.ConcurrentOpen(t, func() (io.Closer, error) { return sqlite.Open(context.Background(), path) })
}

// TestLeadAcrossStores: two Stores on one file (as two gateway processes
// would be) never lead at once; the lead passes on when released.
func TestLeadAcrossStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "evidence.db")
	var stores [2]*sqlite.Store
	for i := range stores {
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	release, ok, err := stores[0].TryLead(ctx)
	if err != nil || !ok {
		t.Fatalf("first TryLead = %v, %v", ok, err)
	}
	for i, s := range stores {
		if _, ok, err := s.TryLead(ctx); err != nil || ok {
			t.Fatalf("store %d led while store 0 leads (ok %v, err %v)", i, ok, err)
		}
	}
	release()
	release() // idempotent
	r2, ok, err := stores[1].TryLead(ctx)
	if err != nil || !ok {
		t.Fatalf("TryLead after release = %v, %v", ok, err)
	}
	r2()
}
