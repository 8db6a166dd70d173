// Package gateway is the HTTP API and the call pipeline of Portcullis: it
// authenticates callers, runs each tool call through validation, policy,
// enforcement, write-ahead evidence and a backend, and maps every failure to
// the contract's status and code in one place.
package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	_ "embed"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/gateway/statedir"
	"github.com/portcullis/portcullis/gateway/ui"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

const tracerName = "github.com/portcullis/portcullis/gateway"

// Decider is what the pipeline needs of the policy engine.
type Decider interface {
	Decide(ctx context.Context, in wire.PolicyInput) (wire.Decision, error)
	Ready() bool
}

// EvidenceWriter makes evidence events durable; Append returns only after
// they are committed.
type EvidenceWriter interface {
	Append(ctx context.Context, events ...evidence.Event) error
}

// ReceiptReader answers the auditor's queries.
type ReceiptReader interface {
	Receipt(ctx context.Context, id uuid.UUID) (wire.Receipt, error)
	Receipts(ctx context.Context, f evidence.Filter) (wire.ReceiptList, error)
	Ping(ctx context.Context) error
}

// Key is a configured API key (stored only as its SHA-256) and its principal.
type Key struct {
	SHA256    [32]byte
	Principal wire.Principal
}

// Options wires a Server. Policy, Evidence, Receipts and Tools are required.
type Options struct {
	Keys         []Key
	Policy       Decider
	Evidence     EvidenceWriter
	Receipts     ReceiptReader
	Tools        []tools.Tool
	InstanceID   string
	MaxBodyBytes int64
	Logger       *slog.Logger
	Registry     *prometheus.Registry
	Now          func() time.Time
	// EvidenceTimeout bounds one call's wait for an evidence write
	// (default 15s); past it the call is refused evidence_unavailable.
	EvidenceTimeout time.Duration
	// OpenAPI is the served /openapi.json document.
	OpenAPI []byte
	// PolicyRevision names the live policy; receipts of calls refused
	// before the policy ran still record which policy was live.
	PolicyRevision func() string
	// PolicyAdmin serves GET /v1/policy and POST /v1/policy/reload; nil
	// answers them with 404 not_found (see routes_policy.go).
	PolicyAdmin PolicyAdmin
	// Explainer, when set, explains denials in POST /v1/decisions.
	Explainer Explainer
	// Auditor serves GET /v1/receipts/{id}/proof and GET /v1/evidence/stats;
	// nil (checkpoints off: no signing key) answers them with 503
	// evidence_unavailable (see routes_evidence.go).
	Auditor EvidenceAuditor
	// TrustedProxies are the peers whose X-Forwarded-For is believed when
	// naming a request's client in logs and spans; empty: the TCP peer,
	// always (see clientIP).
	TrustedProxies []*net.IPNet
	// Results keeps finished calls' outputs for read_tool_result; nil
	// keeps none.
	Results ResultKeeper
	// Late keeps the outcomes the store did not take and records them
	// later; serve gives one with a spool on disk (evidence.OpenLateOutcomes).
	// Nil: one in memory only, over Evidence and Receipts.
	Late *evidence.LateOutcomes
	// JWT, when set, verifies bearer tokens that are JWTs (auth.jwt);
	// nil: every bearer credential is an API key.
	JWT TokenVerifier
	// ClientCerts, when set, maps client certificates verified at the TLS
	// handshake to principals (mTLS); nil: certificates name no one.
	ClientCerts CertMapper
	// ClientCATrusted, when set, is asked on every request a client
	// certificate authenticates whether the verified chain's anchor is
	// still a configured client CA (identity.TLSFiles.TrustsClientCA): a
	// kept-alive connection outlives a reload that removed its CA. Nil:
	// the handshake's verification stands for the connection's life.
	ClientCATrusted func(anchor *x509.Certificate) bool
	// MCPAllowedOrigins lists the browser origins (scheme://host[:port])
	// that may call /mcp. Requests carrying any other Origin header are
	// refused, which defeats DNS rebinding; clients that send no Origin
	// (SDKs, CLIs, agents) are unaffected.
	MCPAllowedOrigins []string
	// StateDirs binds @state grants to per-session directories; nil drops
	// them (with a reason in the decision).
	StateDirs *statedir.Dirs
	// TracerProvider makes the server's spans; nil: the global one
	// (otel.GetTracerProvider, which serve sets up).
	TracerProvider trace.TracerProvider
	// ProtectedResource, when set (JWT auth configured), is served as the
	// MCP endpoint's OAuth 2.0 protected-resource metadata (RFC 9728);
	// nil answers its well-known URLs 404 (mcp_meta.go).
	ProtectedResource *ProtectedResource
	// Upstreams, when set, serves the governed MCP servers' tools beside
	// the built-ins (catalogue.go, upstreams.go).
	Upstreams Upstreams
	// Controls keeps quota counters and parked calls (contract sections 9
	// and 10), shared by replicas; nil refuses every call whose decision
	// carries quotas or an approval (fail closed).
	Controls evidence.ControlStore
	// Approvals configures how parked calls wait and notify.
	Approvals ApprovalOptions
}

