package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// TestRunClaims: an approved call's run claim is held by one process at a
// time, released by release, and by the death of the holder's session.
func TestRunClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := freshDatabase(t)
	a := openURL(t, dbURL)
	b := openURL(t, dbURL)
	id := uuid.New()
	relA, ok, err := a.ClaimRun(ctx, id)
	if err != nil || !ok {
		t.Fatalf("first claim: %v %v", ok, err)
	}
	if _, ok, err := b.ClaimRun(ctx, id); err != nil || ok {
		t.Fatalf("a claim held by another process was taken: %v %v", ok, err)
	}
	if rel, ok, err := b.ClaimRun(ctx, uuid.New()); err != nil || !ok {
		t.Fatalf("another call's claim: %v %v", ok, err)
	} else {
		rel()
	}
	relA()
	relB, ok, err := b.ClaimRun(ctx, id)
	if err != nil || !ok {
		t.Fatalf("a released claim: %v %v", ok, err)
	}
	// The holder's connection dies while its process lives (a terminated
	// backend, a proxy's idle timeout): the holder takes the claim back on
	// a new connection, and nobody else can take it then.
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	claimPIDs := func() []int {
		t.Helper()
		rows, err := c.Query(ctx, `SELECT pid FROM pg_locks
			WHERE locktype = 'advisory' AND objsubid = 2 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
		if err != nil {
			t.Fatal(err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			t.Fatal(err)
		}
		return pids
	}
	before := claimPIDs()
	if len(before) != 1 {
		t.Fatalf("run claim locks held: %v, want one", before)
	}
	if _, err := c.Exec(ctx, "SELECT pg_terminate_backend($1)", before[0]); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if now := claimPIDs(); len(now) == 1 && now[0] != before[0] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the live holder never took its claim back after its connection died")
		}
	}
	if _, ok, err := a.ClaimRun(ctx, id); err != nil || ok {
		t.Fatalf("a claim its live holder took back was taken by another process: %v %v", ok, err)
	}
	relB()
	// The holder's process dies (its store closes with it): the claim is free.
	rel, ok, err := b.ClaimRun(ctx, id)
	if err != nil || !ok {
		t.Fatalf("claim again: %v %v", ok, err)
	}
	_ = rel // given up by Close
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rel, ok, err := a.ClaimRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			rel()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim of a closed store was never freed")
		}
	}
	if _, _, err := b.ClaimRun(ctx, id); err == nil {
		t.Error("a closed store took a run claim")
	}
}
