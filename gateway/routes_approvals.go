package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// approvalRoutes serves contract sections 9 and 10: parked calls for
// approvers, the long poll for the calling agent, quota usage.
func (s *Server) approvalRoutes(e *echo.Echo) {
	deciders := s.require(wire.RoleApprover, wire.RoleAdmin)
	e.GET("/v1/approvals", s.listApprovals, deciders)
	e.GET("/v1/approvals/:id", s.getApproval, deciders)
	e.POST("/v1/approvals/:id", s.decideApproval, deciders)
	e.GET("/v1/tool-calls/:receipt_id", s.getToolCall, s.require(wire.RoleAgent))
	e.GET("/v1/quotas", s.quotaUsage, s.require(wire.RoleAdmin, wire.RoleAuditor))
}

func (s *Server) controls() (evidence.ControlStore, error) {
	if s.opts.Controls == nil {
		return nil, wire.Errorf(wire.CodeEvidenceUnavailable, "this gateway keeps no parked calls")
	}
	return s.opts.Controls, nil
}

// listApprovals is GET /v1/approvals?status=pending|approved|rejected|expired|stopped&limit=.
func (s *Server) listApprovals(c echo.Context) error {
	cs, err := s.controls()
	if err != nil {
		return err
	}
	status, limit := c.QueryParam("status"), 100
	for k := range c.QueryParams() {
		if k != "status" && k != "limit" {
			return wire.FieldError(wire.CodeInvalidInput, k, "unknown query parameter %q; accepted: status, limit", k)
		}
	}
	switch status {
	case "", wire.ApprovalPending, wire.ApprovalApproved, wire.ApprovalRejected, wire.ApprovalExpired, wire.ApprovalStopped:
	default:
		return wire.FieldError(wire.CodeInvalidInput, "status", "status must be pending, approved, rejected, expired or stopped")
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return wire.FieldError(wire.CodeInvalidInput, "limit", "limit must be an integer from 1 to 1000")
		}
		limit = n
	}
	list, err := cs.ParkedCalls(c.Request().Context(), status, limit)
	if err != nil {
		return err
	}
	out := wire.ApprovalList{Approvals: make([]wire.Approval, 0, len(list))}
	for _, pc := range list {
		out.Approvals = append(out.Approvals, approvalView(pc))
	}
	return c.JSON(http.StatusOK, out)
}

// approvalView is a parked call as approvers see it: the receipt's
// redacted args, never the exact input.
func approvalView(pc evidence.ParkedCall) wire.Approval {
	a := wire.Approval{ID: pc.ID.String(), ReceiptID: pc.ReceiptID.String(), Status: pc.Status, PrincipalID: pc.Principal.ID,
		Tool: pc.Tool, ArgsSHA256: pc.ArgsSHA256, CallID: pc.CallID, SessionID: pc.SessionID, PolicyRevision: pc.PolicyRevision,
		Reason: pc.Reason, Approvers: pc.Approvers, CreatedAt: pc.CreatedAt, ExpiresAt: pc.ExpiresAt,
		DecidedBy: pc.DecidedBy, DecisionReason: pc.DecisionReason}
	if a.Approvers == nil {
		a.Approvers = []string{}
	}
	if len(pc.Args) > 0 {
		_ = json.Unmarshal(pc.Args, &a.Args)
	}
	if !pc.DecidedAt.IsZero() {
		t := pc.DecidedAt
		a.DecidedAt = &t
	}
	return a
}

func (s *Server) parkedOf(c echo.Context) (evidence.ParkedCall, error) {
	cs, err := s.controls()
	if err != nil {
		return evidence.ParkedCall{}, err
	}
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return evidence.ParkedCall{}, wire.FieldError(wire.CodeInvalidInput, "id", "approval id must be a UUID")
	}
	return cs.ParkedCall(c.Request().Context(), id)
}

// getApproval is GET /v1/approvals/{id}.
func (s *Server) getApproval(c echo.Context) error {
	pc, err := s.parkedOf(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, approvalView(pc))
}

