package storetest

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// testUnansweredRuns lists approved calls without an answer, and only
// those: not a pending call, nor an approved one already answered.
func testUnansweredRuns(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	c := controls(t, s)
	runs, ok := s.(evidence.RunLister)
	if !ok {
		t.Fatalf("%T is not an evidence.RunLister", s)
	}
	now := time.Now().UTC()
	park := func() evidence.ParkedCall {
		in := json.RawMessage(`{"argv":["/usr/bin/true"]}`)
		p := evidence.ParkedCall{ID: uuid.New(), ReceiptID: uuid.New(), Status: wire.ApprovalPending,
			Principal: wire.Principal{ID: "agent", Roles: []string{"agent"}, Attributes: map[string]any{}}, Tool: "Exec",
			Input: in, ArgsSHA256: evidence.ArgsDigest(in), Args: in, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if err := c.ParkCall(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	settle := func(p evidence.ParkedCall, from, to string, resp json.RawMessage) {
		if _, err := c.SettleParked(ctx, evidence.Settle{ID: p.ID, From: from, To: to, By: "approver", At: now, Response: resp}); err != nil {
			t.Fatal(err)
		}
	}
	pending, running, answered := park(), park(), park()
	settle(running, wire.ApprovalPending, wire.ApprovalApproved, nil)
	settle(answered, wire.ApprovalPending, wire.ApprovalApproved, nil)
	settle(answered, wire.ApprovalApproved, wire.ApprovalApproved, json.RawMessage(`{"status":200}`))
	ids, err := runs.UnansweredRuns(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []uuid.UUID{running.ID}) {
		t.Fatalf("UnansweredRuns = %v, want only %s (not pending %s nor answered %s)", ids, running.ID, pending.ID, answered.ID)
	}
}
