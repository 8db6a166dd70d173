package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/portcullis/portcullis/wire"
)

// Each principal has its own SDK server whose tools are exactly the tools
// that principal may see (visibleTools: policy purpose "list", model-safe
// names, quarantined upstream tools left out), with their behaviour hints
// as annotations and the ToolOutput schema as outputSchema. The SDK lists
// them for tools/list, and when a sync adds, changes or removes one it
// sends notifications/tools/list_changed to that server's sessions, which
// never names a tool. Syncs run before each tools/list and initialize, when
// a session's GET stream opens, and for the servers with an open stream
// when the catalogue or the policy changes (ToolsChanged, and Run's watch
// of their versions).
//
// tools/call never uses the SDK's tool lookup: every call, listed or not,
// goes through governedCall (a refused call has its receipt, as on REST).

// annotated is a tool with MCP behaviour hints (tools.Hints; an upstream
// tool passes on its server's).
type annotated interface {
	Annotations() map[string]any
}

// toolOutputSchema is every tool's outputSchema: structuredContent is the
// call's ToolOutput, whatever the tool.
var toolOutputSchema = json.RawMessage(`{"type":"object","required":["success","data","error","metadata"],` +
	`"properties":{"success":{"type":"boolean"},"data":{},` +
	`"error":{"anyOf":[{"type":"null"},{"type":"object","required":["code","message"],"properties":{"code":{"type":"string"},"message":{"type":"string"},"details":{"type":["object","null"]}}}]},` +
	`"metadata":{"type":["object","null"]}}}`)

const mcpInstructions = "Every tool call is decided by policy and recorded as a receipt. " +
	"A refused call returns isError with output.error.code (permission_denied, fs_denied, invalid_input ...); " +
	"_meta[\"portcullis/receipt_id\"] names the receipt."

// newMCPServer is the SDK server of principal p (key = principalKey(p)).
func (s *Server) newMCPServer(key string, p wire.Principal) *mcpServer {
	ps := &mcpServer{key: key, p: p, listed: map[string]string{}}
	ps.srv = mcp.NewServer(&mcp.Implementation{Name: "portcullis", Title: "Portcullis governance gateway", Version: "1"},
		&mcp.ServerOptions{
			Instructions:              mcpInstructions,
			Capabilities:              &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
			SupportedProtocolVersions: mcpVersions,
			Logger:                    sdkLogger(s.log),
		})
	ps.srv.AddReceivingMiddleware(s.mcpMiddleware(ps))
	return ps
}

// sdkLogger is the SDK's logger: warnings and errors only (it logs each
// session's connection at info).
func sdkLogger(l *slog.Logger) *slog.Logger {
	return slog.New(minLevel{l.Handler(), slog.LevelWarn})
}

type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}
func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}
func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}

// mcpMiddleware serves what the gateway decides itself on ps's sessions.
func (s *Server) mcpMiddleware(ps *mcpServer) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "initialize":
				res, err := next(ctx, method, req)
				if ir, ok := res.(*mcp.InitializeResult); ok && err == nil {
					if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
						s.mcp.register(ps, ss, ir.ProtocolVersion)
					}
				}
				return res, err
			case "tools/list":
				hreq := s.mcp.requestOf(req, ps)
				if err := s.syncMCPTools(hreq.ctx, ps); err != nil {
					return nil, rpcErr(rpcInternalError, wire.Wrap(wire.CodeInternal, "mcp: tools/list", err, "policy evaluation failed"))
				}
				res, err := next(ctx, method, req)
				lr, ok := res.(*mcp.ListToolsResult)
				if !ok || err != nil {
					return res, err
				}
				out := *lr
				out.Tools = make([]*mcp.Tool, 0, len(lr.Tools))
				for _, t := range lr.Tools {
					if !structured(s.mcp.version(req.GetSession().ID())) {
						c := *t // the registered tool is shared: copy
						c.OutputSchema = nil
						t = &c
					}
					out.Tools = append(out.Tools, t)
				}
				return mcpToolList{&out}, nil
			case "tools/call":
				call, ok := req.(*mcp.CallToolRequest)
				if !ok {
					return nil, rpcErr(rpcInvalidParams, wire.FieldError(wire.CodeInvalidInput, "params", "tools/call params must be an object with name and arguments"))
				}
				return s.mcpToolsCall(ctx, ps, call)
			case "ping", "notifications/initialized", "notifications/cancelled", "notifications/progress", "notifications/roots/list_changed":
				return next(ctx, method, req)
			}
			return nil, rpcErr(rpcMethodNotFound, wire.FieldError(wire.CodeInvalidInput, "method",
				"method %q not found; this server offers tools (tools/list, tools/call) and ping", truncate(method, 100)))
		}
	}
}

// mcpToolList is a tools/list result as the revisions this endpoint
// negotiates define it: the SDK's without the cache hints of a later
// draft revision (ttlMs, cacheScope), whose default scope "public" would
// be wrong for a list that depends on the caller.
type mcpToolList struct{ *mcp.ListToolsResult }

