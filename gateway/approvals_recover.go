package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// Recovering approved calls whose runner died. Approving a parked call
// moves it to "approved" and the approving process runs it; its answer is
// stored when the run ends. A process that dies in between (a replica lost
// mid-run) would leave the call "approved" without an answer and its
// receipt pending for ever. Each run is therefore claimed from before the
// approval is stored until the answer is: in this process (runClaims), and,
// on a store shared by replicas, in the store (evidence.RunClaimer: a
// PostgreSQL session lock that dies with its process). Every replica looks
// for approved calls without an answer whose claim it can take: their
// runner is gone. It ends each one "interrupted" with evidence events (an
// approval event saying so and an outcome "interrupted" on the receipt,
// unless the run's own outcome made it to the store) and stores the final
// answer, clearing the parked input: the call is never run again, since it
// may already have taken effect.

// recoverEvery is how many sweeps (seconds) pass between two looks for
// approved calls that lost their runner.
const recoverEvery = 5

// recoverGrace is how long, on a store shared by replicas, an approved
// call's run claim must be seen free (on every look in between) before the
// call is taken for one whose runner died: a live runner whose claim's
// connection was lost takes the claim again within seconds
// (evidence/postgres checks it every second), and must not find its
// running call ended interrupted meanwhile.
const recoverGrace = 10 * time.Second

// runClaims are the approved parked calls this process runs now, and
// (freeSince) when other processes' calls were first seen without a live
// runner.
type runClaims struct {
	mu        sync.Mutex
	ids       map[uuid.UUID]bool
	freeSince map[uuid.UUID]time.Time
}

// freeFor records that id's claim was free at now and says for how long
// it has been free on every look since.
func (r *runClaims) freeFor(id uuid.UUID, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.freeSince == nil {
		r.freeSince = map[uuid.UUID]time.Time{}
	}
	first, ok := r.freeSince[id]
	if !ok {
		r.freeSince[id] = now
		return 0
	}
	return now.Sub(first)
}

// held forgets that id's claim was seen free: it is held, or settled.
func (r *runClaims) held(id uuid.UUID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.freeSince, id)
}

func (r *runClaims) take(id uuid.UUID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids[id] {
		return false
	}
	if r.ids == nil {
		r.ids = map[uuid.UUID]bool{}
	}
	r.ids[id] = true
	return true
}

func (r *runClaims) drop(id uuid.UUID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ids, id)
}

// claimRun takes the run claim of parked call id, in this process and (on
// a shared store) in the store; ok is false when someone holds it.
func (s *Server) claimRun(ctx context.Context, id uuid.UUID) (release func(), ok bool, err error) {
	if !s.runs.take(id) {
		return nil, false, nil
	}
	local := func() { s.runs.drop(id) }
	rc, shared := s.opts.Controls.(evidence.RunClaimer)
	if !shared {
		return local, true, nil
	}
	var storeRelease func()
	err = s.withStore(ctx, func(ctx context.Context) error {
		var err error
		storeRelease, ok, err = rc.ClaimRun(ctx, id)
		return err
	})
	if err != nil || !ok {
		local()
		return nil, false, err
	}
	return func() { storeRelease(); local() }, true, nil
}

// recoverRuns ends the approved calls without an answer whose run claim is
// free: their runner died.
func (s *Server) recoverRuns(ctx context.Context) {
	var ids []uuid.UUID
	if rl, ok := s.opts.Controls.(evidence.RunLister); ok {
		var err error
		if ids, err = rl.UnansweredRuns(ctx, 100); err != nil {
			return
		}
	} else {
		list, err := s.opts.Controls.ParkedCalls(ctx, wire.ApprovalApproved, 1000)
		if err != nil {
			return
		}
		for _, pc := range list {
			if len(pc.Response) == 0 {
				ids = append(ids, pc.ID)
			}
		}
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		s.recoverRun(ctx, id)
	}
}

func (s *Server) recoverRun(ctx context.Context, id uuid.UUID) {
	release, ok, err := s.claimRun(ctx, id)
	if err != nil {
		return // the store is unreachable: next time
	}
	if !ok {
		s.runs.held(id) // a live runner holds it
		return
	}
	defer release()
	// Read again under the claim: the runner may have ended it meanwhile.
	pc, err := s.opts.Controls.ParkedCall(ctx, id)
	if err != nil {
		return
	}
	if pc.Status != wire.ApprovalApproved || len(pc.Response) > 0 {
		s.runs.held(id)
		return
	}
	if _, shared := s.opts.Controls.(evidence.RunClaimer); shared && s.runs.freeFor(id, s.opts.Now()) < recoverGrace {
		return // look again: its runner may be taking its claim back
	}
	defer s.runs.held(id)
	we := wire.Errorf(wire.CodeInternal, "the gateway instance running this approved call stopped before the call's end was recorded; "+
		"it may or may not have taken effect, and it was not run again")
	events := []evidence.Event{s.approvalEvent(pc, evidence.ApprovalActionInterrupted, "", we.Message, pc.PolicyRevision)}
	status, resp := statusOf(we.Code), wire.ToolCallResponse{ReceiptID: pc.ReceiptID.String(), CallID: pc.CallID,
		Decision: &wire.DecisionResult{Allow: true, Reasons: []string{}, PolicyRevision: pc.PolicyRevision},
		Output:   failed(we, map[string]any{"receipt_id": pc.ReceiptID.String()})}
	rc, err := s.opts.Receipts.Receipt(ctx, pc.ReceiptID)
	if err != nil {
		s.log.WarnContext(ctx, "approved call without a runner: its receipt cannot be read now; retrying later", "err", err, "approval_id", pc.ID)
		return
	}
	if rc.Outcome != nil && rc.Outcome.Status != wire.StatusPending {
		// The run's outcome was recorded; only its answer was lost.
		resp.Output.Error = wire.Errorf(wire.CodeInternal, "the gateway instance running this approved call stopped after the call ended "+
			"(outcome %q, on its receipt) but before its answer was stored", rc.Outcome.Status)
	} else {
		events = append(events, evidence.Event{ID: uuid.Must(uuid.NewV7()), ReceiptID: pc.ReceiptID, Kind: evidence.KindOutcome,
			Time: s.opts.Now().UTC(), InstanceID: s.opts.InstanceID,
			Outcome: &wire.Outcome{Status: wire.StatusInterrupted, ErrorCode: ptr(string(we.Code))}})
	}
	// Evidence first: should the answer not be stored, the next look
	// finds the call again, and the receipt already says what happened.
	if err := s.appendEvents(ctx, events...); err != nil {
		s.metrics.evidenceFailures.Inc()
		s.log.ErrorContext(ctx, "approved call without a runner: recovery not recorded; retrying later", "err", err, "approval_id", pc.ID)
		return
	}
	answer, _ := json.Marshal(storedAnswer{Status: status, Response: resp})
	err = s.withStore(ctx, func(ctx context.Context) error {
		_, err := s.opts.Controls.SettleParked(ctx, evidence.Settle{ID: pc.ID, From: wire.ApprovalApproved, To: wire.ApprovalApproved,
			At: s.opts.Now().UTC(), Response: answer})
		return err
	})
	if err != nil && !errors.Is(err, evidence.ErrApprovalSettled) {
		s.log.ErrorContext(ctx, "approved call without a runner: its answer was not stored", "err", err, "approval_id", pc.ID)
		return
	}
	s.log.WarnContext(ctx, "approved call whose runner died ended interrupted; not run again", "approval_id", pc.ID, "receipt_id", pc.ReceiptID)
}
