package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/postgres"
	"github.com/portcullis/portcullis/evidence/storetest"
	"github.com/portcullis/portcullis/wire"
)

const defaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func adminURL() string {
	if u := os.Getenv("PORTCULLIS_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return defaultAdminURL
}

// freshDatabase creates portcullis_test_<random> and drops it after the
// test. Without a server the test is skipped, or fails when
// PORTCULLIS_REQUIRE_POSTGRES=1.
func freshDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, adminURL())
	if err != nil {
		if os.Getenv("PORTCULLIS_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("PostgreSQL required but unreachable: %v", err)
		}
		t.Skipf("PostgreSQL unreachable (set PORTCULLIS_REQUIRE_POSTGRES=1 to fail): %v", err)
	}
	defer admin.Close(context.Background())
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "portcullis_test_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, adminURL())
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(adminURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

func open(t testing.TB) *postgres.Store {
	t.Helper()
	return openURL(t, freshDatabase(t))
}

// openURL opens a store on dbURL, closed when the test ends.
func openURL(t testing.TB, dbURL string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), dbURL)
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
	dbURL := freshDatabase(t)
	storetest.RuleRollupBackfill(t, func(*testing.T) (evidence.Store, error) {
		return postgres.Open(context.Background(), dbURL)
	})
}

// tamperable lets the suite act as the database owner: with
// session_replication_role = replica, no trigger fires, which is exactly
// the power the hash chain and the signed checkpoints exist to expose.
type tamperable struct{ *postgres.Store }

func (s tamperable) Tamper(ctx context.Context, stmt string) error {
	return s.RawExec(ctx, "BEGIN; SET LOCAL session_replication_role = replica; "+stmt+"; COMMIT")
}

// TestConcurrentOpen: four replicas starting at once against a fresh
// database all succeed and the schema is applied exactly once.
func TestConcurrentOpen(t *testing.T) {
	t.Parallel()
	dbURL := freshDatabase(t)
	ctx := context.Background()
	storetest.ConcurrentOpen(t, func() (io.Closer, error) { return postgres.Open(ctx, dbURL) })
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var applied int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM portcullis_schema_version WHERE version_id > 0").Scan(&applied); err != nil {
		t.Fatal(err)
	}
	cur, latest, err := postgres.MigrationStatus(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if int64(applied) != latest || cur != latest {
		t.Errorf("%d migrations recorded, status %d/%d; want each of %d applied once", applied, cur, latest, latest)
	}
}

func TestMigrationStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := freshDatabase(t)
	cur, latest, err := postgres.MigrationStatus(ctx, dbURL)
	if err != nil || cur != 0 || latest < 1 {
		t.Fatalf("fresh MigrationStatus = %d/%d, %v; want 0/>=1", cur, latest, err)
	}
	if err := postgres.Migrate(ctx, dbURL); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, dbURL); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if cur, _, err := postgres.MigrationStatus(ctx, dbURL); err != nil || cur != latest {
		t.Fatalf("after Migrate = %d, %v; want %d", cur, err, latest)
	}
}

// TestSchemaGuards: partitions exist for this month and the next, TRUNCATE
// is refused on the table and on a partition, and old-month rows land in
// the DEFAULT partition instead of failing.
func TestSchemaGuards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := freshDatabase(t)
	s := openURL(t, dbURL)
	now := time.Now().UTC()
	next := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, m := range []time.Time{now, next} {
		name := "evidence_events_" + m.Format("2006_01")
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&exists); err != nil || !exists {
			t.Errorf("partition %s missing (err %v)", name, err)
		}
	}
	for _, stmt := range []string{
		"TRUNCATE evidence_events",
		"TRUNCATE evidence_events_default",
		"TRUNCATE evidence_events_" + now.Format("2006_01"),
	} {
		if err := s.RawExec(ctx, stmt); err == nil {
			t.Errorf("%q succeeded; want refused", stmt)
		}
	}
	old, _ := uuid.NewV7()
	at := time.Date(2019, 5, 1, 0, 0, 0, 0, time.UTC)
	if err := s.Append(ctx, []evidence.Event{{ID: old, ReceiptID: old, Kind: evidence.KindDecision, Time: at,
		InstanceID: "i", Decision: wire.DecisionDeny, ChainID: old, ChainSeq: 1}}); err != nil {
		t.Fatalf("append to a month without partition: %v", err)
	}
	var part string
	if err := conn.QueryRow(ctx, "SELECT tableoid::regclass::text FROM evidence_events WHERE id = $1", old).Scan(&part); err != nil || part != "evidence_events_default" {
		t.Errorf("old row stored in %q (%v), want evidence_events_default", part, err)
	}
	// A month whose rows sit in DEFAULT cannot get its partition; ensure
	// must not fail because of it.
	if err := s.EnsurePartitions(ctx, at); err != nil {
		t.Errorf("EnsurePartitions over a populated default month: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := postgres.Open(ctx, "postgres://postgres:hunter2@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if !errors.Is(err, evidence.ErrUnavailable) {
		t.Fatalf("Open(unreachable) = %v, want ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error leaks the password: %v", err)
	}
}

// TestWriterSurvivesOutage: the database goes away mid-run (its sessions are
// terminated), waiters get ErrUnavailable, and once it answers again the
// writer continues the same chain without holes.
func TestWriterSurvivesOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := freshDatabase(t)
	s := openURL(t, dbURL)
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "outage"})
	defer w.Close(ctx)
	appendOne := func() error {
		id, _ := uuid.NewV7()
		return w.Append(ctx, evidence.Event{ID: id, Kind: evidence.KindDecision, Decision: wire.DecisionAllow, Tool: "Exec"})
	}
	for range 3 {
		if err := appendOne(); err != nil {
			t.Fatal(err)
		}
	}
	// Block new connections and kill existing ones: an outage.
	admin, err := pgx.Connect(ctx, adminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	dbName := strings.TrimPrefix(mustParse(t, dbURL).Path, "/")
	exec := func(q string) {
		t.Helper()
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("ALTER DATABASE " + dbName + " WITH ALLOW_CONNECTIONS false")
	exec(fmt.Sprintf("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s' AND pid <> pg_backend_pid()", dbName))
	err = appendOne()
	if !errors.Is(err, evidence.ErrUnavailable) {
		t.Fatalf("Append during outage = %v, want ErrUnavailable", err)
	}
	if w.Healthy() {
		t.Error("writer reports healthy during outage")
	}
	exec("ALTER DATABASE " + dbName + " WITH ALLOW_CONNECTIONS true")
	for range 3 {
		if err := appendOne(); err != nil {
			t.Fatalf("Append after recovery: %v", err)
		}
	}
	if !w.Healthy() {
		t.Error("writer not healthy after recovery")
	}
	chain, seq, _, err := s.ChainHead(ctx, "outage")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.ChainEvents(ctx, chain)
	if err != nil {
		t.Fatal(err)
	}
	if err := evidence.VerifyChain(evs); err != nil {
		t.Errorf("VerifyChain after outage: %v", err)
	}
	if seq != 7 || len(evs) != 7 {
		t.Errorf("chain after outage: %d events, head %d; want 7 (start + 6 acknowledged)", len(evs), seq)
	}
}

func mustParse(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
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