func (l mcpToolList) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Meta       mcp.Meta    `json:"_meta,omitempty"`
		NextCursor string      `json:"nextCursor,omitempty"`
		Tools      []*mcp.Tool `json:"tools"`
	}{l.Meta, l.NextCursor, l.Tools})
}

// requestOf is the HTTP request an SDK request arrived in (mcpServe). The
// token is checked against the server's principal; without one (not
// expected) the request gets a background context and no SSE.
func (m *mcpEndpoint) requestOf(req mcp.Request, ps *mcpServer) *mcpRequest {
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		if v, ok := m.requests.Load(extra.Header.Get(headerMCPRequest)); ok {
			if r := v.(*mcpRequest); r.key == ps.key {
				return r
			}
		}
	}
	return &mcpRequest{ctx: context.Background(), key: ps.key}
}

// structured is whether a revision has structuredContent (2025-06-18 on).
func structured(version string) bool { return version != "2025-03-26" }

// rpcErr is a JSON-RPC error the SDK answers as is.
func rpcErr(code int, we *wire.Error) error {
	return &jsonrpc.Error{Code: int64(code), Message: we.Message}
}

// syncMCPTools makes ps's tools the ones ps's principal may see now. The
// SDK notifies ps's sessions when that changed anything.
func (s *Server) syncMCPTools(ctx context.Context, ps *mcpServer) error {
	ps.syncMu.Lock()
	defer ps.syncMu.Unlock()
	visible, err := s.visibleTools(ctx, ps.p)
	if err != nil {
		return err
	}
	want := make(map[string]*mcp.Tool, len(visible))
	listing := make(map[string]string, len(visible))
	for _, ft := range visible {
		t, err := s.mcpTool(ft.Function)
		if err != nil {
			s.log.ErrorContext(ctx, "mcp: tool left out of tools/list", "tool", ft.Function.Name, "err", err)
			continue
		}
		b, err := json.Marshal(t)
		if err != nil {
			continue
		}
		want[t.Name] = t
		listing[t.Name] = string(b)
	}
	var gone []string
	for name := range ps.listed {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		ps.srv.RemoveTools(gone...)
	}
	handler := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		// Not reached: the middleware serves every tools/call.
		return nil, rpcErr(rpcInternalError, wire.Errorf(wire.CodeInternal, "tools/call is served by the gateway's middleware"))
	}
	for name, t := range want {
		if ps.listed[name] != listing[name] {
			ps.srv.AddTool(t, handler)
		}
	}
	ps.listed = listing
	return nil
}

// mcpTool is the tools/list entry of a visible tool: its parameter schema
// as inputSchema (MCP requires a JSON object schema; the SDK refuses
// others), its hints as annotations, the ToolOutput schema as
// outputSchema.
func (s *Server) mcpTool(f wire.FunctionSpec) (*mcp.Tool, error) {
	var schema struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(f.Parameters, &schema); err != nil || schema.Type != "object" {
		return nil, fmt.Errorf("inputSchema is not a JSON object schema")
	}
	t := &mcp.Tool{Name: f.Name, Description: f.Description, InputSchema: f.Parameters, OutputSchema: toolOutputSchema}
	if tool, ok := s.lookupTool(f.Name); ok {
		if a, ok := tool.(annotated); ok && len(a.Annotations()) > 0 {
			b, err := json.Marshal(a.Annotations())
			if err != nil {
				return nil, fmt.Errorf("annotations: %w", err)
			}
			var ann mcp.ToolAnnotations
			if err := json.Unmarshal(b, &ann); err != nil {
				return nil, fmt.Errorf("annotations: %w", err)
			}
			t.Annotations = &ann
		}
	}
	return t, nil
}

