package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/propagation"

	"github.com/portcullis/portcullis/wire"
)

// The MCP endpoint speaks the Streamable HTTP transport of the Model Context
// Protocol: JSON-RPC 2.0 messages POSTed to one URL, each answered with one
// application/json body. It serves tools only; there are no server-initiated
// messages, so GET (the optional SSE stream) answers 405 as the spec allows.
// Tool calls run through governedCall, so an MCP call is authenticated,
// decided, enforced and recorded exactly like POST /v1/tool-calls.

// mcpVersions are the protocol revisions this endpoint implements, newest
// first. Batching (2025-03-26 only) is not supported: the newer revisions
// removed it and no known client sends batches.
var mcpVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}

const (
	headerMCPSession  = "Mcp-Session-Id"
	headerMCPProtocol = "Mcp-Protocol-Version"
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

// mcpTool is one entry of a tools/list result.
type mcpTool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  map[string]any  `json:"annotations,omitempty"`
}

// annotated is a tool with MCP behaviour hints (tools.Hints; an upstream
// tool passes on its server's).
type annotated interface {
	Annotations() map[string]any
}

// toolOutputSchema is every tool's outputSchema: structuredContent is the
// call's ToolOutput (mcpCallResult), whatever the tool.
var toolOutputSchema = json.RawMessage(`{"type":"object","required":["success","data","error","metadata"],` +
	`"properties":{"success":{"type":"boolean"},"data":{},` +
	`"error":{"anyOf":[{"type":"null"},{"type":"object","required":["code","message"],"properties":{"code":{"type":"string"},"message":{"type":"string"},"details":{"type":["object","null"]}}}]},` +
	`"metadata":{"type":["object","null"]}}}`)

type mcpContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// mcpCallResult is a tools/call result: the ToolOutput as JSON text (every
// client can read it), as structuredContent (revisions that define it), and
// the receipt in _meta so an agent can cite its evidence.
type mcpCallResult struct {
	Content           []mcpContent     `json:"content"`
	StructuredContent *wire.ToolOutput `json:"structuredContent,omitempty"`
	IsError           bool             `json:"isError"`
	Meta              map[string]any   `json:"_meta"`
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

// mcpGet answers 405: this server never sends server-initiated messages, so
// it offers no SSE stream (the spec's allowed answer).
func (s *Server) mcpGet(c echo.Context) error {
	c.Response().Header().Set(echo.HeaderAllow, "POST, DELETE")
	return c.NoContent(http.StatusMethodNotAllowed)
}

// mcpDelete ends the caller's session.
func (s *Server) mcpDelete(c echo.Context) error {
	p, _ := principalOf(c)
	id := c.Request().Header.Get(headerMCPSession)
	if id == "" {
		return rpcFail(c, nil, rpcInvalidRequest, wire.FieldError(wire.CodeInvalidInput, headerMCPSession, "Mcp-Session-Id header is required to end a session"))
	}
	if !s.mcp.close(id, p.ID) {
		return rpcFail(c, nil, rpcInvalidRequest, wire.Errorf(wire.CodeNotFound, "session not found; it has ended or expired"))
	}
	return c.NoContent(http.StatusNoContent)
}

// mcpPost handles one JSON-RPC message.
func (s *Server) mcpPost(c echo.Context) error {
	r := c.Request()
	if mt, _, err := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType)); err != nil || mt != echo.MIMEApplicationJSON {
		return negotiationFail(c, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
	}
	if !acceptsJSON(r.Header.Values(echo.HeaderAccept)) {
		return negotiationFail(c, http.StatusNotAcceptable, "Accept must admit application/json (this server answers every request with one JSON body)")
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
		return s.mcpInitialize(c, p, msg)
	}

	id := r.Header.Get(headerMCPSession)
	if id == "" {
		return rpcFail(c, validID(msg.ID), rpcInvalidRequest, wire.FieldError(wire.CodeInvalidInput, headerMCPSession, "Mcp-Session-Id header is required; call initialize first"))
	}
	annotateMCP(r.Context(), msg.Method, id, msg.ID)
	sess, ok := s.mcp.get(id, p.ID)
	if !ok {
		return rpcFail(c, validID(msg.ID), rpcInvalidRequest, wire.Errorf(wire.CodeNotFound, "session not found; it has ended or expired: initialize a new one"))
	}
	// A request without MCP-Protocol-Version is from a 2025-03-26 client
	// (the spec's default), which this server serves as negotiated.
	if v := r.Header.Get(headerMCPProtocol); v != "" && !slices.Contains(mcpVersions, v) {
		return rpcFail(c, validID(msg.ID), rpcInvalidRequest, wire.FieldError(wire.CodeInvalidInput, headerMCPProtocol,
			"unsupported MCP-Protocol-Version %q; supported: %s", truncate(v, 40), strings.Join(mcpVersions, ", ")))
	}
	if !isRequest {
		// notifications/initialized, notifications/cancelled ...: nothing
		// to answer; a governed call already under way is not abandoned.
		return c.NoContent(http.StatusAccepted)
	}

	var result any
	var rerr *rpcError
	var prog *mcpProgress
	switch msg.Method {
	case "ping":
		result = map[string]any{}
	case "tools/list":
		result, rerr = s.mcpToolsList(r.Context(), p, sess)
	case "tools/call":
		prog = progressFor(c, msg.Params)
		result, rerr = s.mcpToolsCall(r.Context(), p, sess, msg.Params, prog)
	default:
		rerr = rpcErrorOf(rpcMethodNotFound, wire.FieldError(wire.CodeInvalidInput, "method", "method %q not found; this server offers tools (tools/list, tools/call) and ping", truncate(msg.Method, 100)))
	}
	resp := rpcResponse{JSONRPC: "2.0", ID: msg.ID, Result: result, Error: rerr}
	if rerr != nil {
		resp.Result = nil
	}
	if prog != nil && prog.started {
		return prog.event(resp) // the stream's last event
	}
	return c.JSON(http.StatusOK, resp)
}

