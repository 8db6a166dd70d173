package gateway

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/wire"
)

// PolicyAdmin is the policy lifecycle: the live bundle and a forced reload.
type PolicyAdmin interface {
	Status() wire.PolicyStatus
	// Reload fetches and, if it passes every check, activates the bundle;
	// a refused bundle is a PolicyReload with status refused, not an error.
	Reload(ctx context.Context) wire.PolicyReload
}

// Explainer says which rules produced a decision's denial reasons. Only dry
// runs call it: tracing is too slow for the call path.
type Explainer interface {
	Explain(ctx context.Context, in wire.PolicyInput) (wire.Decision, []wire.ReasonSource, error)
}

// policyRoutes registers the policy lifecycle API (live bundle, reload).
func (s *Server) policyRoutes(e *echo.Echo) {
	e.GET("/v1/policy", s.getPolicy, s.require(wire.RoleAdmin, wire.RoleAuditor))
	e.POST("/v1/policy/reload", s.reloadPolicy, s.require(wire.RoleAdmin))
}

// getPolicy is GET /v1/policy: the live bundle.
func (s *Server) getPolicy(c echo.Context) error {
	if s.opts.PolicyAdmin == nil {
		return wire.Errorf(wire.CodeNotFound, "policy lifecycle is not configured on this server")
	}
	st := s.opts.PolicyAdmin.Status()
	if st.Files == nil {
		st.Files = []string{}
	}
	return c.JSON(http.StatusOK, st)
}

// reloadPolicy is POST /v1/policy/reload: fetch now and answer what
// happened. A refused bundle answers 422 with the reason; the previous
// policy stays live.
func (s *Server) reloadPolicy(c echo.Context) error {
	if s.opts.PolicyAdmin == nil {
		return wire.Errorf(wire.CodeNotFound, "policy lifecycle is not configured on this server")
	}
	p, _ := principalOf(c)
	res := s.opts.PolicyAdmin.Reload(c.Request().Context())
	s.log.InfoContext(c.Request().Context(), "policy reload requested", "principal", p.ID, "status", res.Status, "revision", res.Revision, "reason", res.Reason)
	if res.Status != "refused" {
		s.ToolsChanged(c.Request().Context()) // the new policy may show each caller other tools
	}
	status := http.StatusOK
	if res.Status == "refused" {
		status = http.StatusUnprocessableEntity
	}
	return c.JSON(status, res)
}

// explain asks the Explainer for the rules behind a dry run's denial; a
// failure only leaves the explanation out.
func (s *Server) explain(ctx context.Context, p wire.Principal, tool string, args, resolved map[string]any, req wire.ToolCallRequest) []wire.ReasonSource {
	if s.opts.Explainer == nil {
		return nil
	}
	_, ex, err := s.opts.Explainer.Explain(ctx, wire.PolicyInput{
		Principal: p, Tool: tool, Purpose: wire.PurposeDryRun, Args: nonNilMap(args), Resolved: nonNilMap(resolved),
		SessionID: req.SessionID, CallID: req.CallID, Time: s.opts.Now().UTC(),
	})
	if err != nil {
		s.log.WarnContext(ctx, "explaining a dry-run denial failed", "err", err)
		return nil
	}
	return ex
}
