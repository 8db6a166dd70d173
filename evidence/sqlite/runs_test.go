package sqlite_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// TestUnansweredRuns lists approved calls without an answer, and only
// those (as the PostgreSQL store's test does).
func TestUnansweredRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	now := time.Now().UTC()
	park := func() evidence.ParkedCall {
		in := json.RawMessage(`{"argv":["/usr/bin/true"]}`)
		p := evidence.ParkedCall{ID: uuid.New(), ReceiptID: uuid.New(), Status: wire.ApprovalPending,
			Principal: wire.Principal{ID: "agent", Roles: []string{"agent"}, Attributes: map[string]any{}}, Tool: "Exec",
			Input: in, ArgsSHA256: evidence.ArgsDigest(in), Args: in, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if err := s.ParkCall(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	settle := func(p evidence.ParkedCall, from, to string, resp json.RawMessage) {
		if _, err := s.SettleParked(ctx, evidence.Settle{ID: p.ID, From: from, To: to, By: "approver", At: now, Response: resp}); err != nil {
			t.Fatal(err)
		}
	}
	pending, running, answered := park(), park(), park()
	settle(running, wire.ApprovalPending, wire.ApprovalApproved, nil)
	settle(answered, wire.ApprovalPending, wire.ApprovalApproved, nil)
	settle(answered, wire.ApprovalApproved, wire.ApprovalApproved, json.RawMessage(`{"status":200}`))
	ids, err := s.UnansweredRuns(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []uuid.UUID{running.ID}) {
		t.Fatalf("UnansweredRuns = %v, want only %s (not pending %s nor answered %s)", ids, running.ID, pending.ID, answered.ID)
	}
}
