package gateway

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// Quotas (contract section 10): an admitted call draws its decision's
// quotas from the counters in the evidence store before it runs. When the
// evidence writer can (evidence.Writer over either store), the draw rides
// in the commit that records the call's decision: one transaction locks
// the counters, settles the batch's draws in order, and appends each
// admitted call's allow decision or each refused call's rate_limited
// receipt. A call that would pass a limit is refused with a receipt and
// draws nothing; a failed commit draws nothing and records nothing.
// Otherwise (a writer without it) the draw is its own transaction before
// the decision is recorded, and a call whose decision could not be
// recorded gives its draws back.

// quotaWriter is an evidence writer that draws quotas in the commit of
// the events it appends (evidence.Writer.AppendDrawing).
type quotaWriter interface {
	DrawsQuotas() bool
	AppendDrawing(ctx context.Context, qs []wire.Quota, now time.Time, refusal func(*evidence.QuotaExceeded) []evidence.Event, events ...evidence.Event) (*evidence.QuotaExceeded, error)
}

// recordAdmitted draws an admitted call's quotas and records its allow
// decision. ok false: the call must not run (refused rate_limited, or its
// receipt is not durable), and status and resp answer it.
func (s *Server) recordAdmitted(ctx context.Context, rec *record, tool tools.Tool, a admission) (int, wire.ToolCallResponse, bool) {
	qw, drawing := s.opts.Evidence.(quotaWriter)
	if len(a.decision.Quotas) == 0 || s.opts.Controls == nil || !drawing || !qw.DrawsQuotas() {
		draws, refused := s.drawQuotas(ctx, rec, a)
		if refused != nil {
			status, resp := s.refuse(ctx, rec, wire.DecisionDeny, refused)
			return status, resp, false
		}
		status, resp, ok := s.recordDecision(ctx, rec, tool, a.call)
		if !ok {
			s.refundQuotas(ctx, draws)
		}
		return status, resp, ok
	}
	// The refusal's receipt is built on the writer's goroutine from a copy
	// of rec as it is now (rec itself is only changed after the commit).
	snapshot := *rec
	refusal := func(ex *evidence.QuotaExceeded) []evidence.Event {
		r := snapshot
		return s.refusalEvents(&r, wire.DecisionDeny, markRateLimited(&r, rateLimited(ex)))
	}
	var ex *evidence.QuotaExceeded
	_, err := step(ctx, s, "record_decision", func(ctx context.Context) (struct{}, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.EvidenceTimeout)
		defer cancel()
		var err error
		ex, err = qw.AppendDrawing(ctx, a.decision.Quotas, s.opts.Now(), refusal, s.decisionEvent(rec, wire.DecisionAllow, ""))
		return struct{}{}, err
	})
	if err != nil {
		status, resp, _ := s.decisionNotRecorded(ctx, rec, tool, a.call, err)
		return status, resp, false
	}
	if ex == nil {
		return 0, wire.ToolCallResponse{}, true
	}
	if r, ok := a.call.(tools.Releaser); ok {
		r.Release()
	}
	we := markRateLimited(rec, rateLimited(ex))
	_ = s.refusalEvents(rec, wire.DecisionDeny, we) // completes rec as its receipt says
	status, resp := s.refused(ctx, rec, wire.DecisionDeny, we)
	return status, resp, false
}

// markRateLimited makes rec the record of a call refused by we: given
// nothing, with the refusing rule and reason added to the policy's.
func markRateLimited(rec *record, we *wire.Error) *wire.Error {
	rec.scope = nil // refused: the call was given nothing
	rec.decision.RuleIDs = withRuleID(rec.decision.RuleIDs, "gateway."+string(we.Code))
	rec.decision.Reasons = append(append([]string(nil), rec.decision.Reasons...), we.Message)
	return we
}

