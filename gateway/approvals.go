package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/gateway/identity"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// Human approval (contract section 9). A call whose decision requires a
// person is parked: its receipt (decision, an approval "requested" event
// and a pending outcome) is durable before the 202 answer, and the exact
// call (principal, tool, input, args digest, revision, expiry) is kept in
// the store (evidence.ControlStore), where every replica sees it. An
// approver settles it exactly once (evidence.ControlStore.SettleParked);
// approval re-decides the parked call with the live policy and runs it
// itself, so the agent can change nothing. Reject and expiry end it with
// approval_rejected / approval_expired. Every step is a chained event on
// the call's receipt.

// ApprovalOptions configures how parked calls wait and notify.
type ApprovalOptions struct {
	// MCPWait is how long MCP tools/call waits for a parked call's
	// approval (default 60s; a negative value: not at all).
	MCPWait time.Duration
	// WebhookURL, when set, receives a JSON POST per new pending approval.
	WebhookURL string
	// Client posts to WebhookURL (default: 10 s timeout, no redirects).
	Client *http.Client
	// PollInterval is how often a waiter looks for a parked call's end
	// (default 200ms); replicas learn of it only through the store.
	PollInterval time.Duration
}

// MaxPendingApprovals bounds the calls one principal may have waiting for
// approval at once; past it a call that needs approval is refused
// rate_limited instead of parked.
const MaxPendingApprovals = 100

// maxWait bounds GET /v1/tool-calls/{id}?wait=.
const maxWait = 5 * time.Minute

// maxWaitsPerPrincipal bounds how many waits for parked calls one
// principal (by id) holds open at once, GET /v1/tool-calls/{id}?wait= and
// MCP tools/call (approvals.mcp_wait) together: each polls the store every
// PollInterval, so without a bound one agent's requests would multiply
// into store load for everyone. Past it, GET ?wait= is 429 rate_limited and
// an MCP call answers its pending approval without waiting.
const maxWaitsPerPrincipal = 8

// waiters counts the open waits of each principal id.
type waiters struct {
	mu   sync.Mutex
	byID map[string]int
}

// enter takes one of id's wait slots; false when all are held. Give it
// back with leave.
func (w *waiters) enter(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byID[id] >= maxWaitsPerPrincipal {
		return false
	}
	if w.byID == nil {
		w.byID = map[string]int{}
	}
	w.byID[id]++
	return true
}

func (w *waiters) leave(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byID[id]--; w.byID[id] <= 0 {
		delete(w.byID, id)
	}
}

// storedAnswer is a parked call's final answer as the store keeps it.
type storedAnswer struct {
	Status   int                   `json:"status"`
	Response wire.ToolCallResponse `json:"response"`
}