// mcpToolsCall is tools/call through the governed pipeline. The MCP session
// is the call's session_id unless the client names one in
// _meta["portcullis/session_id"]; _meta["portcullis/call_id"] sets call_id.
// A W3C traceparent in _meta continues the caller's trace as the HTTP
// header would. A parked call waits up to approvals.mcp_wait, sending
// notifications/progress when the client gave a progress token and reads
// SSE.
func (s *Server) mcpToolsCall(ctx context.Context, ps *mcpServer, req *mcp.CallToolRequest) (mcp.Result, error) {
	hreq := s.mcp.requestOf(req, ps)
	params := req.Params
	if params == nil {
		return nil, rpcErr(rpcInvalidParams, wire.FieldError(wire.CodeInvalidInput, "params", "tools/call params must be an object with name and arguments"))
	}
	if params.Name == "" {
		return nil, rpcErr(rpcInvalidParams, wire.FieldError(wire.CodeInvalidInput, "params.name", "tools/call params.name is required"))
	}
	// The call runs in the HTTP request's context: its trace, and
	// cancelled when the client goes away. notifications/cancelled (which
	// cancels ctx) does not abandon a governed call under way, as before.
	callCtx := hreq.ctx

	args := params.Arguments
	if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
		args = json.RawMessage("{}")
	}
	sid := req.Session.ID()
	in := wire.ToolCallRequest{Tool: params.Name, Input: args, SessionID: sid}
	meta := params.Meta
	if v, ok := meta["portcullis/session_id"].(string); ok && v != "" {
		in.SessionID = v
	}
	if v, ok := meta["portcullis/call_id"].(string); ok {
		in.CallID = v
	}
	if tp, ok := meta["traceparent"].(string); ok && tp != "" {
		carrier := propagation.MapCarrier{"traceparent": tp}
		if ts, ok := meta["tracestate"].(string); ok {
			carrier["tracestate"] = ts
		}
		callCtx = propagation.TraceContext{}.Extract(callCtx, carrier)
	}
	typed, err := s.typedCall(ps.p, in, nil, 0)
	if err != nil {
		return nil, rpcErr(rpcInvalidParams, wire.FieldError(wire.CodeInvalidInput, "params.arguments", "tools/call arguments are not JSON"))
	}
	status, resp := s.governedCall(callCtx, typed)
	var progress func(elapsed, total time.Duration)
	if token := progressToken(params.GetProgressToken()); token != nil && hreq.sse {
		progress = func(elapsed, total time.Duration) {
			// ctx carries the request id: the SDK sends the notification
			// on this request's stream.
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
				Progress: elapsed.Seconds(), Total: total.Seconds(), Message: "waiting for a person to approve the call"})
		}
	}
	status, resp = s.AwaitApproval(callCtx, ps.p.ID, status, resp, progress) // a parked call: wait up to approvals.mcp_wait (approvals.go)
	out := map[string]any{"portcullis/status": status}
	if resp.ReceiptID != "" {
		out["portcullis/receipt_id"] = resp.ReceiptID
	}
	if resp.Decision != nil {
		out["portcullis/decision"] = resp.Decision
	}
	if we := resp.Output.Error; we != nil && mcpRPCCode(we.Code) != 0 {
		// The spec makes some refusals (an unknown tool) protocol errors,
		// not results for the model (codeTable); the refusal still has
		// its receipt.
		data, _ := json.Marshal(map[string]any{"code": we.Code, "receipt_id": resp.ReceiptID})
		return nil, &jsonrpc.Error{Code: int64(mcpRPCCode(we.Code)), Message: we.Message, Data: data}
	}
	text, err := json.Marshal(resp.Output)
	if err != nil {
		return nil, rpcErr(rpcInternalError, wire.Wrap(wire.CodeInternal, "mcp: encode output", err, "could not encode the tool output"))
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}, IsError: !resp.Output.Success, Meta: out}
	if structured(s.mcp.version(sid)) {
		res.StructuredContent = resp.Output
	}
	return mcpCallAnswer{res}, nil
}

// mcpCallAnswer is a tools/call result that always says isError, false
// too (the SDK leaves false out; clients may read its absence as unknown).
type mcpCallAnswer struct{ *mcp.CallToolResult }

func (r mcpCallAnswer) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Meta              mcp.Meta      `json:"_meta,omitempty"`
		Content           []mcp.Content `json:"content"`
		StructuredContent any           `json:"structuredContent,omitempty"`
		IsError           bool          `json:"isError"`
	}{r.Meta, r.Content, r.StructuredContent, r.IsError})
}

// progressToken is a progress token this server answers with: a string or
// an integer, else nil.
func progressToken(v any) any {
	switch t := v.(type) {
	case string:
		return t
	case float64:
		if t == float64(int64(t)) {
			return int64(t)
		}
	case int, int64, int32:
		return t
	}
	return nil
}

// mcpGeneration is what the tool sets depend on besides the principal:
// the upstreams' tools and the live policy.
type mcpGeneration struct {
	upstreams uint64
	policy    string
}

func (s *Server) mcpGeneration() mcpGeneration {
	var g mcpGeneration
	if s.opts.Upstreams != nil {
		g.upstreams = s.opts.Upstreams.Version()
	}
	g.policy = s.opts.PolicyRevision()
	return g
}

// ToolsChanged brings the MCP sessions' tools up to date now; the SDK
// sends notifications/tools/list_changed to the sessions whose list
// changed. Call it after the catalogue or the policy changed (a bundle
// reload, an upstream's list_changed, a quarantined tool's approval); Run
// also notices those by their versions.
//
// Only servers with an open GET stream are synced: a notification sent
// with no stream open would be lost. The others are synced when a stream
// opens (mcpGet), which sends the notification then, or at their next
// tools/list, whose answer is the new list.
func (s *Server) ToolsChanged(ctx context.Context) {
	for _, ps := range s.mcp.listeningServers() {
		if err := s.syncMCPTools(ctx, ps); err != nil {
			s.log.ErrorContext(ctx, "mcp: tools not synced after a change", "err", err)
		}
	}
}

// watchTools syncs the MCP sessions' tools whenever the upstreams' tools or
// the live policy revision changes (checked every interval) until ctx ends.
func (s *Server) watchTools(ctx context.Context, interval time.Duration) {
	last := s.mcpGeneration()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if g := s.mcpGeneration(); g != last {
			last = g
			s.ToolsChanged(ctx)
		}
	}
}
