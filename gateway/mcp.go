package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/gateway/identity"
	"github.com/portcullis/portcullis/wire"
)

// The MCP endpoint speaks the Streamable HTTP transport of the Model Context
// Protocol, served by the official Go SDK (github.com/modelcontextprotocol/
// go-sdk): its StreamableHTTPHandler frames JSON-RPC, keeps the sessions,
// negotiates the protocol revision, streams SSE and pushes
// notifications/tools/list_changed on the GET stream. This file is the
// gateway's edge in front of it: authentication and the Origin check
// (echo middleware), the body limit, and the refusals this endpoint has
// always answered as JSON-RPC errors with a contract status (batches,
// malformed messages, methods it does not serve, a session of another
// principal). The per-caller tool sets and the governed tools/call are in
// mcp_tools.go, the sessions in mcp_session.go.

// mcpVersions are the protocol revisions this endpoint implements, newest
// first; the SDK negotiates among them (the client's when listed, else
// the newest). Batching (2025-03-26 only) is not supported: the newer
// revisions removed it and no known client sends batches.
var mcpVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}

const (
	headerMCPSession  = "Mcp-Session-Id"
	headerMCPProtocol = "Mcp-Protocol-Version"
	// headerMCPRequest carries, from the edge to the SDK's handlers, the
	// token of the request's mcpRequest (mcp_tools.go). The edge always
	// overwrites it: a client cannot supply one.
	headerMCPRequest = "Portcullis-Mcp-Request"
)

// JSON-RPC 2.0 error codes.
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
	rpcInternalError  = -32603
)

// rpcMessage is any JSON-RPC 2.0 message a client may send.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// mcpRequests are the requests this endpoint serves; anything else is
// answered method-not-found by the edge, before the SDK (which knows
// resources, prompts, logging ... that this server does not offer).
var mcpRequests = []string{"initialize", "ping", "tools/list", "tools/call"}

// mcpNotifications are the client notifications handed to the SDK; others
// are accepted (202) and dropped, as the spec lets a receiver ignore them.
var mcpNotifications = []string{"notifications/initialized", "notifications/cancelled", "notifications/progress", "notifications/roots/list_changed"}

// mcpGet opens the session's standalone SSE stream, on which the SDK sends
// notifications/tools/list_changed.
func (s *Server) mcpGet(c echo.Context) error {
	r := c.Request()
	if !acceptsMedia(r.Header.Values(echo.HeaderAccept), "text/event-stream") {
		return negotiationFail(c, http.StatusNotAcceptable, "GET /mcp is the session's server-sent event stream: Accept must admit text/event-stream")
	}
	p, _ := principalOf(c)
	sess, we := s.mcpSessionOf(c, p)
	if we != nil {
		return rpcFail(c, nil, rpcInvalidRequest, we)
	}
	annotateMCP(r.Context(), "GET", sess.id, nil)
	// The stream ends when the gateway shuts down (StopMCPStreams), so it
	// does not hold the shutdown's wait for in-flight requests.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// It also ends when the credential that opened it expires (a JWT's
	// exp, a client certificate's notAfter): authentication is checked
	// once per request, and a stream is one request that never ends.
	if until, ok := credentialExpiry(c, p); ok {
		var cancelAt context.CancelFunc
		ctx, cancelAt = context.WithDeadline(ctx, until)
		defer cancelAt()
	}
	// A client CA removed from the trust while the stream is open ends it
	// too, as it refuses the connection's next request (recheckChain).
	if method, _ := c.Get(ctxAuthMethod).(string); method == identity.AuthMTLS && s.opts.ClientCATrusted != nil && r.TLS != nil {
		go s.endWhenUntrusted(ctx, cancel, r.TLS.VerifiedChains)
	}
	stop := context.AfterFunc(s.mcp.stopping, cancel)
	defer stop()
	c.SetRequest(r.WithContext(ctx))
	open := false
	defer func() {
		if open {
			s.mcp.listening(sess.id, -1)
		}
	}()
	return s.mcpServe(c, sess.server, nil, func() {
		open = true
		s.mcp.listening(sess.id, 1)
		// A change made while no stream was open (ToolsChanged skips
		// such servers) is notified now. The SDK holds the stream
		// while it commits, so the notification waits for it to be
		// registered and then goes out on it.
		go func() {
			if err := s.syncMCPTools(context.WithoutCancel(ctx), sess.server); err != nil {
				s.log.ErrorContext(ctx, "mcp: tools not synced when a stream opened", "err", err)
			}
		}()
	})
}