// park parks an admitted call whose decision requires approval.
func (s *Server) park(ctx context.Context, rec *record, a admission) (int, wire.ToolCallResponse) {
	if r, ok := a.call.(tools.Releaser); ok {
		r.Release() // it runs, if ever, from the parked input
	}
	if s.opts.Controls == nil {
		rec.scope = nil
		return s.refuse(ctx, rec, wire.DecisionDeny, wire.Errorf(wire.CodeEvidenceUnavailable,
			"the policy requires approval but this gateway keeps no parked calls; the call was not run"))
	}
	// A principal's pending calls are bounded: parking draws on no quota,
	// and an agent that could park without end would fill the store with
	// exact inputs and bury a call among thousands on the approvers' page.
	var waiting int
	if err := s.withStore(ctx, func(ctx context.Context) error {
		var err error
		waiting, err = s.opts.Controls.PendingParked(ctx, rec.principal.ID, MaxPendingApprovals)
		return err
	}); err != nil {
		rec.scope = nil
		return s.refuse(ctx, rec, wire.DecisionDeny, wire.Wrap(wire.CodeEvidenceUnavailable, "approvals: count pending", err,
			"the evidence store is unavailable, so the call was not parked; retry later"))
	}
	if waiting >= MaxPendingApprovals {
		return s.refuse(ctx, rec, wire.DecisionDeny, markRateLimited(rec, &wire.Error{Code: wire.CodeRateLimited,
			Message: fmt.Sprintf("principal %q already has %d calls waiting for approval, the most it may; the call was not parked (retry once some are decided)", rec.principal.ID, waiting),
			Details: map[string]any{"pending_approvals": waiting, "limit": MaxPendingApprovals}}))
	}
	req := a.decision.Approval
	now := s.opts.Now().UTC()
	pc := evidence.ParkedCall{
		ID: uuid.Must(uuid.NewV7()), ReceiptID: rec.id, Status: wire.ApprovalPending,
		Principal: rec.principal, Tool: rec.req.Tool, CallID: rec.req.CallID, SessionID: rec.req.SessionID,
		Input: rec.req.Input, ArgsSHA256: evidence.ArgsDigest(rec.req.Input),
		Args:           evidence.BoundedArgs(rec.args, rec.req.Input, evidence.MaxArgsBytes),
		PolicyRevision: rec.decision.PolicyRevision, Reason: req.Reason, Approvers: req.Approvers,
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(req.TTLS) * time.Second),
	}
	if pc.Reason != "" {
		rec.decision.Reasons = append(append([]string(nil), rec.decision.Reasons...), pc.Reason)
	}
	requested := s.approvalEvent(pc, evidence.ApprovalActionRequested, "", pc.Reason, pc.PolicyRevision)
	pending := s.endEvent(pc.ReceiptID, wire.StatusPending, wire.CodeApprovalRequired)
	if err := s.appendEvents(ctx, s.decisionEvent(rec, wire.DecisionAllow, ""), requested, pending); err != nil {
		s.metrics.evidenceFailures.Inc()
		s.log.ErrorContext(ctx, "parked call's receipt not durable; not parked", "err", err)
		we := wire.Errorf(wire.CodeEvidenceUnavailable, "the evidence store is unavailable, so the call was not parked; retry later")
		return statusOf(we.Code), wire.ToolCallResponse{CallID: rec.req.CallID, Decision: s.decisionResult(rec), Output: failed(we, nil)}
	}
	if err := s.withStore(ctx, func(ctx context.Context) error { return s.opts.Controls.ParkCall(ctx, pc) }); err != nil {
		s.log.ErrorContext(ctx, "parked call not stored; its receipt ends evidence_unavailable", "err", err, "receipt_id", rec.id)
		s.late.Queue(s.endEvent(pc.ReceiptID, wire.StatusError, wire.CodeEvidenceUnavailable), false)
		we := wire.Errorf(wire.CodeEvidenceUnavailable, "the call could not be parked for approval; retry later")
		return statusOf(we.Code), wire.ToolCallResponse{ReceiptID: rec.idText, CallID: rec.req.CallID, Decision: s.decisionResult(rec), Output: failed(we, nil)}
	}
	s.metrics.calls.WithLabelValues(rec.req.Tool, wire.DecisionAllow, string(wire.CodeApprovalRequired)).Inc()
	go s.notifyApproval(context.WithoutCancel(ctx), pc)
	return http.StatusAccepted, pendingAnswer(pc)
}

// pendingAnswer is the 202 answer of a parked call, the same at parking
// and for every waiter.
func pendingAnswer(pc evidence.ParkedCall) wire.ToolCallResponse {
	we := &wire.Error{Code: wire.CodeApprovalRequired,
		Message: "the call waits for a person's approval (" + pc.Reason + "); nothing ran. Poll GET /v1/tool-calls/" + pc.ReceiptID.String() + "?wait=30s for the result",
		Details: map[string]any{"approval_id": pc.ID.String(), "expires_at": pc.ExpiresAt, "reason": pc.Reason}}
	reasons := []string{}
	if pc.Reason != "" {
		reasons = []string{pc.Reason}
	}
	return wire.ToolCallResponse{
		ReceiptID: pc.ReceiptID.String(), CallID: pc.CallID,
		Decision: &wire.DecisionResult{Allow: true, Reasons: reasons, PolicyRevision: pc.PolicyRevision},
		Output:   failed(we, map[string]any{"receipt_id": pc.ReceiptID.String()}),
		Approval: &wire.ApprovalRef{ID: pc.ID.String(), Status: wire.ApprovalPending, ExpiresAt: pc.ExpiresAt},
	}
}

