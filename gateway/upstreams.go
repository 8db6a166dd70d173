package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/upstream"
	"github.com/portcullis/portcullis/wire"
)

// Upstreams is what the gateway needs of the governed MCP servers
// (upstream.Manager): their tools, their health, and approving a
// quarantined tool's definition.
type Upstreams interface {
	ToolSource
	Status() []upstream.Status
	Ready() map[string]string
	Approve(ctx context.Context, upstream, tool, digest, by string) error
}

var _ Upstreams = (*upstream.Manager)(nil)

// launchPrincipal is who launches stdio upstreams: the gateway itself, as
// role "upstream", so that operators grant launches like any tool
// (config.roles.upstream.tools.<upstream>: fs, network, env, limits).
func launchPrincipal(name string) wire.Principal {
	return wire.Principal{ID: "upstream:" + name, Roles: []string{"upstream"}, Attributes: map[string]any{}}
}

// AuthorizeLaunch asks the policy for a stdio upstream's launch scope
// (purpose "launch", tool "<upstream>") and records the receipt before
// the server starts (upstream.Authorizer). The grants are held to real
// paths, the limits recorded with how the sandbox bounds memory
// (memoryLimit); a denial is recorded and refused.
func (s *Server) AuthorizeLaunch(ctx context.Context, name string, resolved map[string]any, memoryLimit string) (upstream.Launch, error) {
	p := launchPrincipal(name)
	rec := s.gatewayRecord(p, name, map[string]any{})
	dec, err := s.decide(ctx, p, name, wire.PurposeLaunch, nil, resolved, wire.ToolCallRequest{})
	rec.decision = dec
	if err != nil || !dec.Allow {
		why := "the policy did not allow the launch"
		if err != nil {
			why = "policy evaluation failed"
		}
		_, resp := s.refuse(ctx, rec, wire.DecisionDeny, wire.Errorf(wire.CodePermissionDenied, "launch of upstream %q refused: %s", name, why))
		s.log.WarnContext(ctx, "upstream launch refused", "upstream", name, "reasons", dec.Reasons, "receipt_id", resp.ReceiptID)
		return upstream.Launch{}, errors.Join(upstream.ErrLaunchRefused, errors.New(why))
	}
	scope := launchScope(dec)
	scope.MemoryLimit = memoryLimit
	rec.scope = &scope
	if err := s.recordSettled(ctx, rec, scope.Backend); err != nil {
		s.metrics.evidenceFailures.Inc()
		return upstream.Launch{}, errors.New("the launch receipt could not be recorded; not launching")
	}
	return upstream.Launch{Scope: scope, Env: dec.Env.Set, ReceiptID: rec.idText}, nil
}

// launchScope is a launch decision's enforced scope: the grants at their
// real paths (a grant that does not resolve is dropped, never bound), the
// posture, the decision's env names and limits.
func launchScope(d wire.Decision) wire.Scope {
	sc := wire.Scope{FSGrants: []wire.FSGrant{}, EnvNames: []string{}, Network: d.Network, Limits: d.Limits,
		FSDeny: d.FSDeny, Backend: "bwrap"}
	if sc.Network.Posture == "" {
		sc.Network.Posture = wire.PostureOff
	}
	if sc.Network.Allow == nil {
		sc.Network.Allow = []string{}
	}
	for _, g := range d.FSGrants {
		if !filepath.IsAbs(g.Path) {
			continue
		}
		real, err := filepath.EvalSymlinks(g.Path)
		if err != nil {
			continue
		}
		g.Path = real
		sc.FSGrants = append(sc.FSGrants, g)
	}
	for k := range d.Env.Set {
		sc.EnvNames = append(sc.EnvNames, k)
	}
	return sc
}

// upstreamRoutes serves GET /v1/upstreams and the approval of a
// quarantined tool's definition (admin).
func (s *Server) upstreamRoutes(e *echo.Echo) {
	e.GET("/v1/upstreams", s.listUpstreams, s.require(wire.RoleAdmin))
	e.POST("/v1/upstreams/:name/tools/:tool/approve", s.approveUpstreamTool, s.require(wire.RoleAdmin))
}

func (s *Server) listUpstreams(c echo.Context) error {
	list := []upstream.Status{}
	if s.opts.Upstreams != nil {
		list = s.opts.Upstreams.Status()
	}
	return c.JSON(http.StatusOK, map[string]any{"upstreams": list})
}