// mcpInitialize opens a session and negotiates the protocol revision: the
// client's when this server implements it, else the newest this server has
// (the client then decides whether it can proceed).
func (s *Server) mcpInitialize(c echo.Context, p wire.Principal, msg rpcMessage) error {
	var params struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if len(msg.Params) > 0 {
		if err := json.Unmarshal(msg.Params, &params); err != nil {
			return rpcAnswer(c, msg.ID, rpcInvalidParams, wire.FieldError(wire.CodeInvalidInput, "params", "initialize params must be an object with protocolVersion"))
		}
	}
	if params.ProtocolVersion == "" {
		return rpcAnswer(c, msg.ID, rpcInvalidParams, wire.FieldError(wire.CodeInvalidInput, "params.protocolVersion", "initialize params.protocolVersion is required"))
	}
	version := mcpVersions[0]
	if slices.Contains(mcpVersions, params.ProtocolVersion) {
		version = params.ProtocolVersion
	}
	sess, ok := s.mcp.open(p.ID, version)
	if !ok {
		return rpcFail(c, msg.ID, rpcInternalError, wire.Errorf(wire.CodeBackendUnavailable, "too many open MCP sessions on this gateway; retry later"))
	}
	c.Response().Header().Set(headerMCPSession, sess.id)
	return c.JSON(http.StatusOK, rpcResponse{JSONRPC: "2.0", ID: msg.ID, Result: map[string]any{
		"protocolVersion": version,
		"capabilities":    map[string]any{"tools": map[string]any{"listChanged": false}},
		"serverInfo":      map[string]any{"name": "portcullis", "title": "Portcullis governance gateway", "version": "1"},
		"instructions": "Every tool call is decided by policy and recorded as a receipt. " +
			"A refused call returns isError with output.error.code (permission_denied, fs_denied, invalid_input ...); " +
			"_meta[\"portcullis/receipt_id\"] names the receipt.",
	}})
}

// mcpToolsList is tools/list: exactly the tools GET /v1/tools shows this
// caller, their parameter schemas as inputSchema, their behaviour hints as
// annotations and, for revisions with structuredContent, the ToolOutput
// schema as outputSchema.
func (s *Server) mcpToolsList(ctx context.Context, p wire.Principal, sess *mcpSession) (any, *rpcError) {
	tools, err := s.visibleTools(ctx, p)
	if err != nil {
		return nil, rpcErrorOf(rpcInternalError, wire.Wrap(wire.CodeInternal, "mcp: tools/list", err, "policy evaluation failed"))
	}
	out := make([]mcpTool, 0, len(tools))
	for _, t := range tools {
		mt := mcpTool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: t.Function.Parameters}
		if tool, ok := s.lookupTool(t.Function.Name); ok {
			if a, ok := tool.(annotated); ok {
				mt.Annotations = a.Annotations()
			}
		}
		if structured(sess) {
			mt.OutputSchema = toolOutputSchema
		}
		out = append(out, mt)
	}
	return map[string]any{"tools": out}, nil
}

// structured is whether the session's revision has structuredContent
// (2025-06-18 on).
func structured(sess *mcpSession) bool { return sess.version != "2025-03-26" }