// approvalEvent is a chained approval event on the parked call's receipt.
func (s *Server) approvalEvent(pc evidence.ParkedCall, action, by, reason, revision string) evidence.Event {
	b := evidence.ApprovalBody{ApprovalID: pc.ID.String(), Action: action, By: by, Reason: truncate(reason, wire.MaxApprovalReason), PolicyRevision: revision}
	if action == evidence.ApprovalActionRequested {
		b.ExpiresAt, b.Approvers = pc.ExpiresAt.Format(time.RFC3339Nano), pc.Approvers
	}
	body, _ := json.Marshal(b) // strings only: cannot fail
	return evidence.Event{ID: uuid.Must(uuid.NewV7()), ReceiptID: pc.ReceiptID, Kind: evidence.KindApproval,
		Time: s.opts.Now().UTC(), InstanceID: s.opts.InstanceID, PrincipalID: by, Body: body}
}

// endEvent is an outcome with a status and a contract code, nothing run.
func (s *Server) endEvent(receipt uuid.UUID, status string, code wire.Code) evidence.Event {
	return evidence.Event{ID: uuid.Must(uuid.NewV7()), ReceiptID: receipt, Kind: evidence.KindOutcome, Time: s.opts.Now().UTC(),
		InstanceID: s.opts.InstanceID, Outcome: &wire.Outcome{Status: status, ErrorCode: ptr(string(code)), Backend: "none"}}
}

// withStore runs f against the control store within EvidenceTimeout,
// detached from the client's context (a disconnecting client cannot
// cancel a settlement half way).
func (s *Server) withStore(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.EvidenceTimeout)
	defer cancel()
	return f(ctx)
}

// mayDecide says whether p may approve or reject pc: never the call's own
// principal (nor one whose id differs from it only in case or Unicode
// form, identity.IDKey); an admin always; else someone the policy's
// approvers name (any approver when it names none).
func mayDecide(p wire.Principal, pc evidence.ParkedCall) *wire.Error {
	if p.ID == pc.Principal.ID || identity.IDKey(p.ID) == identity.IDKey(pc.Principal.ID) {
		return wire.Errorf(wire.CodeForbidden, "nobody approves their own call: %q made this call", p.ID)
	}
	if p.HasRole(wire.RoleAdmin) || len(pc.Approvers) == 0 {
		return nil
	}
	for _, a := range pc.Approvers {
		switch {
		case len(a) > 5 && a[:5] == "role:" && p.HasRole(a[5:]):
			return nil
		case len(a) > 10 && a[:10] == "principal:" && a[10:] == p.ID:
			return nil
		}
	}
	return wire.Errorf(wire.CodeForbidden, "the policy names other approvers for this call: %v", pc.Approvers)
}

// settle ends a parked call that will not run (rejected, expired, or
// stopped at its re-decision): it moves it from `from` exactly once,
// records the step and the outcome, and stores the final answer.
func (s *Server) settle(ctx context.Context, pc evidence.ParkedCall, from, to, action, by, reason string, we *wire.Error) (evidence.ParkedCall, error) {
	resp := wire.ToolCallResponse{ReceiptID: pc.ReceiptID.String(), CallID: pc.CallID,
		Decision: &wire.DecisionResult{Allow: false, Reasons: []string{we.Message}, PolicyRevision: pc.PolicyRevision},
		Output:   failed(we, map[string]any{"receipt_id": pc.ReceiptID.String()})}
	answer, _ := json.Marshal(storedAnswer{Status: statusOf(we.Code), Response: resp})
	var out evidence.ParkedCall
	err := s.withStore(ctx, func(ctx context.Context) error {
		var err error
		out, err = s.opts.Controls.SettleParked(ctx, evidence.Settle{ID: pc.ID, From: from, To: to, By: by, Reason: reason, At: s.opts.Now().UTC(), Response: answer})
		return err
	})
	if err != nil {
		return out, err
	}
	events := []evidence.Event{s.endEvent(pc.ReceiptID, wire.StatusError, we.Code)}
	if action != "" {
		events = append([]evidence.Event{s.approvalEvent(pc, action, by, reason, pc.PolicyRevision)}, events...)
	}
	if err := s.appendEvents(ctx, events...); err != nil {
		s.metrics.evidenceFailures.Inc()
		s.log.ErrorContext(ctx, "approval settlement not recorded yet; queued", "err", err, "receipt_id", pc.ReceiptID)
		for _, e := range events {
			if e.Kind == evidence.KindOutcome { // the late queue records outcomes
				s.late.Queue(e, false)
			}
		}
	}
	return out, nil
}