// endWhenUntrusted calls end once no verified chain ends at a client CA
// the gateway still trusts (checked every second), or when ctx ends.
func (s *Server) endWhenUntrusted(ctx context.Context, end context.CancelFunc, chains [][]*x509.Certificate) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if s.recheckChain(chains) != nil {
				end()
				return
			}
		}
	}
}

// credentialExpiry is when the credential the request authenticated with
// (its principal p) stops being valid: a JWT's exp claim, or the earliest
// notAfter of the verified client certificate chain. API keys do not
// expire (ok false).
func credentialExpiry(c echo.Context, p wire.Principal) (time.Time, bool) {
	r := c.Request()
	method, _ := c.Get(ctxAuthMethod).(string)
	switch method {
	case identity.AuthJWT:
		claims, _ := p.Attributes[identity.AttrClaims].(map[string]any)
		var secs float64
		switch v := claims["exp"].(type) {
		case float64:
			secs = v
		case json.Number:
			f, err := v.Float64()
			if err != nil {
				return time.Unix(0, 0), true // unreadable: treat as expired (fail closed)
			}
			secs = f
		default:
			return time.Unix(0, 0), true // the verifier requires exp; without one, fail closed
		}
		return time.Unix(int64(min(max(secs, 0), 1e11)), 0), true
	case identity.AuthMTLS:
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
			return time.Time{}, false
		}
		until := r.TLS.VerifiedChains[0][0].NotAfter
		for _, c := range r.TLS.VerifiedChains[0][1:] {
			if c.NotAfter.Before(until) {
				until = c.NotAfter
			}
		}
		return until, true
	}
	return time.Time{}, false
}

// mcpDelete ends the caller's session.
func (s *Server) mcpDelete(c echo.Context) error {
	p, _ := principalOf(c)
	sess, we := s.mcpSessionOf(c, p)
	if we != nil {
		return rpcFail(c, nil, rpcInvalidRequest, we)
	}
	if err := s.mcpServe(c, sess.server, nil, nil); err != nil {
		return err
	}
	s.mcp.forget(sess.id)
	return nil
}

// mcpSessionOf is the live session the request's Mcp-Session-Id names, if
// the caller opened it. A session of another principal is reported as
// absent, never as forbidden, so ids cannot be probed.
func (s *Server) mcpSessionOf(c echo.Context, p wire.Principal) (*mcpSession, *wire.Error) {
	id := c.Request().Header.Get(headerMCPSession)
	if id == "" {
		return nil, wire.FieldError(wire.CodeInvalidInput, headerMCPSession, "Mcp-Session-Id header is required; call initialize first")
	}
	sess, ok := s.mcp.session(id, principalKey(p))
	if !ok {
		return nil, wire.Errorf(wire.CodeNotFound, "session not found; it has ended or expired: initialize a new one")
	}
	return sess, nil
}

