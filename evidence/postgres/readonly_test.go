package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/postgres"
	"github.com/portcullis/portcullis/wire"
)

func tableCount(t *testing.T, dbURL string) int {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOpenReadOnly: verification's open never creates a schema (an empty
// database stays empty), names a database that does not exist, refuses a
// schema other than this binary's without migrating it, refuses writes,
// and reads one snapshot while a writer appends.
func TestOpenReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("empty-database", func(t *testing.T) {
		t.Parallel()
		db := freshDatabase(t)
		if s, err := postgres.OpenReadOnly(ctx, db); !errors.Is(err, evidence.ErrNoStore) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("OpenReadOnly on an empty database = %v, want ErrNoStore", err)
		}
		if n := tableCount(t, db); n != 0 {
			t.Errorf("OpenReadOnly created %d tables", n)
		}
	})
	t.Run("missing-database", func(t *testing.T) {
		t.Parallel()
		u, _ := url.Parse(adminURL())
		u.Path = "/portcullis_never_created_" + uuid.NewString()[:8]
		if s, err := postgres.OpenReadOnly(ctx, u.String()); !errors.Is(err, evidence.ErrNoStore) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("OpenReadOnly on a missing database = %v, want ErrNoStore", err)
		}
	})
	t.Run("older-schema", func(t *testing.T) {
		t.Parallel()
		db := freshDatabase(t)
		s, err := postgres.Open(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		const q = "DELETE FROM portcullis_schema_version WHERE version_id = (SELECT max(version_id) FROM portcullis_schema_version)"
		if err := (tamperable{s}).Tamper(ctx, q); err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		before := tableCount(t, db)
		if ro, err := postgres.OpenReadOnly(ctx, db); !errors.Is(err, evidence.ErrSchemaMismatch) {
			if ro != nil {
				ro.Close()
			}
			t.Fatalf("OpenReadOnly on an older schema = %v, want ErrSchemaMismatch", err)
		}
		cur, latest, err := postgres.MigrationStatus(ctx, db)
		if err != nil || cur >= latest || tableCount(t, db) != before {
			t.Errorf("the read-only open migrated: schema %d of %d (%v)", cur, latest, err)
		}
	})
	t.Run("snapshot-and-writes", func(t *testing.T) {
		t.Parallel()
		db := freshDatabase(t)
		w := openURL(t, db)
		wr := evidence.NewWriter(w, evidence.WriterOptions{InstanceID: "ro"})
		defer wr.Close(ctx)
		d := evidence.Event{ID: uuid.Must(uuid.NewV7()), Kind: evidence.KindDecision, Decision: wire.DecisionAllow}
		if err := wr.Append(ctx, d); err != nil {
			t.Fatal(err)
		}
		ro, err := postgres.OpenReadOnly(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		count := func() int64 {
			cs, err := ro.Chains(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			for _, c := range cs {
				n += c.MaxSeq
			}
			return n
		}
		before := count()
		if err := wr.Append(ctx, evidence.Event{ID: uuid.Must(uuid.NewV7()), Kind: evidence.KindDecision, Decision: wire.DecisionAllow}); err != nil {
			t.Fatal(err)
		}
		if after := count(); after != before {
			t.Errorf("read-only store saw %d events, then %d: not one snapshot", before, after)
		}
		if err := ro.Append(ctx, []evidence.Event{d}); err == nil {
			t.Error("Append on a read-only store succeeded")
		}
		if _, ok, _ := ro.TryLead(ctx); ok {
			t.Error("a read-only store may lead the checkpointer")
		}
	})
}