// expire ends a pending call whose TTL passed (approval_expired); a call
// someone else settled first is left as it is.
func (s *Server) expire(ctx context.Context, pc evidence.ParkedCall) {
	_, err := s.settle(ctx, pc, wire.ApprovalPending, wire.ApprovalExpired, evidence.ApprovalActionExpired, "", "",
		wire.Errorf(wire.CodeApprovalExpired, "the call waited longer than its approval TTL (until %s) and did not run", pc.ExpiresAt.Format(time.RFC3339)))
	if err != nil && !errors.Is(err, evidence.ErrApprovalSettled) {
		s.log.ErrorContext(ctx, "could not expire a parked call", "err", err, "approval_id", pc.ID)
	}
}

// sweepApprovals expires parked calls whose TTL passed, every second, on
// every replica (settling is exactly once, so replicas never both do it),
// every recoverEvery seconds ends approved calls whose runner died
// (recoverRuns), and every pruneQuotasEvery seconds deletes quota windows
// long ended (pruneQuotas).
func (s *Server) sweepApprovals(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	tick := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if tick++; tick%recoverEvery == 0 {
			s.recoverRuns(ctx)
		}
		if tick%pruneQuotasEvery == 0 {
			s.pruneQuotas(ctx)
		}
		ids, err := s.opts.Controls.ExpiredParked(ctx, s.opts.Now().UTC(), 100)
		if err != nil {
			continue
		}
		for _, id := range ids {
			if pc, err := s.opts.Controls.ParkedCall(ctx, id); err == nil {
				s.expire(ctx, pc)
			}
		}
	}
}

// Quota counters of windows that ended more than quotaKeep ago are
// deleted every pruneQuotasEvery seconds (any replica; deleting is
// idempotent): a policy that builds quota keys from a call's input would
// otherwise leave a row per key and window for good. GET /v1/quotas shows
// a key's windows of the last day and the current one.
const (
	pruneQuotasEvery = 60
	quotaKeep        = 24 * time.Hour
)

func (s *Server) pruneQuotas(ctx context.Context) {
	if err := s.withStore(ctx, func(ctx context.Context) error {
		_, err := s.opts.Controls.PruneQuotas(ctx, s.opts.Now().Add(-quotaKeep))
		return err
	}); err != nil {
		s.log.WarnContext(ctx, "could not prune ended quota windows", "err", err)
	}
}

// approve settles pc as approved by p and runs it: the approval is
// durable before anything runs; the call is re-decided with the live
// policy (a revision that now denies, or refuses enforcement, stops it)
// and runs as parked, under the parked principal, with the parked input
// (whose digest must still be the parked one).
func (s *Server) approve(ctx context.Context, p wire.Principal, pc evidence.ParkedCall, reason string) (int, wire.ToolCallResponse, error) {
	// The run claim is held from before the approval is stored until the
	// run's answer is, so an approved call without an answer whose claim
	// is free has lost its runner (approvals_recover.go).
	release, ok, err := s.claimRun(ctx, pc.ID)
	if err != nil {
		return 0, wire.ToolCallResponse{}, err
	}
	if !ok {
		return 0, wire.ToolCallResponse{}, evidence.ErrApprovalSettled // another approver is settling it now
	}
	defer release()
	won, err := s.settleApproved(ctx, pc, p.ID, reason)
	if err != nil {
		return 0, wire.ToolCallResponse{}, err
	}
	if err := s.appendEvents(ctx, s.approvalEvent(won, evidence.ApprovalActionApproved, p.ID, reason, s.opts.PolicyRevision())); err != nil {
		s.metrics.evidenceFailures.Inc()
		return s.stopApproved(ctx, won, wire.Errorf(wire.CodeEvidenceUnavailable, "the approval could not be recorded, so the call did not run"))
	}
	if evidence.ArgsDigest(won.Input) != won.ArgsSHA256 {
		return s.stopApproved(ctx, won, wire.Errorf(wire.CodeInternal, "the parked input no longer matches its digest; the call did not run"))
	}
	status, resp := s.runParked(ctx, p, won)
	resp.Approval = &wire.ApprovalRef{ID: won.ID.String(), Status: wire.ApprovalApproved, ExpiresAt: won.ExpiresAt}
	answer, _ := json.Marshal(storedAnswer{Status: status, Response: resp})
	if err := s.withStore(ctx, func(ctx context.Context) error {
		_, err := s.opts.Controls.SettleParked(ctx, evidence.Settle{ID: won.ID, From: wire.ApprovalApproved, To: wire.ApprovalApproved, At: s.opts.Now().UTC(), Response: answer})
		return err
	}); err != nil {
		s.log.ErrorContext(ctx, "approved call ran but its answer was not stored", "err", err, "receipt_id", won.ReceiptID)
	}
	return status, resp, nil
}