// mcpPost checks one JSON-RPC message and hands it to the SDK.
func (s *Server) mcpPost(c echo.Context) error {
	r := c.Request()
	if mt, _, err := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType)); err != nil || mt != echo.MIMEApplicationJSON {
		return negotiationFail(c, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
	}
	if !acceptsJSON(r.Header.Values(echo.HeaderAccept)) {
		return negotiationFail(c, http.StatusNotAcceptable, "Accept must admit application/json")
	}
	body, we := s.readBody(c)
	if we != nil {
		return rpcFail(c, nil, rpcInvalidRequest, we)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return rpcFail(c, nil, rpcInvalidRequest, wire.FieldError(wire.CodeInvalidInput, "body", "JSON-RPC batches are not supported; send one message per request"))
	}
	if !json.Valid(body) {
		return rpcFail(c, nil, rpcParseError, wire.FieldError(wire.CodeInvalidInput, "body", "parse error: the body is not one valid JSON value"))
	}
	var msg rpcMessage
	if err := json.Unmarshal(body, &msg); err != nil {
		return rpcFail(c, nil, rpcInvalidRequest, wire.FieldError(wire.CodeInvalidInput, "body", "not a JSON-RPC 2.0 message: send an object with jsonrpc, method and (for requests) id"))
	}
	if msg.JSONRPC != "2.0" {
		return rpcFail(c, validID(msg.ID), rpcInvalidRequest, wire.FieldError(wire.CodeInvalidInput, "jsonrpc", `jsonrpc must be "2.0"`))
	}
	isRequest := len(msg.ID) > 0 && string(msg.ID) != "null"
	if isRequest && validID(msg.ID) == nil {
		return rpcFail(c, nil, rpcInvalidRequest, wire.FieldError(wire.CodeInvalidInput, "id", "id must be a string or an integer"))
	}
	if msg.Method == "" {
		if len(msg.Result) > 0 || len(msg.Error) > 0 {
			// A response to a server request; this server sends none.
			return c.NoContent(http.StatusAccepted)
		}
		return rpcFail(c, validID(msg.ID), rpcInvalidRequest, wire.FieldError(wire.CodeInvalidInput, "method", "method is required"))
	}

	p, _ := principalOf(c)
	if msg.Method == "initialize" {
		if !isRequest {
			return rpcFail(c, nil, rpcInvalidRequest, wire.FieldError(wire.CodeInvalidInput, "id", "initialize must be a request with an id"))
		}
		annotateMCP(r.Context(), msg.Method, "", msg.ID)
		return s.mcpInitialize(c, p, msg, body)
	}

	sess, we := s.mcpSessionOf(c, p)
	if we != nil {
		return rpcFail(c, validID(msg.ID), rpcInvalidRequest, we)
	}
	annotateMCP(r.Context(), msg.Method, sess.id, msg.ID)
	// A request without MCP-Protocol-Version is from a 2025-03-26 client
	// (the spec's default), which this server serves as negotiated.
	if v := r.Header.Get(headerMCPProtocol); v != "" && !slices.Contains(mcpVersions, v) {
		return rpcFail(c, validID(msg.ID), rpcInvalidRequest, wire.FieldError(wire.CodeInvalidInput, headerMCPProtocol,
			"unsupported MCP-Protocol-Version %q; supported: %s", truncate(v, 40), strings.Join(mcpVersions, ", ")))
	}
	if !isRequest {
		if !slices.Contains(mcpNotifications, msg.Method) {
			return c.NoContent(http.StatusAccepted)
		}
		return s.mcpServe(c, sess.server, body, nil)
	}
	if !slices.Contains(mcpRequests, msg.Method) {
		return rpcReply(c, http.StatusOK, msg.ID, rpcErrorOf(rpcMethodNotFound, wire.FieldError(wire.CodeInvalidInput, "method",
			"method %q not found; this server offers tools (tools/list, tools/call) and ping", truncate(msg.Method, 100))))
	}
	return s.mcpServe(c, sess.server, body, nil)
}