// decideApproval is POST /v1/approvals/{id} {"decision", "reason"}.
func (s *Server) decideApproval(c echo.Context) error {
	p, _ := principalOf(c)
	body, we := s.readBody(c)
	if we != nil {
		return we
	}
	var d wire.ApprovalDecision
	if err := decodeStrict(body, &d); err != nil {
		return jsonError(err)
	}
	if d.Decision != "approve" && d.Decision != "reject" {
		return wire.FieldError(wire.CodeInvalidInput, "decision", `decision must be "approve" or "reject"`)
	}
	if len(d.Reason) > wire.MaxApprovalReason || !printable(d.Reason) {
		return wire.FieldError(wire.CodeInvalidInput, "reason", "reason must be printable and at most %d bytes", wire.MaxApprovalReason)
	}
	pc, err := s.parkedOf(c)
	if err != nil {
		return err
	}
	if we := mayDecide(p, pc); we != nil {
		return we
	}
	ctx := c.Request().Context()
	if pc.Status == wire.ApprovalPending && !s.opts.Now().Before(pc.ExpiresAt) {
		s.expire(ctx, pc)
		return wire.Errorf(wire.CodeApprovalExpired, "the call's approval expired at %s; it did not run", pc.ExpiresAt.Format(time.RFC3339))
	}
	var status int
	var resp wire.ToolCallResponse
	if d.Decision == "reject" {
		out, err := s.settle(ctx, pc, wire.ApprovalPending, wire.ApprovalRejected, evidence.ApprovalActionRejected, p.ID, d.Reason,
			wire.Errorf(wire.CodeApprovalRejected, "an approver rejected the call; it did not run"))
		if err != nil {
			return err
		}
		pc = out
		status, resp, _ = s.finalAnswer(ctx, pc)
	} else {
		status, resp, err = s.approve(ctx, p, pc, d.Reason)
		if err != nil {
			return err
		}
		if again, err := s.opts.Controls.ParkedCall(ctx, pc.ID); err == nil {
			pc = again
		}
	}
	return c.JSON(http.StatusOK, wire.ApprovalResult{Approval: approvalView(pc), Result: resp, Status: status})
}

// getToolCall is GET /v1/tool-calls/{receipt_id}?wait=30s: a parked
// call's final answer once it has one, else (when the wait ends) the
// pending one. Only the principal that made the call may read it.
func (s *Server) getToolCall(c echo.Context) error {
	cs, err := s.controls()
	if err != nil {
		return err
	}
	id, err := uuid.Parse(c.Param("receipt_id"))
	if err != nil {
		return wire.FieldError(wire.CodeInvalidInput, "receipt_id", "receipt id must be a UUID")
	}
	var wait time.Duration
	for k := range c.QueryParams() {
		if k != "wait" && k != "pretty" {
			return wire.FieldError(wire.CodeInvalidInput, k, "unknown query parameter %q; accepted: wait", k)
		}
	}
	if v := c.QueryParam("wait"); v != "" {
		wait, err = time.ParseDuration(v)
		if err != nil || wait < 0 || wait > maxWait {
			return wire.FieldError(wire.CodeInvalidInput, "wait", "wait must be a duration from 0s to %s, e.g. 30s", maxWait)
		}
	}
	p, _ := principalOf(c)
	pc, err := cs.ParkedCallByReceipt(c.Request().Context(), id)
	if errors.Is(err, evidence.ErrApprovalNotFound) || (err == nil && pc.Principal.ID != p.ID) {
		// Another principal's call is as unknown as a missing one.
		return wire.Errorf(wire.CodeNotFound, "no parked call of yours has that receipt id")
	}
	if err != nil {
		return err
	}
	if wait > 0 {
		if !s.waits.enter(p.ID) {
			c.Response().Header().Set("Retry-After", "5")
			return &wire.Error{Code: wire.CodeRateLimited,
				Message: fmt.Sprintf("this principal already holds %d waiting reads of tool calls open; wait for one to end, or poll without wait", maxWaitsPerPrincipal),
				Details: map[string]any{"reason": "concurrent_waits", "limit": maxWaitsPerPrincipal}}
		}
		defer s.waits.leave(p.ID)
	}
	status, resp, err := s.awaitFinal(c.Request().Context(), id, wait, nil)
	if err != nil {
		return err
	}
	return writeAnswer(c, status, resp)
}

// notifyApproval posts a new pending approval to approvals.webhook_url:
// best effort, off the call's path, with the approvers' view (redacted
// args), never the exact input.
func (s *Server) notifyApproval(ctx context.Context, pc evidence.ParkedCall) {
	u := s.opts.Approvals.WebhookURL
	if u == "" {
		return
	}
	client := s.opts.Approvals.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	body, err := json.Marshal(map[string]any{"event": "approval.pending", "approval": approvalView(pc)})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may carry a token: never logged
		}
		s.log.WarnContext(ctx, "approval webhook failed", "err", err, "approval_id", pc.ID)
		return
	}
	_ = resp.Body.Close()
	if resp.StatusCode >= 300 {
		s.log.WarnContext(ctx, "approval webhook refused", "status", resp.StatusCode, "approval_id", pc.ID)
	}
}
