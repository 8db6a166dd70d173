package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/postgres"
)

// TestAppRoleLegalHolds: the least-privilege app role (what the gateway
// runs as) places, lists and releases legal holds, which need no grant
// beyond INSERT and SELECT on evidence_events, and cannot UPDATE or DELETE
// hold events even with every append-only trigger dropped: a hold cannot
// be lifted or rewritten except by a chained release event.
func TestAppRoleLegalHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := freshDatabase(t)
	owner := openURL(t, dbURL)
	appURL := appRole(t, dbURL)
	if err := owner.RawExec(ctx, "DROP TRIGGER evidence_events_append_only ON evidence_events"); err != nil {
		t.Fatal(err)
	}
	app, err := postgres.Open(ctx, appURL)
	if err != nil {
		t.Fatalf("Open as app role: %v", err)
	}
	defer app.Close()
	w := evidence.NewWriter(app, evidence.WriterOptions{InstanceID: "app"})
	defer func() { _ = w.Close(ctx) }()
	h, err := evidence.PlaceHold(ctx, app, w, evidence.PlaceHoldRequest{
		Since: time.Now().AddDate(-1, 0, 0), Reason: "matter 42", PlacedBy: "admin-1",
	})
	if err != nil {
		t.Fatalf("PlaceHold as app role: %v", err)
	}

	c, err := pgx.Connect(ctx, appURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	month := time.Now().UTC().Format("2006_01")
	for _, stmt := range []string{
		"UPDATE evidence_events SET body = '{}' WHERE kind = 'legal_hold'",
		"DELETE FROM evidence_events WHERE kind = 'legal_hold'",
		"DELETE FROM evidence_events_" + month + " WHERE kind = 'legal_hold'",
		"UPDATE evidence_events_" + month + " SET kind = 'legal_hold_release' WHERE kind = 'legal_hold'",
	} {
		_, err := c.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		if err == nil {
			t.Errorf("%s as app role: succeeded, want permission denied", stmt)
		} else if !errors.As(err, &pgErr) || pgErr.Code != "42501" || strings.Contains(pgErr.Message, "append-only") {
			t.Errorf("%s as app role: %v, want a permission error (42501)", stmt, err)
		}
	}
	holds, err := evidence.ListHolds(ctx, app)
	if err != nil || len(holds) != 1 || holds[0].ID != h.ID || !holds[0].Active {
		t.Fatalf("ListHolds as app role = %+v, %v", holds, err)
	}
	rel, err := evidence.ReleaseHold(ctx, app, w, evidence.ReleaseHoldRequest{ID: uuid.MustParse(holds[0].ID), Reason: "closed", ReleasedBy: "admin-2"})
	if err != nil || rel.Active {
		t.Fatalf("ReleaseHold as app role = %+v, %v", rel, err)
	}
}
