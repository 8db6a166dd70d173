package gateway

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/tools/coderun/tsdecl"
	"github.com/portcullis/portcullis/wire"
)

// dryRun is POST /v1/decisions: the admit steps a call takes (validate,
// decide, enforce: admit, the same code and spans), then stop, without
// evidence and without running anything. The context is marked a dry run
// (tools.WithDryRun): with no receipt written, the tools must not do
// anything observable from outside either (http.get resolves no name), or
// the dry run would be an unrecorded channel out.
func (s *Server) dryRun(c echo.Context) error {
	ctx := tools.WithDryRun(c.Request().Context())
	in := s.readCall(c)
	if in.refused != nil {
		return in.refused
	}
	tool, we := s.findTool(in.req.Tool)
	if we != nil {
		return we
	}
	a, stop := s.admit(ctx, in.principal, tool, in.req, wire.PurposeDryRun)
	if stop != nil && (stop.step == "validate" || stop.step == "decide") {
		return stop.err // no decision to show: bad input, or no policy answer
	}
	resp := wire.DryRunResponse{Decision: a.decision}
	if a.decision.Reasons == nil {
		resp.Decision.Reasons = []string{}
	}
	if stop != nil {
		if stop.step == "deny" {
			resp.Explanation = s.explain(ctx, in.principal, tool.Name(), a.call.Args(), a.call.Resolved(), in.req)
		}
		resp.Error = stop.err
		return c.JSON(http.StatusOK, resp)
	}
	if r, ok := a.call.(tools.Releaser); ok {
		r.Release() // a dry run never runs
	}
	resp.Scope = &a.scope
	return c.JSON(http.StatusOK, resp)
}

// listTools is GET /v1/tools: the tools the policy lets this caller call,
// asked with purpose "list" and empty args, by their model-safe names
// (toolnames.go). Denied tools never appear.
func (s *Server) listTools(c echo.Context) error {
	p, _ := principalOf(c)
	specs, err := s.visibleSpecs(c.Request().Context(), p)
	if err != nil {
		if we, ok := err.(*wire.Error); ok { // no policy active yet (edge.go)
			return we
		}
		return wire.Errorf(wire.CodeInternal, "policy evaluation failed")
	}
	return c.JSON(http.StatusOK, s.modelSafeList(specs))
}

// visibleTools is the one definition of which tools a principal sees, by
// their own names: MCP tools/list (GET /v1/tools renames them model-safe).
func (s *Server) visibleTools(ctx context.Context, p wire.Principal) ([]wire.FunctionTool, error) {
	specs, err := s.visibleSpecs(ctx, p)
	if err != nil {
		return nil, err
	}
	out := make([]wire.FunctionTool, 0, len(specs))
	for _, spec := range specs {
		out = append(out, wire.FunctionTool{Type: "function", Function: spec})
	}
	return out, nil
}

// visibleSpecs is visibleTools by tool name: each tool the policy allows
// p with purpose "list" and empty args.
func (s *Server) visibleSpecs(ctx context.Context, p wire.Principal) ([]wire.FunctionSpec, error) {
	out := []wire.FunctionSpec{}
	c := s.catalogue()
	for _, name := range c.list {
		t := c.tools[name]
		if h, ok := t.(hider); ok && h.Quarantined() {
			continue // an upstream tool whose definition changed: not listed until approved
		}
		var facts map[string]any
		if lf, ok := t.(listFacter); ok {
			facts = lf.ListFacts()
		}
		dec, err := s.decide(ctx, p, name, wire.PurposeList, nil, facts, wire.ToolCallRequest{})
		if err != nil {
			s.log.ErrorContext(ctx, "policy evaluation failed while listing tools", "err", err, "tool", name)
			return nil, err
		}
		if !dec.Allow {
			continue
		}
		out = append(out, wire.FunctionSpec{Name: t.Name(), Description: t.Description(), Parameters: t.Parameters()})
	}
	return out, nil
}