type approveRequest struct {
	DefinitionSHA256 string `json:"definition_sha256"`
}

func (s *Server) approveUpstreamTool(c echo.Context) error {
	if s.opts.Upstreams == nil {
		return wire.Errorf(wire.CodeNotFound, "no upstreams are configured")
	}
	var req approveRequest
	if err := s.readHoldBody(c, &req); err != nil {
		return err
	}
	if len(req.DefinitionSHA256) != 64 {
		return wire.FieldError(wire.CodeInvalidInput, "definition_sha256", "definition_sha256 must be the 64-hex digest GET /v1/upstreams shows as served_sha256")
	}
	p, _ := principalOf(c)
	if err := s.opts.Upstreams.Approve(c.Request().Context(), c.Param("name"), c.Param("tool"), req.DefinitionSHA256, p.ID); err != nil {
		return err
	}
	s.ToolsChanged(c.Request().Context()) // the approved tool is listed again
	return c.JSON(http.StatusOK, map[string]any{"approved": true, "definition_sha256": req.DefinitionSHA256})
}

// upstreamsReady is /readyz's detail: each upstream's state. An upstream
// that is down does not make the gateway unready (its calls answer
// backend_unavailable); it shows here.
func (s *Server) upstreamsReady() map[string]string {
	if s.opts.Upstreams == nil {
		return nil
	}
	return s.opts.Upstreams.Ready()
}

// PinStore keeps upstream tools' pinned definition digests as receipts in
// the evidence store (tool "pin:<upstream>.<tool>", rule id
// "upstream.pin"): durable, chained, shared by replicas, and visible to
// auditors like any other evidence.
type PinStore struct{ S *Server }

var _ upstream.PinStore = PinStore{}

func pinTool(up, tool string) string { return "pin:" + up + "." + tool }

// Pinned is the latest pinned digest of an upstream's tool.
func (p PinStore) Pinned(ctx context.Context, up, tool string) (string, bool, error) {
	list, err := p.S.opts.Receipts.Receipts(ctx, evidence.Filter{Tool: pinTool(up, tool), Rule: "upstream.pin", Limit: 1})
	if err != nil {
		return "", false, err
	}
	if len(list.Receipts) == 0 {
		return "", false, nil
	}
	var args struct {
		Digest string `json:"definition_sha256"`
	}
	if err := json.Unmarshal(list.Receipts[0].Args, &args); err != nil || args.Digest == "" {
		return "", false, errors.New("pin receipt without a digest")
	}
	return args.Digest, true, nil
}

// Pin records digest as the approved definition of an upstream's tool.
func (p PinStore) Pin(ctx context.Context, up, tool, digest, by string) error {
	s := p.S
	rec := s.gatewayRecord(wire.Principal{ID: by}, pinTool(up, tool),
		map[string]any{"upstream": up, "tool": tool, "definition_sha256": digest})
	rec.decision = wire.Decision{Allow: true, Reasons: []string{"definition pinned by " + by}, RuleIDs: []string{"upstream.pin"},
		PolicyRevision: s.opts.PolicyRevision()}
	return s.recordSettled(ctx, rec, "none")
}

// gatewayRecord starts the receipt of something the gateway itself does
// (a launch, a pin), with args as its input.
func (s *Server) gatewayRecord(p wire.Principal, tool string, args map[string]any) *record {
	raw, _ := json.Marshal(args)
	rec := &record{id: uuid.Must(uuid.NewV7()), at: s.opts.Now().UTC(), principal: p,
		req: wire.ToolCallRequest{Tool: tool, Input: raw}, args: args}
	rec.idText = rec.id.String()
	return rec
}

// recordSettled makes a receipt decided and done at once durable: its
// allow decision and a succeeded outcome, in one write.
func (s *Server) recordSettled(ctx context.Context, rec *record, backend string) error {
	outcome := evidence.Event{ID: uuid.Must(uuid.NewV7()), ReceiptID: rec.id, Kind: evidence.KindOutcome, Time: s.opts.Now().UTC(),
		InstanceID: s.opts.InstanceID, Outcome: &wire.Outcome{Status: wire.StatusSucceeded, Backend: backend}}
	return s.appendEvents(ctx, s.decisionEvent(rec, wire.DecisionAllow, ""), outcome)
}