// mcpToolsCall is tools/call through the governed pipeline. The MCP session
// is the call's session_id unless the client names one in
// _meta["portcullis/session_id"]; _meta["portcullis/call_id"] sets call_id.
// A W3C traceparent in _meta continues the caller's trace as the HTTP
// header would.
func (s *Server) mcpToolsCall(ctx context.Context, p wire.Principal, sess *mcpSession, raw json.RawMessage, prog *mcpProgress) (any, *rpcError) {
	var params struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      map[string]any  `json:"_meta"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &params) != nil {
		return nil, rpcErrorOf(rpcInvalidParams, wire.FieldError(wire.CodeInvalidInput, "params", "tools/call params must be an object with name and arguments"))
	}
	if params.Name == "" {
		return nil, rpcErrorOf(rpcInvalidParams, wire.FieldError(wire.CodeInvalidInput, "params.name", "tools/call params.name is required"))
	}
	args := params.Arguments
	if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
		args = json.RawMessage("{}")
	}
	req := wire.ToolCallRequest{Tool: params.Name, Input: args, SessionID: sess.id}
	if v, ok := params.Meta["portcullis/session_id"].(string); ok && v != "" {
		req.SessionID = v
	}
	if v, ok := params.Meta["portcullis/call_id"].(string); ok {
		req.CallID = v
	}
	if tp, ok := params.Meta["traceparent"].(string); ok && tp != "" {
		carrier := propagation.MapCarrier{"traceparent": tp}
		if ts, ok := params.Meta["tracestate"].(string); ok {
			carrier["tracestate"] = ts
		}
		ctx = propagation.TraceContext{}.Extract(ctx, carrier)
	}
	in, err := s.typedCall(p, req, nil, 0)
	if err != nil {
		return nil, rpcErrorOf(rpcInvalidParams, wire.FieldError(wire.CodeInvalidInput, "params.arguments", "tools/call arguments are not JSON"))
	}
	status, resp := s.governedCall(ctx, in)
	var progress func(elapsed, total time.Duration)
	if prog != nil {
		progress = prog.notify
	}
	status, resp = s.AwaitApproval(ctx, status, resp, progress) // a parked call: wait up to approvals.mcp_wait (approvals.go)
	meta := map[string]any{"portcullis/status": status}
	if resp.ReceiptID != "" {
		meta["portcullis/receipt_id"] = resp.ReceiptID
	}
	if resp.Decision != nil {
		meta["portcullis/decision"] = resp.Decision
	}
	if we := resp.Output.Error; we != nil && mcpRPCCode(we.Code) != 0 {
		// The spec makes some refusals (an unknown tool) protocol errors,
		// not results for the model (codeTable); the refusal still has
		// its receipt.
		return nil, &rpcError{Code: mcpRPCCode(we.Code), Message: we.Message, Data: map[string]any{
			"code": we.Code, "receipt_id": resp.ReceiptID}}
	}
	text, err := json.Marshal(resp.Output)
	if err != nil {
		return nil, rpcErrorOf(rpcInternalError, wire.Wrap(wire.CodeInternal, "mcp: encode output", err, "could not encode the tool output"))
	}
	out := mcpCallResult{Content: []mcpContent{{Type: "text", Text: string(text)}}, IsError: !resp.Output.Success, Meta: meta}
	if structured(sess) {
		out.StructuredContent = &resp.Output
	}
	return out, nil
}

// mcpProgress is a tools/call answered as Server-Sent Events once there is
// progress to report: the client gave _meta.progressToken and accepts
// text/event-stream. The answer stays one JSON body until the first
// notification (a call that is not parked never streams); after it, each
// notifications/progress is an event and the response is the last one.
type mcpProgress struct {
	c       echo.Context
	token   json.RawMessage
	started bool
}

// progressFor is the progress stream of a tools/call request, or nil.
func progressFor(c echo.Context, params json.RawMessage) *mcpProgress {
	if !acceptsMedia(c.Request().Header.Values(echo.HeaderAccept), "text/event-stream") {
		return nil
	}
	var p struct {
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil || validID(p.Meta.ProgressToken) == nil {
		return nil // absent, or not a string or integer
	}
	return &mcpProgress{c: c, token: p.Meta.ProgressToken}
}

// notify sends notifications/progress: seconds waited of the most the
// call waits (approvals.mcp_wait).
func (p *mcpProgress) notify(elapsed, total time.Duration) {
	if !p.started {
		h := p.c.Response().Header()
		h.Set(echo.HeaderContentType, "text/event-stream")
		h.Set(echo.HeaderCacheControl, "no-cache")
		p.c.Response().WriteHeader(http.StatusOK)
		p.started = true
	}
	_ = p.event(map[string]any{"jsonrpc": "2.0", "method": "notifications/progress", "params": map[string]any{
		"progressToken": p.token, "progress": elapsed.Seconds(), "total": total.Seconds(),
		"message": "waiting for a person to approve the call"}})
}

// event writes one SSE message event and flushes it.
func (p *mcpProgress) event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(p.c.Response(), "event: message\ndata: %s\n\n", b); err != nil {
		return err
	}
	p.c.Response().Flush()
	return nil
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
// request (rpcAnswer, and the results of tools/list and tools/call) are
// HTTP 200, as JSON-RPC has them.

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

// rpcAnswer answers a request with a JSON-RPC error, HTTP 200.
func rpcAnswer(c echo.Context, id json.RawMessage, rpc int, we *wire.Error) error {
	return rpcReply(c, http.StatusOK, id, rpcErrorOf(rpc, we))
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

// mcpRoutes registers the MCP (Streamable HTTP) endpoint. Authentication is
// the global bearer-key middleware (/mcp is not public); the agent role is
// required as for the REST tool routes.
func (s *Server) mcpRoutes(e *echo.Echo) {
	s.mcp = newMCPSessions(s.opts.Now)
	guard := []echo.MiddlewareFunc{s.checkOrigin, s.require(wire.RoleAgent)}
	e.POST("/mcp", s.mcpPost, guard...)
	e.GET("/mcp", s.mcpGet, guard...)
	e.DELETE("/mcp", s.mcpDelete, guard...)
}