// Server is the gateway's HTTP API.
type Server struct {
	e *echo.Echo
	// handler is e inside the server spans (serverSpans).
	handler http.Handler
	// routes holds the path template of every registered route (routeSpan).
	routes map[string]bool
	// toolCallRoutes answer every error as a ToolCallResponse
	// (toolCallRoute).
	toolCallRoutes map[string]bool
	opts           Options
	log            *slog.Logger
	tracer         trace.Tracer
	tools          map[string]tools.Tool // the built-ins
	cat            catalogueCache        // built-ins and upstream tools (catalogue.go)
	metrics        *metrics
	mcp            *mcpEndpoint
	late           *evidence.LateOutcomes
	// resultGrants caches who may read results back (results.go).
	resultGrants resultGrants
	// runs are the approved parked calls this process runs now
	// (approvals_recover.go).
	runs runClaims
	// waits are the open GET /v1/tool-calls/{id}?wait= reads, by
	// principal (approvals.go).
	waits waiters
}

// New builds the server and its routes.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.EvidenceTimeout <= 0 {
		opts.EvidenceTimeout = 15 * time.Second
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 8 << 20
	}
	if opts.PolicyRevision == nil {
		opts.PolicyRevision = func() string { return "" }
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.Policy != nil {
		opts.Policy = gatedDecider{opts.Policy}
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = otel.GetTracerProvider()
	}
	s := &Server{
		opts:    opts,
		log:     opts.Logger,
		tracer:  opts.TracerProvider.Tracer(tracerName),
		tools:   map[string]tools.Tool{},
		metrics: newMetrics(opts.Registry),
	}
	s.initAuth()
	s.late = opts.Late
	if s.late == nil {
		s.late = memoryLate(opts)
	}
	opts.Registry.MustRegister(newLateCollector(s.late))
	for _, t := range opts.Tools {
		s.tools[t.Name()] = t
	}
	s.catalogue()

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.errorHandler
	e.IPExtractor = clientIP(opts.TrustedProxies)
	e.Use(noSniff)
	e.Use(s.recoverer)
	e.Use(s.drainBody)
	e.Use(middleware.RequestIDWithConfig(middleware.RequestIDConfig{
		Generator: func() string { return uuid.NewString() },
	}))
	e.Use(s.routeSpan)
	e.Use(s.accessLog)
	e.Use(s.authenticate)

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/openapi.json", s.openapi)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{})))

	s.toolCallRoute(e, "/v1/tool-calls", s.toolCall)
	e.POST("/v1/decisions", s.dryRun, s.require(wire.RoleAgent, wire.RoleAdmin))
	e.GET("/v1/tools", s.listTools, s.require(wire.RoleAgent))
	e.GET("/v1/tools.d.ts", s.toolDeclarations, s.require(wire.RoleAgent))
	e.GET("/v1/receipts", s.listReceipts, s.require(wire.RoleAuditor))
	e.GET("/v1/receipts/export", s.exportReceipts, s.require(wire.RoleAuditor))
	e.GET("/v1/receipts/:id", s.getReceipt, s.require(wire.RoleAuditor))
	s.policyRoutes(e)
	s.evidenceRoutes(e)
	s.holdRoutes(e)
	s.mcpRoutes(e)
	s.protectedResourceRoutes(e)
	s.upstreamRoutes(e)
	s.approvalRoutes(e)
	// The evidence explorer's static page (gateway/ui, docs/explorer.md);
	// its data comes from the auditor routes above.
	explorer := echo.WrapHandler(ui.New())
	for _, r := range ui.Routes {
		e.GET(r, explorer)
	}
	s.headRoutes(e)
	s.routes = map[string]bool{}
	for _, r := range e.Routes() {
		s.routes[r.Path] = true
	}
	s.e = e
	s.handler = serverSpans(e, opts.TracerProvider)
	return s
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Routes lists method and path of every route (the OpenAPI test holds the
// document against it).
func (s *Server) Routes() [][2]string {
	var out [][2]string
	for _, r := range s.e.Routes() {
		if r.Method == http.MethodHead {
			continue // every GET route also answers HEAD (headRoutes)
		}
		out = append(out, [2]string{r.Method, r.Path})
	}
	return out
}

// principalOf returns the authenticated principal of a request.
func principalOf(c echo.Context) (wire.Principal, bool) {
	p, ok := c.Get("principal").(wire.Principal)
	return p, ok
}

func requestID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}

var publicPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true, "/openapi.json": true,
	protectedResourcePaths[0]: true, protectedResourcePaths[1]: true}

// authenticate resolves the bearer key to a principal. The key is hashed and
// compared in constant time against every configured hash, so neither the
// match nor its position leaks through timing.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if publicPaths[c.Request().URL.Path] || ui.IsRoute(c.Path()) {
			return next(c)
		}
		// API key, JWT or client certificate: see identify (auth.go).
		p, method, err := s.identify(c)
		if err != nil {
			return s.refuseAuth(c, method, err)
		}
		c.Set(ctxAuthMethod, method)
		c.Set("principal", p)
		return next(c)
	}
}