func (s *Server) settleApproved(ctx context.Context, pc evidence.ParkedCall, by, reason string) (evidence.ParkedCall, error) {
	var won evidence.ParkedCall
	err := s.withStore(ctx, func(ctx context.Context) error {
		var err error
		won, err = s.opts.Controls.SettleParked(ctx, evidence.Settle{ID: pc.ID, From: wire.ApprovalPending, To: wire.ApprovalApproved, By: by, Reason: reason, At: s.opts.Now().UTC()})
		return err
	})
	return won, err
}

// stopApproved ends an approved call that will not run.
func (s *Server) stopApproved(ctx context.Context, pc evidence.ParkedCall, we *wire.Error) (int, wire.ToolCallResponse, error) {
	out, err := s.settle(ctx, pc, wire.ApprovalApproved, wire.ApprovalStopped, "", pc.DecidedBy, "", we)
	if err != nil {
		return 0, wire.ToolCallResponse{}, err
	}
	var a storedAnswer
	_ = json.Unmarshal(out.Response, &a)
	return a.Status, a.Response, nil
}

// runParked re-decides the parked call with the live policy and, when it
// is still allowed, draws its quotas and runs it under its own receipt.
// When the live decision still requires approval, approver must be one it
// names too: a policy that narrowed who decides such a call since it was
// parked is not bypassed by an approver only the parked revision named.
func (s *Server) runParked(ctx context.Context, approver wire.Principal, pc evidence.ParkedCall) (int, wire.ToolCallResponse) {
	tool, we := s.findTool(pc.Tool)
	if we != nil {
		_, resp, _ := s.stopApproved(ctx, pc, we)
		return statusOf(we.Code), resp
	}
	req := wire.ToolCallRequest{Tool: pc.Tool, Input: pc.Input, CallID: pc.CallID, SessionID: pc.SessionID}
	rec := &record{id: pc.ReceiptID, idText: pc.ReceiptID.String(), at: s.opts.Now().UTC(), principal: pc.Principal, req: req}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		rec.traceID = sc.TraceID().String()
	}
	ctx, span := s.startCall(ctx, rec, tool)
	defer span.End()
	a, st := s.admit(ctx, pc.Principal, tool, req, wire.PurposeCall)
	if st != nil {
		return s.stoppedRun(ctx, pc, st.err)
	}
	rec.decision, rec.args, rec.scope = a.decision, a.call.Args(), &a.scope
	if live := a.decision.Approval; live != nil {
		if we := mayDecide(approver, evidence.ParkedCall{Principal: pc.Principal, Approvers: live.Approvers}); we != nil {
			if r, ok := a.call.(tools.Releaser); ok {
				r.Release()
			}
			return s.stoppedRun(ctx, pc, wire.Errorf(wire.CodeForbidden,
				"the live policy (revision %s) names other approvers for this call (%v); %s did not approve it as they may, so it did not run",
				a.decision.PolicyRevision, live.Approvers, approver.ID))
		}
	}
	if _, refused := s.drawQuotas(ctx, rec, a); refused != nil {
		return s.stoppedRun(ctx, pc, refused)
	}
	res := s.dispatch(ctx, rec, a)
	s.recordOutcome(ctx, rec, &res)
	s.keepResult(ctx, rec, tool.Name(), res)
	return s.answerCall(ctx, span, rec, tool, res)
}

