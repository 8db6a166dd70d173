package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

var errTrailing = errors.New("trailing data after the JSON object")

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// record gathers what a receipt says about one call as the pipeline learns it.
type record struct {
	parent    *uuid.UUID // the receipt of the call that made this one (code.run)
	depth     int        // nesting depth: 0 for a call from an agent
	id        uuid.UUID
	at        time.Time
	principal wire.Principal
	req       wire.ToolCallRequest
	rawInput  []byte
	args      map[string]any
	decision  wire.Decision
	scope     *wire.Scope
	traceID   string
}

// maxDepth bounds nested calls (code that calls tools that run code ...).
const maxDepth = 4

// toolCall is POST /v1/tool-calls: the whole governed pipeline.
func (s *Server) toolCall(c echo.Context) error {
	p, _ := principalOf(c)
	body, we := s.readBody(c)
	status, resp := s.governedCall(c.Request().Context(), p, body, we, nil, 0)
	return writeAnswer(c, status, resp)
}

// governedCall runs one call through the pipeline: validate, decide,
// enforce, record the decision durably, run, record the outcome. It answers
// the HTTP status and the ToolCallResponse; a nested call (parent set) is
// recorded with its parent's receipt id.
func (s *Server) governedCall(ctx context.Context, p wire.Principal, body []byte, we *wire.Error, parent *uuid.UUID, depth int) (int, wire.ToolCallResponse) {
	rec := &record{id: uuid.Must(uuid.NewV7()), at: s.opts.Now().UTC(), principal: p, parent: parent, depth: depth}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		rec.traceID = sc.TraceID().String()
	}
	if we == nil {
		we = parseToolCall(body, &rec.req)
	}
	rec.rawInput = rec.req.Input
	if we == nil && depth > maxDepth {
		we = wire.Errorf(wire.CodeInvalidInput, "nested tool calls deeper than %d are refused", maxDepth)
	}
	if we != nil {
		rec.args = bestEffortArgs(rec.req.Input)
		return s.refuse(ctx, rec, wire.DecisionInvalid, we)
	}
	if !p.HasRole(wire.RoleAgent) {
		rec.args = bestEffortArgs(rec.req.Input)
		return s.refuse(ctx, rec, wire.DecisionDeny, wire.Errorf(wire.CodeForbidden, "principal %q does not hold the agent role needed to call tools", p.ID))
	}
	tool, ok := s.tools[rec.req.Tool]
	if !ok {
		rec.args = bestEffortArgs(rec.req.Input)
		return s.refuse(ctx, rec, wire.DecisionInvalid, &wire.Error{Code: wire.CodeUnknownTool,
			Message: fmt.Sprintf("unknown tool %q; known tools: %s", rec.req.Tool, strings.Join(s.toolList, ", ")),
			Details: map[string]any{"field": "tool"}})
	}

	receiptID := rec.id.String() // formatted once: span, metadata and answer
	ctx, span := s.tracer.Start(ctx, "execute_tool "+tool.Name(), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", tool.Name()),
		attribute.String("gen_ai.tool.call.id", rec.req.CallID),
		attribute.String("portcullis.receipt_id", receiptID),
		attribute.String("portcullis.principal", p.ID),
	))
	defer span.End()

	call, err := step(ctx, s, "validate", func(ctx context.Context) (tools.Call, error) {
		return tool.Prepare(ctx, rec.req.Input)
	})
	if err != nil {
		rec.args = bestEffortArgs(rec.req.Input)
		return s.refuse(ctx, rec, wire.DecisionInvalid, toWireError(err))
	}
	rec.args = call.Args()

	dec, err := s.decide(ctx, p, tool.Name(), wire.PurposeCall, call.Args(), call.Resolved(), rec.req)
	rec.decision = dec
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) { // no policy active yet: backend_unavailable (edge.go)
			return s.refuse(ctx, rec, wire.DecisionDeny, we)
		}
		s.log.ErrorContext(ctx, "policy evaluation failed; denying", "err", err, "receipt_id", rec.id)
		rec.decision.Reasons = append(rec.decision.Reasons, "policy evaluation failed")
		return s.refuse(ctx, rec, wire.DecisionDeny, wire.Errorf(wire.CodeInternal, "policy evaluation failed; the call was denied"))
	}
	if !dec.Allow {
		return s.refuse(ctx, rec, wire.DecisionDeny, &wire.Error{Code: wire.CodePermissionDenied,
			Message: denyMessage(tool.Name(), dec.Reasons), Details: map[string]any{"reasons": nonNil(dec.Reasons)}})
	}
	scope, err := step(ctx, s, "enforce", func(ctx context.Context) (wire.Scope, error) {
		return call.Enforce(ctx, dec)
	})
	if err != nil {
		we := toWireError(err)
		rec.decision.Reasons = append(append([]string(nil), dec.Reasons...), "enforcement: "+we.Message)
		rec.decision.RuleIDs = withRuleID(dec.RuleIDs, "enforce."+string(we.Code))
		// Some input can only be judged against the grants (an Exec
		// argv[0] inside them that is not a program): invalid, not denied.
		decision := wire.DecisionDeny
		if we.Code == wire.CodeInvalidInput {
			decision = wire.DecisionInvalid
		}
		return s.refuse(ctx, rec, decision, we)
	}
	rec.scope = &scope

	// Write-ahead: the decision is durable before anything runs.
	if _, err := step(ctx, s, "record_decision", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.appendEvents(ctx, s.decisionEvent(rec, wire.DecisionAllow, ""))
	}); err != nil {
		if r, ok := call.(tools.Releaser); ok {
			r.Release()
		}
		s.metrics.evidenceFailures.Inc()
		s.log.ErrorContext(ctx, "decision event not durable; refusing to dispatch", "err", err, "tool", tool.Name())
		// The commit's result may be unknown (lost with its connection):
		// should the decision turn up, it gets the outcome "did not run".
		s.late.Queue(evidence.NotRunOutcome(rec.id, s.opts.InstanceID, s.opts.Now()), true)
		we := wire.Errorf(wire.CodeEvidenceUnavailable, "the evidence store is unavailable, so the call was not run; retry later")
		return statusOf(we.Code), wire.ToolCallResponse{CallID: rec.req.CallID, Decision: s.decisionResult(rec), Output: failed(we, nil)}
	}

	res, _ := step(ctx, s, "dispatch", func(ctx context.Context) (tools.Result, error) {
		// Tools that run code (code.run) call other tools through this:
		// each nested call is decided and recorded like any other.
		ctx = tools.WithDispatcher(ctx, &nested{s: s, principal: p, parent: rec.id, session: rec.req.SessionID, depth: depth + 1})
		ctx = tools.WithCaller(ctx, tools.Caller{PrincipalID: p.ID, SessionID: rec.req.SessionID, ReceiptID: receiptID})
		return call.Run(ctx, scope), nil
	})
	if res.Output.Metadata == nil {
		res.Output.Metadata = map[string]any{}
	}
	res.Output.Metadata["receipt_id"] = receiptID

	outcome := s.outcomeEvent(rec, res)
	if _, err := step(ctx, s, "record_outcome", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.appendEvents(ctx, outcome)
	}); err != nil {
		// The call already ran; its receipt keeps its durable decision
		// until the outcome is recorded late (late.go), or marked
		// interrupted when this instance restarts first.
		s.metrics.evidenceFailures.Inc()
		s.log.ErrorContext(ctx, "outcome event not durable; queued to record later", "err", err, "receipt_id", rec.id)
		res.Output.Metadata["evidence_outcome"] = "unrecorded"
		s.late.Queue(outcome, false)
	}
	s.keepResult(ctx, rec, tool.Name(), res) // for read_tool_result (results.go)

	status := http.StatusOK
	if res.Output.Error != nil {
		switch res.Output.Error.Code {
		case wire.CodeBackendUnavailable, wire.CodeSandboxUnavailable, wire.CodeInternal:
			status = statusOf(res.Output.Error.Code)
		}
	}
	code := ""
	if res.Output.Error != nil {
		code = string(res.Output.Error.Code)
		span.SetAttributes(attribute.String("error.type", code))
	}
	span.SetAttributes(attribute.String("portcullis.outcome", res.Status))
	s.metrics.calls.WithLabelValues(tool.Name(), wire.DecisionAllow, code).Inc()
	s.metrics.duration.WithLabelValues(tool.Name()).Observe(time.Since(rec.at).Seconds())
	return status, wire.ToolCallResponse{
		ReceiptID: receiptID, CallID: rec.req.CallID,
		Decision: s.decisionResult(rec), Output: res.Output,
	}
}