// toolDeclarations is GET /v1/tools.d.ts: the TypeScript declarations of
// code.run's `tools` object for this caller (tools.call and one typed stub
// per tool it may call now), the same list code.run installs at run time.
func (s *Server) toolDeclarations(c echo.Context) error {
	p, _ := principalOf(c)
	specs, err := s.visibleSpecs(c.Request().Context(), p)
	if err != nil {
		return wire.Errorf(wire.CodeInternal, "policy evaluation failed")
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, "application/typescript; charset=utf-8", []byte(tsdecl.Declarations(specs)))
}

// getReceipt is GET /v1/receipts/{id}.
func (s *Server) getReceipt(c echo.Context) error {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return wire.FieldError(wire.CodeInvalidInput, "id", "receipt id must be a UUID")
	}
	r, err := s.opts.Receipts.Receipt(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

// listReceipts is GET /v1/receipts with the contract's filters.
func (s *Server) listReceipts(c echo.Context) error {
	f, err := parseFilter(c, 1000)
	if err != nil {
		return err
	}
	f.Tool = s.canonicalToolName(f.Tool)
	list, err := s.opts.Receipts.Receipts(c.Request().Context(), f)
	if err != nil {
		return err
	}
	if list.Receipts == nil {
		list.Receipts = []wire.Receipt{}
	}
	return c.JSON(http.StatusOK, list)
}

var filterParams = map[string]bool{"principal": true, "tool": true, "decision": true, "session_id": true,
	"outcome": true, "error_code": true, "rule": true, "q": true, "since": true, "until": true, "limit": true, "cursor": true}

// parseFilter reads the receipt filters; limit may be 1..maxLimit (a page
// for the list, the whole stream for the export); extra names further
// accepted parameters.
func parseFilter(c echo.Context, maxLimit int, extra ...string) (evidence.Filter, error) {
	q := c.QueryParams()
	for k := range q {
		if !filterParams[k] && !slices.Contains(extra, k) {
			return evidence.Filter{}, wire.FieldError(wire.CodeInvalidInput, k, "unknown query parameter %q; accepted: principal, tool, decision, session_id, outcome, error_code, rule, q, since, until, limit, cursor", k)
		}
	}
	f := evidence.Filter{
		Principal: q.Get("principal"), Tool: q.Get("tool"), Decision: q.Get("decision"),
		SessionID: q.Get("session_id"), Cursor: q.Get("cursor"),
		Status: q.Get("outcome"), ErrorCode: q.Get("error_code"), Rule: q.Get("rule"), Text: q.Get("q"),
	}
	if _, err := (evidence.Filter{Text: f.Text}).Normalize(); err != nil {
		return f, wire.FieldError(wire.CodeInvalidInput, "q", "q must be a text search of at most %d bytes of UTF-8 without control characters", evidence.MaxTextLen)
	}
	if f.Rule != "" && !wire.ValidRuleID(f.Rule) {
		return f, wire.FieldError(wire.CodeInvalidInput, "rule", "rule must be a rule id: 1 to %d characters of A-Z a-z 0-9 _ . : / -", wire.MaxRuleIDLen)
	}
	switch f.Decision {
	case "", wire.DecisionAllow, wire.DecisionDeny, wire.DecisionInvalid:
	default:
		return f, wire.FieldError(wire.CodeInvalidInput, "decision", "decision must be allow, deny or invalid")
	}
	switch f.Status {
	case "", wire.StatusPending, wire.StatusSucceeded, wire.StatusFailed, wire.StatusTimedOut, wire.StatusError, wire.StatusInterrupted:
	default:
		return f, wire.FieldError(wire.CodeInvalidInput, "outcome", "outcome must be pending, succeeded, failed, timed_out, error or interrupted")
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(t.name); v != "" {
			ts, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, wire.FieldError(wire.CodeInvalidInput, t.name, "%s must be an RFC 3339 time, e.g. 2026-11-22T10:00:00Z", t.name)
			}
			*t.dst = ts
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			return f, wire.FieldError(wire.CodeInvalidInput, "limit", "limit must be an integer from 1 to %d", maxLimit)
		}
		f.Limit = n
	}
	return f, nil
}