// drawQuotas draws a's quotas in a transaction of their own; refused is
// the rate_limited (or store) error that stops the call. The call's tool
// resources are released when it is refused.
func (s *Server) drawQuotas(ctx context.Context, rec *record, a admission) ([]evidence.QuotaDraw, *wire.Error) {
	qs := a.decision.Quotas
	if len(qs) == 0 {
		return nil, nil
	}
	var we *wire.Error
	var draws []evidence.QuotaDraw
	_, _ = step(ctx, s, "quotas", func(ctx context.Context) (struct{}, error) {
		draws, we = s.consume(ctx, qs)
		if we != nil {
			return struct{}{}, we
		}
		return struct{}{}, nil
	})
	if we == nil {
		return draws, nil
	}
	if r, ok := a.call.(tools.Releaser); ok {
		r.Release()
	}
	return nil, markRateLimited(rec, we)
}

// consume draws qs, or says why not: rate_limited naming the quota, or
// evidence_unavailable when the counters cannot be reached (fail closed).
func (s *Server) consume(ctx context.Context, qs []wire.Quota) ([]evidence.QuotaDraw, *wire.Error) {
	if s.opts.Controls == nil {
		return nil, wire.Errorf(wire.CodeEvidenceUnavailable, "the policy sets quotas but this gateway keeps no quota counters; the call was not run")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.EvidenceTimeout)
	defer cancel()
	draws, ex, err := s.opts.Controls.ConsumeQuotas(ctx, qs, s.opts.Now())
	if err != nil {
		return nil, wire.Wrap(wire.CodeEvidenceUnavailable, "quotas", err, "the quota counters are unavailable, so the call was not run; retry later")
	}
	if ex != nil {
		return nil, rateLimited(ex)
	}
	return draws, nil
}

// rateLimited is the rate_limited error of a refused draw.
func rateLimited(ex *evidence.QuotaExceeded) *wire.Error {
	secs := int64(ex.RetryAfter / time.Second)
	return &wire.Error{Code: wire.CodeRateLimited,
		Message: fmt.Sprintf("quota %q allows %d per %ds and this call would pass it; retry after %ds", ex.Quota.Key, ex.Quota.Limit, ex.Quota.WindowS, secs),
		Details: map[string]any{"quota": ex.Quota.Key, "limit": ex.Quota.Limit, "window_s": ex.Quota.WindowS, "retry_after_s": secs}}
}

// refundQuotas gives back the draws of a call that did not run.
func (s *Server) refundQuotas(ctx context.Context, draws []evidence.QuotaDraw) {
	if len(draws) == 0 || s.opts.Controls == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.EvidenceTimeout)
	defer cancel()
	if err := s.opts.Controls.RefundQuotas(ctx, draws); err != nil {
		s.log.ErrorContext(ctx, "quota refund failed; the counters keep a call that did not run", "err", err)
	}
}

// setRetryAfter sets Retry-After on a rate_limited answer.
func setRetryAfter(c echo.Context, resp wire.ToolCallResponse) {
	we := resp.Output.Error
	if we == nil || we.Code != wire.CodeRateLimited {
		return
	}
	if secs, ok := we.Details["retry_after_s"].(int64); ok {
		c.Response().Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
}

// quotaUsage is GET /v1/quotas?key=: the windows counted under one key.
func (s *Server) quotaUsage(c echo.Context) error {
	key := c.QueryParam("key")
	for k := range c.QueryParams() {
		if k != "key" {
			return wire.FieldError(wire.CodeInvalidInput, k, "unknown query parameter %q; accepted: key", k)
		}
	}
	if key == "" || len(key) > wire.MaxQuotaKeyLen {
		return wire.FieldError(wire.CodeInvalidInput, "key", "key is required: a quota key as the policy names it, e.g. agent-alpha/Exec")
	}
	if s.opts.Controls == nil {
		return wire.Errorf(wire.CodeEvidenceUnavailable, "this gateway keeps no quota counters")
	}
	usage, err := s.opts.Controls.QuotaUsage(c.Request().Context(), key, 100)
	if err != nil {
		return err
	}
	if usage == nil {
		usage = []wire.QuotaUsage{}
	}
	return c.JSON(200, wire.QuotaList{Quotas: usage})
}