// mcpInitialize hands an initialize to the SDK, which opens the session
// (the middleware in mcp_tools.go binds it to the caller) and negotiates
// the revision. The caller's MCP server is the one for its principal, its
// tools brought up to date first.
func (s *Server) mcpInitialize(c echo.Context, p wire.Principal, msg rpcMessage, body []byte) error {
	var params struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if len(msg.Params) > 0 {
		if err := json.Unmarshal(msg.Params, &params); err != nil {
			return rpcReply(c, http.StatusOK, msg.ID, rpcErrorOf(rpcInvalidParams, wire.FieldError(wire.CodeInvalidInput, "params", "initialize params must be an object with protocolVersion")))
		}
	}
	if params.ProtocolVersion == "" {
		return rpcReply(c, http.StatusOK, msg.ID, rpcErrorOf(rpcInvalidParams, wire.FieldError(wire.CodeInvalidInput, "params.protocolVersion", "initialize params.protocolVersion is required")))
	}
	ps, ok := s.mcp.admit(s, p)
	if !ok {
		return rpcFail(c, msg.ID, rpcInternalError, wire.Errorf(wire.CodeBackendUnavailable, "too many open MCP sessions on this gateway; retry later"))
	}
	defer s.mcp.admitted(ps)
	// An initialize opens a new session: an Mcp-Session-Id it carries
	// (perhaps another principal's) must not route it to that session.
	r := c.Request()
	r.Header = r.Header.Clone()
	r.Header.Del(headerMCPSession)
	if err := s.syncMCPTools(c.Request().Context(), ps); err != nil {
		return rpcReply(c, http.StatusOK, msg.ID, rpcErrorOf(rpcInternalError, wire.Wrap(wire.CodeInternal, "mcp: initialize", err, "policy evaluation failed")))
	}
	return s.mcpServe(c, ps, body, nil)
}

// mcpServe hands the request to the SDK's handler with the caller's MCP
// server. The body (already read and checked) is put back; Accept admits
// both answers the SDK may give, and mcpWriter turns an SSE answer that
// carries only the response into the one JSON body this endpoint has
// always answered (a client that cannot read SSE never gets one). A GET
// (the session's stream) passes stream, called once the stream is open.
func (s *Server) mcpServe(c echo.Context, ps *mcpServer, body []byte, stream func()) error {
	r := c.Request()
	sse := acceptsMedia(r.Header.Values(echo.HeaderAccept), "text/event-stream")
	ctx := withMCPServer(r.Context(), ps)
	r = r.WithContext(ctx)
	r.Header = r.Header.Clone()
	if body != nil {
		r.Body = http.NoBody
		if len(body) > 0 {
			r.Body = readCloser{bytes.NewReader(body)}
		}
		r.ContentLength = int64(len(body))
		r.Header.Set(echo.HeaderAccept, "application/json, text/event-stream")
	}
	token := rand.Text()
	r.Header.Set(headerMCPRequest, token)
	s.mcp.requests.Store(token, &mcpRequest{ctx: ctx, key: ps.key, sse: sse})
	defer s.mcp.requests.Delete(token)

	w := &mcpWriter{w: c.Response(), header: http.Header{}, sse: sse, stream: stream != nil, onStream: stream}
	s.mcp.handler.ServeHTTP(w, r)
	w.finish()
	return nil
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// mcpRoutes registers the MCP (Streamable HTTP) endpoint. Authentication is
// the global middleware (API key, JWT or client certificate; /mcp is not
// public); the agent role is required as for the REST tool routes.
func (s *Server) mcpRoutes(e *echo.Echo) {
	s.mcp = newMCPEndpoint(s.opts.Now)
	limit := s.opts.MaxBodyBytes
	if limit <= 0 {
		limit = -1 // the edge enforces no limit either
	}
	s.mcp.handler = mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		if ps := mcpServerOf(r.Context()); ps != nil {
			return ps.srv
		}
		return nil // answered 400 by the SDK; the edge always sets one
	}, &mcp.StreamableHTTPOptions{
		SessionTimeout:      mcpSessionIdle,
		MaxRequestBodyBytes: limit,
		// The Origin check (checkOrigin, with configured origins) and
		// authentication on every request guard this endpoint; the SDK's
		// loopback Host check would refuse a reverse proxy on the same
		// host, so it is off.
		DisableLocalhostProtection: true,
		Logger:                     sdkLogger(s.log),
	})
	guard := []echo.MiddlewareFunc{s.checkOrigin, s.require(wire.RoleAgent)}
	e.POST("/mcp", s.mcpPost, guard...)
	e.GET("/mcp", s.mcpGet, guard...)
	e.DELETE("/mcp", s.mcpDelete, guard...)
}

