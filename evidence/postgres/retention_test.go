package postgres_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/postgres"
	"github.com/portcullis/portcullis/wire"
)

// TestRetentionDropsPartitions: on PostgreSQL retention is DETACH + DROP of
// whole monthly partitions (storetest's Retention case checks what it
// means for receipts and Verify): the old month's partition and the empty
// one after it go; the DEFAULT, current and next month's stay.
func TestRetentionDropsPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	now := time.Now().UTC()
	old := time.Date(now.Year(), now.Month(), 10, 12, 0, 0, 0, time.UTC).AddDate(0, -14, 0)
	if err := s.EnsurePartitions(ctx, old); err != nil {
		t.Fatal(err)
	}
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "a", Now: func() time.Time { return old }})
	if err := w.Append(ctx, evidence.Event{Kind: evidence.KindDecision, Decision: wire.DecisionDeny, Tool: "Exec"}); err != nil {
		t.Fatal(err)
	}
	closeW(t, w)
	skey, vkey, _ := note.GenerateKey(rand.Reader, "test.portcullis/evidence")
	signer, _ := note.NewSigner(skey)
	plan, err := s.Retain(ctx, postgres.RetainOptions{Retention: 200 * 24 * time.Hour, Now: now, InstanceID: "retention", Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	oldPart := "evidence_events_" + old.Format("2006_01")
	if len(plan.Months) != 2 || plan.Months[0].Name != oldPart || plan.Months[0].Rows != 2 || plan.Months[1].Rows != 0 {
		t.Fatalf("plan = %+v; want %s (2 events) and the empty month after", plan, oldPart)
	}
	for _, p := range plan.Months {
		if err := s.RawExec(ctx, "SELECT 1 FROM "+p.Name+" LIMIT 1"); err == nil {
			t.Errorf("partition %s still exists", p.Name)
		}
	}
	for _, p := range []string{"evidence_events_default", "evidence_events_" + now.Format("2006_01"), "evidence_events_" + now.AddDate(0, 1, 0).Format("2006_01")} {
		if err := s.RawExec(ctx, "SELECT 1 FROM "+p+" LIMIT 1"); err != nil {
			t.Errorf("partition %s: %v", p, err)
		}
	}
	r, err := evidence.Verify(ctx, s, evidence.VerifyOptions{VerifierKey: vkey})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Retained != 2 {
		t.Fatalf("Verify after retention = %+v; want OK with 2 retained leaves", r)
	}
}

// TestDropWithoutRetentionFails: dropping a month without a retention
// event is a deletion, and Verify says so.
func TestDropWithoutRetentionFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	old := time.Now().UTC().AddDate(0, -14, 0)
	if err := s.EnsurePartitions(ctx, old); err != nil {
		t.Fatal(err)
	}
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "a", Now: func() time.Time { return old }})
	if err := w.Append(ctx, evidence.Event{Kind: evidence.KindDecision, Decision: wire.DecisionDeny, Tool: "Exec"}); err != nil {
		t.Fatal(err)
	}
	closeW(t, w)
	skey, vkey, _ := note.GenerateKey(rand.Reader, "test.portcullis/evidence")
	signer, _ := note.NewSigner(skey)
	c, _ := evidence.NewCheckpointer(s, evidence.CheckpointerOptions{Signer: signer})
	if _, err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	part := "evidence_events_" + old.Format("2006_01")
	if err := s.RawExec(ctx, "BEGIN; ALTER TABLE evidence_events DETACH PARTITION "+part+"; DROP TABLE "+part+"; COMMIT"); err != nil {
		t.Fatal(err)
	}
	r, err := evidence.Verify(ctx, s, evidence.VerifyOptions{VerifierKey: vkey})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() {
		t.Fatalf("Verify after an unannounced drop = %+v; want problems", r)
	}
}

func closeW(t *testing.T, w *evidence.Writer) {
	t.Helper()
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