// nested dispatches the tool calls a running call makes (code.run's
// bridge) back through the full pipeline, as the same principal, with the
// running call's receipt as their parent.
type nested struct {
	s         *Server
	principal wire.Principal
	parent    uuid.UUID
	session   string
	depth     int
}

func (n *nested) Dispatch(ctx context.Context, tool string, input json.RawMessage) (int, wire.ToolCallResponse) {
	body, err := json.Marshal(wire.ToolCallRequest{Tool: tool, Input: input, SessionID: n.session})
	if err != nil {
		return http.StatusBadRequest, wire.ToolCallResponse{Output: failed(wire.FieldError(wire.CodeInvalidInput, "input", "input is not JSON"), nil)}
	}
	var we *wire.Error
	if int64(len(body)) > n.s.opts.MaxBodyBytes {
		we = tooLarge(n.s.opts.MaxBodyBytes)
	}
	parent := n.parent
	return n.s.governedCall(ctx, n.principal, body, we, &parent, n.depth)
}

// ListTools is what the running call's principal may call now, by tool
// name (tools.ToolLister): GET /v1/tools' list, for code.run's typed
// stubs.
func (n *nested) ListTools(ctx context.Context) ([]wire.FunctionSpec, error) {
	return n.s.visibleSpecs(ctx, n.principal)
}