// checkOrigin refuses browser requests from origins not explicitly allowed.
// A page on an attacker's domain that rebinds its DNS name to the gateway's
// address sends its own Origin, which is not on the list; comparing Origin
// with Host would not catch that, since both name the attacker's domain.
func (s *Server) checkOrigin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		origin := c.Request().Header.Get("Origin")
		if origin == "" || s.originAllowed(origin) {
			return next(c)
		}
		return wire.FieldError(wire.CodeForbidden, "Origin",
			"origin %q may not call /mcp; allowed origins are configured on the gateway", truncate(origin, 200))
	}
}

func (s *Server) originAllowed(origin string) bool {
	norm, ok := normalizeOrigin(origin)
	if !ok {
		return false
	}
	for _, a := range s.opts.MCPAllowedOrigins {
		if n, ok := normalizeOrigin(a); ok && n == norm {
			return true
		}
	}
	return false
}

// normalizeOrigin lowercases scheme and host and drops default ports; "null"
// and anything that is not scheme://host[:port] is not an origin we accept.
func normalizeOrigin(o string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(o))
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return u.Scheme + "://" + host, true
}

// acceptsJSON reports whether an Accept header admits application/json. A
// missing header admits anything.
func acceptsJSON(values []string) bool {
	return len(values) == 0 || acceptsMedia(values, "application/json")
}

// acceptsMedia reports whether Accept header values name the media type
// want (or its type's wildcard, or */*).
func acceptsMedia(values []string, want string) bool {
	major, _, _ := strings.Cut(want, "/")
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			if mt == want || mt == major+"/*" || mt == "*/*" {
				return true
			}
		}
	}
	return false
}

// validID returns id when it is a JSON-RPC id this server echoes (a string
// or an integer), else nil (answered as null).
func validID(id json.RawMessage) json.RawMessage {
	var v any
	if len(id) == 0 || json.Unmarshal(id, &v) != nil {
		return nil
	}
	switch n := v.(type) {
	case string:
		return id
	case float64:
		if n == float64(int64(n)) && !bytes.ContainsAny(id, ".eE") {
			return id
		}
	}
	return nil
}

// MCP errors are contract errors too: each reply below is built from a
// *wire.Error, whose code gives the HTTP status (codeTable) of a request
// the transport refused; the JSON-RPC code says which layer refused it
// (parse, request, method, params, internal). Errors inside an answered
// request (the results of tools/list and tools/call, and methods this
// server does not offer) are HTTP 200, as JSON-RPC has them.

// rpcErrorOf is the JSON-RPC error with code rpc for the contract error we:
// its message, never its cause.
func rpcErrorOf(rpc int, we *wire.Error) *rpcError {
	return &rpcError{Code: rpc, Message: we.Message}
}

// rpcFail answers a request the transport refused: the HTTP status of
// we's code, and a JSON-RPC error.
func rpcFail(c echo.Context, id json.RawMessage, rpc int, we *wire.Error) error {
	return rpcReply(c, statusOf(we.Code), id, rpcErrorOf(rpc, we))
}

// negotiationFail answers a request refused by HTTP content negotiation
// (415, 406): statuses HTTP defines for exactly this, which no contract
// code has, answered before there is a JSON-RPC message to speak of.
func negotiationFail(c echo.Context, status int, msg string) error {
	return rpcReply(c, status, nil, &rpcError{Code: rpcInvalidRequest, Message: msg})
}

func rpcReply(c echo.Context, status int, id json.RawMessage, e *rpcError) error {
	if id == nil {
		id = json.RawMessage("null")
	}
	return c.JSON(status, rpcResponse{JSONRPC: "2.0", ID: id, Error: e})
}