func (s *Server) lookup(header string) (wire.Principal, bool) {
	const prefix = "Bearer "
	if len(header) <= len(prefix) || !equalFoldASCII(header[:len(prefix)], prefix) {
		return wire.Principal{}, false
	}
	sum := sha256.Sum256([]byte(header[len(prefix):]))
	var found wire.Principal
	matched := 0
	for _, k := range s.opts.Keys {
		if subtle.ConstantTimeCompare(sum[:], k.SHA256[:]) == 1 {
			found = k.Principal
			matched = 1
		}
	}
	return found, matched == 1
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i]|0x20, b[i]|0x20
		if x != y {
			return false
		}
	}
	return true
}

// require admits principals holding any of roles.
func (s *Server) require(roles ...string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p, _ := principalOf(c)
			for _, r := range roles {
				if p.HasRole(r) {
					return next(c)
				}
			}
			return wire.Errorf(wire.CodeForbidden, "principal %q lacks the role this route needs (one of %v)", p.ID, roles)
		}
	}
}

// recoverer turns a panic into a 500 and a log line; the gateway keeps serving.
func (s *Server) recoverer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				s.log.ErrorContext(c.Request().Context(), "panic in handler", "panic", r, "path", c.Path())
				err = wire.Errorf(wire.CodeInternal, "internal error")
			}
		}()
		return next(c)
	}
}

func (s *Server) accessLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		s.observeRequest(c, time.Since(start))
		p, _ := principalOf(c)
		attrs := []slog.Attr{
			slog.String("method", c.Request().Method),
			slog.String("route", c.Path()),
			slog.Int("status", c.Response().Status),
			slog.Duration("duration", time.Since(start)),
			slog.String("principal", p.ID),
			slog.String("request_id", requestID(c)),
			// The client as clientIP decides (trusted_proxies), never a
			// header from an untrusted peer. Receipts carry no client
			// address; they carry trace_id, logged here to join the two.
			slog.String("remote", c.RealIP()),
		}
		if m, ok := c.Get(ctxAuthMethod).(string); ok {
			attrs = append(attrs, slog.String("auth", m))
		}
		if r, ok := c.Get(ctxAuthFailure).(string); ok {
			attrs = append(attrs, slog.String("auth_failure", r))
		}
		if peer, _, err := net.SplitHostPort(c.Request().RemoteAddr); err == nil && peer != c.RealIP() {
			attrs = append(attrs, slog.String("peer", peer))
		}
		s.log.LogAttrs(c.Request().Context(), slog.LevelInfo, "request", attrs...)
		return nil
	}
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{"policy": "ok", "evidence": "ok"}
	ready := true
	if !s.opts.Policy.Ready() {
		checks["policy"], ready = "no policy loaded", false
	}
	if err := s.opts.Receipts.Ping(ctx); err != nil {
		checks["evidence"], ready = "unreachable", false
	} else if h, ok := s.opts.Evidence.(interface{ Healthy() bool }); ok && !h.Healthy() {
		checks["evidence"], ready = "last commit failed", false
	}
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	body := map[string]any{"ready": ready, "checks": checks}
	if up := s.upstreamsReady(); up != nil {
		body["upstreams"] = up
	}
	return c.JSON(status, body)
}

// OpenAPIDocument is the served /openapi.json; gateway tests hold it against
// the routes and the wire types so the two cannot drift.
//
//go:embed openapi.json
var OpenAPIDocument []byte

func (s *Server) openapi(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, s.opts.OpenAPI)
}

// Run does the server's background work until ctx ends: it records late
// outcomes once the store commits again, and sweeps expired results.
// serve runs it beside the HTTP server; a Server whose Run is not called
// keeps late outcomes queued (bounded).
func (s *Server) Run(ctx context.Context) {
	if s.opts.Results != nil {
		go s.opts.Results.Run(ctx)
	}
	if s.opts.Controls != nil {
		go s.sweepApprovals(ctx)
	}
	go s.watchTools(ctx, time.Second)
	s.late.Run(ctx)
}

// FlushLate records the late outcomes that are queued and ready, and
// returns how many remain queued (serve calls it once more at shutdown).
func (s *Server) FlushLate(ctx context.Context) int { return s.late.Flush(ctx) }

// memoryLate is the memory-only evidence.LateOutcomes of a Server built
// without one (Options.Late): serve gives it a spooled one.
func memoryLate(opts Options) *evidence.LateOutcomes {
	var healthy func() bool
	if h, ok := opts.Evidence.(interface{ Healthy() bool }); ok {
		healthy = h.Healthy
	}
	lo := evidence.LateOptions{Writer: evidence.Unavailable{}, Receipts: evidence.Unavailable{}, Healthy: healthy,
		WriteTimeout: opts.EvidenceTimeout, Logger: opts.Logger, Now: opts.Now}
	if opts.Evidence != nil {
		lo.Writer = opts.Evidence
	}
	if opts.Receipts != nil {
		lo.Receipts = opts.Receipts
	}
	l, err := evidence.OpenLateOutcomes(lo)
	if err != nil {
		panic(err) // only a missing writer or reader, which Unavailable stands in for
	}
	return l
}