// refuse records a call that will not run (invalid or denied) and answers it.
// The receipt is written before the answer; if it cannot be, the caller gets
// evidence_unavailable rather than an unrecorded refusal.
func (s *Server) refuse(ctx context.Context, rec *record, decision string, we *wire.Error) (int, wire.ToolCallResponse) {
	if trace.SpanFromContext(ctx).IsRecording() {
		trace.SpanFromContext(ctx).SetStatus(codes.Error, string(we.Code))
	}
	if len(rec.decision.Reasons) == 0 {
		rec.decision.Reasons = []string{we.Message}
	}
	if len(rec.decision.RuleIDs) == 0 {
		// Refused by the gateway itself (invalid input, wrong role, unknown
		// tool, a failed policy evaluation): the rule is the gateway's.
		rec.decision.RuleIDs = []string{"gateway." + string(we.Code)}
	}
	if rec.decision.PolicyRevision == "" {
		rec.decision.PolicyRevision = s.opts.PolicyRevision()
	}
	s.metrics.calls.WithLabelValues(metricTool(s, rec.req.Tool), decision, string(we.Code)).Inc()
	outcome := evidence.Event{
		ID: uuid.Must(uuid.NewV7()), ReceiptID: rec.id, Kind: evidence.KindOutcome, Time: s.opts.Now().UTC(),
		InstanceID: s.opts.InstanceID,
		Outcome:    &wire.Outcome{Status: wire.StatusError, ErrorCode: ptr(string(we.Code)), Backend: "none"},
	}
	if err := s.appendEvents(ctx, s.decisionEvent(rec, decision, string(we.Code)), outcome); err != nil {
		s.metrics.evidenceFailures.Inc()
		s.log.ErrorContext(ctx, "receipt for refused call not durable", "err", err, "code", we.Code)
		ue := wire.Errorf(wire.CodeEvidenceUnavailable, "the evidence store is unavailable; the call was refused (%s) but could not be recorded; retry later", we.Code)
		return statusOf(ue.Code), wire.ToolCallResponse{CallID: rec.req.CallID, Decision: s.decisionResult(rec), Output: failed(ue, nil)}
	}
	return statusOf(we.Code), wire.ToolCallResponse{
		ReceiptID: rec.id.String(), CallID: rec.req.CallID,
		Decision: s.decisionResult(rec),
		Output:   failed(we, map[string]any{"receipt_id": rec.id.String()}),
	}
}

// withRuleID is ids (copied) plus id, within wire.MaxRuleIDs: the last of
// a full list gives way, so the refusing rule is always named.
func withRuleID(ids []string, id string) []string {
	out := append([]string(nil), ids...)
	if len(out) >= wire.MaxRuleIDs {
		out = out[:wire.MaxRuleIDs-1]
	}
	return append(out, id)
}

