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
	// The holder's session dies (its process was killed): the claim is free.
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var killed int
	if err := c.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 2 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminate the holder's session: %d %v", killed, err)
	}
	defer relB()
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
			t.Fatal("the claim of a dead session was never freed")
		}
	}
}
