package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/evidence/storetest"
	"github.com/portcullis/portcullis/wire"
)

func open(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "evidence.db"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) evidence.Store { return tamperable{open(t)} })
}

// TestRuleRollupBackfill: migration 00006 counts the rule ids of decisions
// checkpointed before it.
func TestRuleRollupBackfill(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "evidence.db")
	storetest.RuleRollupBackfill(t, func(*testing.T) (evidence.Store, error) {
		return sqlite.Open(context.Background(), path)
	})
}

// tamperable lets the suite act as whoever holds the file: it drops the
// append-only triggers (of this test's own file) and runs the statement.
type tamperable struct{ *sqlite.Store }

func (s tamperable) Tamper(ctx context.Context, stmt string) error {
	for _, trg := range []string{"evidence_events_no_update", "evidence_events_no_delete", "evidence_checkpoints_no_change", "evidence_checkpoints_no_delete",
		"evidence_tree_no_change", "evidence_tree_no_delete", "evidence_tree_hashes_no_change", "evidence_tree_hashes_no_delete",
		"evidence_rule_ids_no_update", "evidence_rule_ids_no_delete"} {
		if err := s.RawExec(ctx, "DROP TRIGGER IF EXISTS "+trg); err != nil {
			return err
		}
	}
	return s.RawExec(ctx, stmt)
}

func TestMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	cur, latest, err := sqlite.MigrationStatus(ctx, path)
	if err != nil {
		t.Fatalf("MigrationStatus on fresh file: %v", err)
	}
	if cur != 0 || latest < 1 {
		t.Fatalf("fresh status = %d/%d, want 0/>=1", cur, latest)
	}
	for range 2 { // idempotent
		if err := sqlite.Migrate(ctx, path); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	cur, latest2, err := sqlite.MigrationStatus(ctx, path)
	if err != nil || cur != latest || latest2 != latest {
		t.Fatalf("after Migrate status = %d/%d, %v; want %d/%d", cur, latest2, err, latest, latest)
	}
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open migrated file: %v", err)
	}
	_ = s.Close()
}

func TestOpenRejectsBadPath(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "x.db?mode=ro", filepath.Join(t.TempDir(), "missing-dir", "x.db")} {
		if s, err := sqlite.Open(context.Background(), p); err == nil {
			_ = s.Close()
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}

// TestClosedStoreUnavailable: a store that cannot be reached makes the
// Writer fail every waiter with ErrUnavailable, never a false ack.
func TestClosedStoreUnavailable(t *testing.T) {
	t.Parallel()
	s := open(t)
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "x"})
	defer w.Close(context.Background())
	_ = s.Close()
	id, _ := uuid.NewV7()
	err := w.Append(context.Background(), evidence.Event{ID: id, Kind: evidence.KindDecision, Decision: wire.DecisionAllow})
	if !errors.Is(err, evidence.ErrUnavailable) {
		t.Fatalf("Append on closed store = %v, want ErrUnavailable", err)
	}
	if w.Healthy() {
		t.Error("writer healthy after failed commit")
	}
}

// BenchmarkWriter: the Writer's group commit with 64 callers, without a
// quota, with a quota drawn in a transaction of its own before each
// decision, and with it drawn in the decision's commit
// (storetest.BenchWriter).
func BenchmarkWriter(b *testing.B) {
	for _, mode := range []string{storetest.BenchNoQuota, storetest.BenchQuotaSeparate, storetest.BenchQuotaInCommit} {
		b.Run(mode, func(b *testing.B) { storetest.BenchWriter(b, open(b), mode) })
	}
}