func metricTool(s *Server, name string) string {
	if _, ok := s.tools[name]; ok {
		return name
	}
	return "unknown"
}

// appendEvents makes events durable within Options.EvidenceTimeout; the
// write runs detached from the client's context so a disconnecting client
// cannot cancel its own receipt.
func (s *Server) appendEvents(ctx context.Context, events ...evidence.Event) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.EvidenceTimeout)
	defer cancel()
	return s.opts.Evidence.Append(ctx, events...)
}

// decisionEvent is the receipt's decision part. What the caller controls
// is bounded and redacted before it becomes durable: args through
// evidence.BoundedArgs (a refused call keeps at most a 4 KiB prefix plus
// the input's size and digest; an allowed one up to 64 KiB), and reasons,
// which may quote the input ("unknown field \"<5 MB key>\""), through
// evidence.BoundReasons.
func (s *Server) decisionEvent(rec *record, decision, code string) evidence.Event {
	limit := evidence.MaxRefusedArgsBytes
	if decision == wire.DecisionAllow {
		limit = evidence.MaxArgsBytes
	}
	args := evidence.BoundedArgs(rec.args, rec.rawInput, limit)
	return evidence.Event{
		ID: rec.id, ReceiptID: rec.id, Kind: evidence.KindDecision, Time: rec.at,
		InstanceID: s.opts.InstanceID, PrincipalID: rec.principal.ID,
		SessionID: rec.req.SessionID, CallID: rec.req.CallID, Tool: truncate(rec.req.Tool, 128),
		Decision: decision, Reasons: evidence.BoundReasons(rec.decision.Reasons), RuleIDs: rec.decision.RuleIDs,
		PolicyRevision: rec.decision.PolicyRevision, ArgsSHA256: evidence.ArgsDigest(rec.rawInput),
		Args: args, Scope: rec.scope,
		TraceID: rec.traceID, ErrorCode: code, ParentReceiptID: rec.parent,
	}
}

func (s *Server) outcomeEvent(rec *record, res tools.Result) evidence.Event {
	now := s.opts.Now().UTC()
	o := &wire.Outcome{
		Status: res.Status, ExitCode: res.ExitCode, OutputSHA256: res.OutputSHA256,
		DurationMS: now.Sub(rec.at).Milliseconds(), Backend: res.Backend, Network: res.Network,
	}
	if d, ok := res.Output.Metadata["duration_ms"]; ok {
		if ms, ok := toInt64(d); ok {
			o.DurationMS = ms
		}
	}
	if res.Output.Error != nil {
		o.ErrorCode = ptr(string(res.Output.Error.Code))
	}
	return evidence.Event{
		ID: uuid.Must(uuid.NewV7()), ReceiptID: rec.id, Kind: evidence.KindOutcome, Time: now,
		InstanceID: s.opts.InstanceID, Outcome: o,
	}
}

func (s *Server) decisionResult(rec *record) *wire.DecisionResult {
	return &wire.DecisionResult{Allow: rec.decision.Allow && rec.scope != nil, Reasons: nonNil(rec.decision.Reasons), PolicyRevision: rec.decision.PolicyRevision}
}

// decide asks the policy, inside its own span.
func (s *Server) decide(ctx context.Context, p wire.Principal, tool, purpose string, args, resolved map[string]any, req wire.ToolCallRequest) (wire.Decision, error) {
	start := time.Now()
	d, err := step(ctx, s, "decide", func(ctx context.Context) (wire.Decision, error) {
		return s.opts.Policy.Decide(ctx, wire.PolicyInput{
			Principal: p, Tool: tool, Purpose: purpose, Args: nonNilMap(args), Resolved: nonNilMap(resolved),
			SessionID: req.SessionID, CallID: req.CallID, Time: s.opts.Now().UTC(),
		})
	})
	s.metrics.decisionDuration.Observe(time.Since(start).Seconds())
	return d, err
}

// step runs one pipeline step in a child span.
func step[T any](ctx context.Context, s *Server, name string, f func(context.Context) (T, error)) (T, error) {
	ctx, span := s.tracer.Start(ctx, name)
	defer span.End()
	v, err := f(ctx)
	if err != nil {
		span.SetStatus(codes.Error, name+" failed")
		var we *wire.Error
		if errors.As(err, &we) {
			span.SetAttributes(attribute.String("error.type", string(we.Code)))
		}
	}
	return v, err
}