func (s *Server) stoppedRun(ctx context.Context, pc evidence.ParkedCall, we *wire.Error) (int, wire.ToolCallResponse) {
	status, resp, err := s.stopApproved(ctx, pc, we)
	if err != nil {
		return statusOf(we.Code), wire.ToolCallResponse{ReceiptID: pc.ReceiptID.String(), CallID: pc.CallID, Output: failed(we, nil)}
	}
	return status, resp
}

// finalAnswer is a parked call's answer now: its final one once settled,
// else the pending one (expiring it first when its TTL passed). done
// reports whether the answer is final.
func (s *Server) finalAnswer(ctx context.Context, pc evidence.ParkedCall) (int, wire.ToolCallResponse, bool) {
	if pc.Status == wire.ApprovalPending && !s.opts.Now().Before(pc.ExpiresAt) {
		s.expire(ctx, pc)
		if again, err := s.opts.Controls.ParkedCall(ctx, pc.ID); err == nil {
			pc = again
		}
	}
	if pc.Status != wire.ApprovalPending && len(pc.Response) > 0 {
		var a storedAnswer
		if json.Unmarshal(pc.Response, &a) == nil {
			a.Response.Approval = &wire.ApprovalRef{ID: pc.ID.String(), Status: pc.Status, ExpiresAt: pc.ExpiresAt}
			return a.Status, a.Response, true
		}
	}
	resp := pendingAnswer(pc)
	resp.Approval.Status = pc.Status // approved: running now
	return http.StatusAccepted, resp, false
}

// awaitFinal waits up to wait for the parked call of receipt to end,
// polling the store (any replica may settle it); progress, when set, is
// called at each poll.
func (s *Server) awaitFinal(ctx context.Context, receipt uuid.UUID, wait time.Duration, progress func(elapsed time.Duration)) (int, wire.ToolCallResponse, error) {
	poll := s.opts.Approvals.PollInterval
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	start := time.Now()
	deadline := start.Add(wait)
	for {
		pc, err := s.opts.Controls.ParkedCallByReceipt(ctx, receipt)
		if err != nil {
			return 0, wire.ToolCallResponse{}, err
		}
		status, resp, done := s.finalAnswer(ctx, pc)
		if done || !time.Now().Before(deadline) {
			return status, resp, nil
		}
		if progress != nil {
			progress(time.Since(start))
		}
		select {
		case <-ctx.Done():
			return status, resp, nil
		case <-time.After(min(poll, time.Until(deadline))):
		}
	}
}

// AwaitApproval is the hook an MCP tools/call uses: when the call was
// parked (202 approval_required), it waits up to approvals.mcp_wait for
// its end, calling progress at each poll (for notifications/progress when
// the client gave a progress token), and answers the final response, or
// the pending one naming the approval id. The wait counts against
// principalID's maxWaitsPerPrincipal; with none left it does not wait.
func (s *Server) AwaitApproval(ctx context.Context, principalID string, status int, resp wire.ToolCallResponse, progress func(elapsed, total time.Duration)) (int, wire.ToolCallResponse) {
	wait := s.opts.Approvals.MCPWait
	if resp.Approval == nil || status != http.StatusAccepted || wait <= 0 || s.opts.Controls == nil {
		return status, resp
	}
	id, err := uuid.Parse(resp.ReceiptID)
	if err != nil {
		return status, resp
	}
	// The same allowance as GET ?wait=: with all of it held, answer the
	// pending approval now and let the client poll.
	if !s.waits.enter(principalID) {
		return status, resp
	}
	defer s.waits.leave(principalID)
	var cb func(time.Duration)
	if progress != nil {
		cb = func(e time.Duration) { progress(e, wait) }
	}
	if st, r, err := s.awaitFinal(ctx, id, wait, cb); err == nil {
		return st, r
	}
	return status, resp
}
