package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/postgres"
	"github.com/portcullis/portcullis/wire"
)

// appRole creates a login role with a random name in the cluster of dbURL,
// gives it the app privileges with evidence_grant_app (as the owner), and
// returns a URL that connects as it. The role is dropped after the test.
func appRole(t *testing.T, dbURL string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "portcullis_app_" + hex.EncodeToString(b[:])
	password := hex.EncodeToString(b[:]) + "pw"
	owner, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	if _, err := owner.Exec(ctx, "CREATE ROLE "+name+" LOGIN PASSWORD '"+password+"'"); err != nil {
		t.Fatalf("create role: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Errorf("drop role %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP OWNED BY "+name); err != nil {
			t.Errorf("drop owned by %s: %v", name, err)
		}
		if _, err := c.Exec(ctx, "DROP ROLE "+name); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	if _, err := owner.Exec(ctx, "SELECT evidence_grant_app($1)", name); err != nil {
		t.Fatalf("evidence_grant_app: %v", err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, password)
	return u.String()
}

// TestAppRoleLeastPrivilege connects as a least-privilege app role: the
// gateway's own store (postgres.Open, Writer, checkpointer, queries) works,
// while UPDATE, DELETE and TRUNCATE of the parent and of monthly partitions,
// including one created after the grants, fail with permission errors.
// The append-only triggers are dropped first, so the refusals come from
// the privileges alone.
func TestAppRoleLeastPrivilege(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := freshDatabase(t)
	owner := openURL(t, dbURL)
	appURL := appRole(t, dbURL)
	// Independent of the triggers: remove every one of them.
	for _, stmt := range []string{
		"DROP TRIGGER evidence_events_append_only ON evidence_events",
		"DROP TRIGGER evidence_events_no_truncate ON evidence_events",
		"DROP TRIGGER evidence_events_no_truncate ON evidence_events_default",
		"DROP TRIGGER evidence_tree_append_only ON evidence_tree",
		"DROP TRIGGER evidence_tree_no_truncate ON evidence_tree",
		"DROP TRIGGER evidence_checkpoints_append_only ON evidence_checkpoints",
		"DROP TRIGGER evidence_checkpoints_no_truncate ON evidence_checkpoints",
	} {
		if err := owner.RawExec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	month := time.Now().UTC().Format("2006_01")
	if err := owner.RawExec(ctx, "DROP TRIGGER evidence_events_no_truncate ON evidence_events_"+month); err != nil {
		t.Fatal(err)
	}

	// The app role opens the store the way the gateway does: goose sees
	// the schema is current, and evidence_ensure_partitions (SECURITY
	// DEFINER) creates a partition for a later month, owned by the owner.
	app, err := postgres.Open(ctx, appURL)
	if err != nil {
		t.Fatalf("Open as app role: %v", err)
	}
	defer app.Close()
	later := time.Now().UTC().AddDate(0, 6, 0)
	if err := app.EnsurePartitions(ctx, later); err != nil {
		t.Fatalf("EnsurePartitions as app role: %v", err)
	}
	laterPart := "evidence_events_" + later.Format("2006_01")

	w := evidence.NewWriter(app, evidence.WriterOptions{InstanceID: "app"})
	d := evidence.Event{Kind: evidence.KindDecision, Decision: "allow", Tool: "Exec", PrincipalID: "p"}
	dl := evidence.Event{Kind: evidence.KindDecision, Decision: "deny", Tool: "Exec", PrincipalID: "p", Time: later}
	if err := w.Append(ctx, d, dl); err != nil {
		t.Fatalf("INSERT as app role: %v", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	chain, seq, _, err := app.ChainHead(ctx, "app")
	if err != nil || seq != 3 {
		t.Fatalf("SELECT as app role: head seq %d, %v", seq, err)
	}
	evs, err := app.ChainEvents(ctx, chain)
	if err != nil || len(evs) != 3 {
		t.Fatalf("ChainEvents as app role: %d, %v", len(evs), err)
	}
	if err := evidence.VerifyChain(evs); err != nil {
		t.Fatal(err)
	}

	// Quota counters: drawn and, once their window ended, pruned.
	now := time.Now()
	if _, ex, err := app.ConsumeQuotas(ctx, []wire.Quota{{Key: "p/Exec", Limit: 5, WindowS: 60, Cost: 1}}, now.Add(-time.Hour)); err != nil || ex != nil {
		t.Fatalf("ConsumeQuotas as app role: %+v, %v", ex, err)
	}
	if n, err := app.PruneQuotas(ctx, now); err != nil || n != 1 {
		t.Fatalf("PruneQuotas as app role = %d, %v; want the ended window pruned", n, err)
	}

	c, err := pgx.Connect(ctx, appURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var partOwner string
	if err := c.QueryRow(ctx, "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = $1", laterPart).Scan(&partOwner); err != nil {
		t.Fatal(err)
	}
	if partOwner == c.Config().User {
		t.Fatalf("partition %s is owned by the app role", laterPart)
	}
	for _, stmt := range []string{
		"UPDATE evidence_events SET tool = 'x'",
		"DELETE FROM evidence_events",
		"TRUNCATE evidence_events",
		"UPDATE evidence_events_" + month + " SET tool = 'x'",
		"DELETE FROM evidence_events_" + month,
		"TRUNCATE evidence_events_" + month,
		"TRUNCATE " + laterPart,
		"DELETE FROM " + laterPart,
		"TRUNCATE evidence_events_default",
		"UPDATE evidence_tree SET chain_seq = 0",
		"DELETE FROM evidence_tree_hashes",
		"TRUNCATE evidence_checkpoints",
		"ALTER TABLE evidence_events DETACH PARTITION " + laterPart,
		"DROP TABLE " + laterPart,
		"DROP TRIGGER evidence_tree_hashes_append_only ON evidence_tree_hashes",
	} {
		_, err := c.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		if err == nil {
			t.Errorf("%s as app role: succeeded, want permission denied", stmt)
		} else if !errors.As(err, &pgErr) || pgErr.Code != "42501" || strings.Contains(pgErr.Message, "append-only") {
			t.Errorf("%s as app role: %v, want a permission error (42501)", stmt, err)
		}
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM evidence_events").Scan(&n); err != nil || n != 3 {
		t.Fatalf("after refused changes: %d events, %v", n, err)
	}
}