// readBody reads at most MaxBodyBytes; more is too_large.
func (s *Server) readBody(c echo.Context) ([]byte, *wire.Error) {
	limit := s.opts.MaxBodyBytes
	if c.Request().ContentLength > limit {
		return nil, tooLarge(limit)
	}
	b, err := io.ReadAll(io.LimitReader(c.Request().Body, limit+1))
	if err != nil {
		return nil, wire.Errorf(wire.CodeInvalidInput, "could not read the request body: %v", err)
	}
	if int64(len(b)) > limit {
		return nil, tooLarge(limit)
	}
	return b, nil
}

func tooLarge(limit int64) *wire.Error {
	return &wire.Error{Code: wire.CodeTooLarge, Message: fmt.Sprintf("request body exceeds %d bytes", limit), Details: map[string]any{"field": "body", "limit": limit}}
}

// parseToolCall decodes and checks the envelope of a tool call.
func parseToolCall(body []byte, req *wire.ToolCallRequest) *wire.Error {
	if !utf8.Valid(body) {
		return wire.FieldError(wire.CodeInvalidInput, "body", "request body is not valid UTF-8")
	}
	if err := decodeStrict(body, req); err != nil {
		return jsonError(err)
	}
	switch {
	case req.Tool == "":
		return wire.FieldError(wire.CodeInvalidInput, "tool", "tool is required, e.g. \"Exec\"")
	case !printable(req.Tool) || len(req.Tool) > 128:
		return wire.FieldError(wire.CodeInvalidInput, "tool", "tool must be a printable name of at most 128 bytes")
	case len(req.CallID) > 256 || !printable(req.CallID):
		return wire.FieldError(wire.CodeInvalidInput, "call_id", "call_id must be printable and at most 256 bytes")
	case len(req.SessionID) > 256 || !printable(req.SessionID):
		return wire.FieldError(wire.CodeInvalidInput, "session_id", "session_id must be printable and at most 256 bytes")
	}
	in := bytes.TrimSpace(req.Input)
	if len(in) == 0 || in[0] != '{' {
		return wire.FieldError(wire.CodeInvalidInput, "input", "input must be a JSON object holding the tool's arguments")
	}
	return nil
}

// jsonError explains a decoding failure and names the field where it can.
func jsonError(err error) *wire.Error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return &wire.Error{Code: wire.CodeInvalidInput, Message: fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, err), Details: map[string]any{"field": "body", "offset": syn.Offset}}
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return wire.FieldError(wire.CodeInvalidInput, field, "%s must be %s, got JSON %s", field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return wire.FieldError(wire.CodeInvalidInput, "body", "request body is empty or cut short; send a JSON object")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, uerr := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		field := name
		if uerr != nil || field == "" {
			field = "body" // an empty or unprintable key: name the body
		}
		return wire.FieldError(wire.CodeInvalidInput, field, "unknown field %q; accepted: tool, input, call_id, session_id", name)
	case errors.Is(err, errTrailing):
		return wire.FieldError(wire.CodeInvalidInput, "body", "trailing data after the JSON object")
	}
	return wire.FieldError(wire.CodeInvalidInput, "body", "invalid JSON: %v", err)
}

func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "map", "struct":
		return "an object"
	case "bool":
		return "a boolean"
	}
	return "a " + k
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// bestEffortArgs decodes input for the receipt of a call that never reached
// its tool; undecodable input is recorded only by its digest.
func bestEffortArgs(raw json.RawMessage) map[string]any {
	var m map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}

func denyMessage(tool string, reasons []string) string {
	if len(reasons) == 0 {
		return fmt.Sprintf("policy denied %s", tool)
	}
	return fmt.Sprintf("policy denied %s: %s", tool, strings.Join(reasons, "; "))
}

func failed(we *wire.Error, meta map[string]any) wire.ToolOutput {
	if meta == nil {
		meta = map[string]any{}
	}
	return wire.ToolOutput{Success: false, Data: nil, Error: we, Metadata: meta}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func ptr[T any](v T) *T { return &v }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

func toInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		return int64(n), true
	}
	return 0, false
}
