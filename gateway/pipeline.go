package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/gateway/statedir"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// record gathers what a receipt says about one call as the pipeline learns it.
type record struct {
	parent    *uuid.UUID // the receipt of the call that made this one (code.run)
	depth     int        // nesting depth: 0 for a call from an agent
	id        uuid.UUID
	idText    string // id, formatted once: span, metadata and answer
	at        time.Time
	principal wire.Principal
	req       wire.ToolCallRequest
	args      map[string]any
	decision  wire.Decision
	scope     *wire.Scope
	traceID   string
}

// maxDepth bounds nested calls (code that calls tools that run code ...).
const maxDepth = 4

// toolCall is POST /v1/tool-calls: the whole governed pipeline.
func (s *Server) toolCall(c echo.Context) error {
	status, resp := s.governedCall(c.Request().Context(), s.readCall(c))
	setRetryAfter(c, resp)
	return writeAnswer(c, status, resp)
}

// governedCall runs one call through the pipeline: admit it (validate,
// decide, enforce), record the decision durably, run, record the outcome.
// It answers the HTTP status and the ToolCallResponse; a nested call
// (parent set) is recorded with its parent's receipt id.
func (s *Server) governedCall(ctx context.Context, in callRequest) (int, wire.ToolCallResponse) {
	rec := s.newRecord(ctx, in)
	tool, decision, we := s.admitEnvelope(in)
	if we != nil {
		rec.args = bestEffortArgs(in.req.Input)
		return s.refuse(ctx, rec, decision, we)
	}
	// A model-safe name is recorded, decided and traced as the tool's own.
	in.req.Tool, rec.req.Tool = tool.Name(), tool.Name()
	ctx, span := s.startCall(ctx, rec, tool)
	defer span.End()

	a, stop := s.admit(ctx, in.principal, tool, in.req, wire.PurposeCall)
	rec.decision = a.decision
	if stop != nil {
		if a.call != nil {
			rec.args = a.call.Args()
		} else {
			rec.args = bestEffortArgs(in.req.Input)
		}
		stop.annotate(&rec.decision)
		return s.refuse(ctx, rec, stop.decision, stop.err)
	}
	rec.args = a.call.Args()
	rec.scope = &a.scope
	if a.decision.Approval != nil { // a person decides first (approvals.go)
		return s.park(ctx, rec, a)
	}
	if status, resp, ok := s.recordAdmitted(ctx, rec, tool, a); !ok { // draws its quotas (quota.go)
		return status, resp
	}
	res := s.dispatch(ctx, rec, a)
	s.recordOutcome(ctx, rec, &res)
	s.keepResult(ctx, rec, tool.Name(), res) // for read_tool_result (results.go)
	return s.answerCall(ctx, span, rec, tool, res)
}

// newRecord starts the receipt of a call: its id, time, caller and trace.
func (s *Server) newRecord(ctx context.Context, in callRequest) *record {
	rec := &record{id: uuid.Must(uuid.NewV7()), at: s.opts.Now().UTC(), principal: in.principal,
		parent: in.parent, depth: in.depth, req: in.req}
	rec.idText = rec.id.String()
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		rec.traceID = sc.TraceID().String()
	}
	return rec
}

// admitEnvelope admits the envelope of a call before any tool sees it: not
// refused at the entrance, not nested too deep, from an agent, naming a
// tool this gateway has. A refusal says which decision it records.
func (s *Server) admitEnvelope(in callRequest) (tools.Tool, string, *wire.Error) {
	if in.refused != nil {
		return nil, wire.DecisionInvalid, in.refused
	}
	if in.depth > maxDepth {
		return nil, wire.DecisionInvalid, wire.Errorf(wire.CodeInvalidInput, "nested tool calls deeper than %d are refused", maxDepth)
	}
	if !in.principal.HasRole(wire.RoleAgent) {
		return nil, wire.DecisionDeny, wire.Errorf(wire.CodeForbidden, "principal %q does not hold the agent role needed to call tools", in.principal.ID)
	}
	tool, we := s.findTool(in.req.Tool)
	if we != nil {
		return nil, wire.DecisionInvalid, we
	}
	return tool, "", nil
}

// findTool is the tool named name in either form (lookupTool), or
// unknown_tool naming nothing but what was sent (unknownTool).
func (s *Server) findTool(name string) (tools.Tool, *wire.Error) {
	if tool, ok := s.lookupTool(name); ok {
		return tool, nil
	}
	return nil, unknownTool(name)
}

// startCall opens the call's span, execute_tool {tool}, under which each
// step is a child.
func (s *Server) startCall(ctx context.Context, rec *record, tool tools.Tool) (context.Context, trace.Span) {
	return s.tracer.Start(ctx, "execute_tool "+tool.Name(), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", tool.Name()),
		attribute.String("gen_ai.tool.call.id", callIDOf(rec)),
		attribute.String("portcullis.receipt_id", rec.idText),
		attribute.String("portcullis.principal", rec.principal.ID),
	))
}

// callIDOf is the call's gen_ai.tool.call.id: the caller's call_id, else
// the receipt id, which names the call as uniquely.
func callIDOf(rec *record) string {
	if rec.req.CallID != "" {
		return rec.req.CallID
	}
	return rec.idText
}

// admission is what the admit steps found out about a call.
type admission struct {
	call     tools.Call    // nil when validation refused it
	decision wire.Decision // the policy's, as it answered
	scope    wire.Scope    // the enforced scope, when admitted
}

// stop is an admit step refusing a call: the contract error, the decision
// it records, and what it adds to the policy's reasons and rule ids.
type stop struct {
	step     string // the step that refused: "validate", "decide", "deny" (the policy's answer) or "enforce"
	decision string // wire.DecisionInvalid or wire.DecisionDeny
	err      *wire.Error
	reasons  []string // replaces the decision's reasons when set
	ruleIDs  []string // replaces the decision's rule ids when set
}

// annotate applies what the stop adds to the recorded decision.
func (st *stop) annotate(d *wire.Decision) {
	if st.reasons != nil {
		d.Reasons = st.reasons
	}
	if st.ruleIDs != nil {
		d.RuleIDs = st.ruleIDs
	}
}

// admit runs the steps a call and its dry run share, each in its own span:
// validate (Prepare: strict decode, normalization to real paths), decide
// (the policy, with the given purpose), enforce (the concrete request
// against the decision's grants). It stops at the first step that refuses.
func (s *Server) admit(ctx context.Context, p wire.Principal, tool tools.Tool, req wire.ToolCallRequest, purpose string) (admission, *stop) {
	var a admission
	call, err := step(ctx, s, "validate", func(ctx context.Context) (tools.Call, error) {
		return tool.Prepare(ctx, req.Input)
	})
	if err != nil {
		return a, &stop{step: "validate", decision: wire.DecisionInvalid, err: toWireError(err)}
	}
	a.call = call
	dec, err := s.decide(ctx, p, tool.Name(), purpose, call.Args(), call.Resolved(), req)
	a.decision = dec
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) { // no policy active yet: backend_unavailable (edge.go)
			return a, &stop{step: "decide", decision: wire.DecisionDeny, err: we}
		}
		s.log.ErrorContext(ctx, "policy evaluation failed; denying", "err", err, "tool", tool.Name())
		return a, &stop{step: "decide", decision: wire.DecisionDeny, err: wire.Errorf(wire.CodeInternal, "policy evaluation failed; the call was denied"),
			reasons: append(dec.Reasons, "policy evaluation failed")}
	}
	if !dec.Allow {
		return a, &stop{step: "deny", decision: wire.DecisionDeny, err: &wire.Error{Code: wire.CodePermissionDenied,
			Message: denyMessage(tool.Name(), dec.Reasons), Details: map[string]any{"reasons": nonNil(dec.Reasons)}}}
	}
	if st := s.bindState(ctx, p, req, &a.decision); st != nil {
		return a, st
	}
	dec = a.decision
	scope, err := step(ctx, s, "enforce", func(ctx context.Context) (wire.Scope, error) {
		return call.Enforce(ctx, dec)
	})
	if err != nil {
		we := toWireError(err)
		// Some input can only be judged against the grants (an Exec
		// argv[0] inside them that is not a program): invalid, not denied.
		decision := wire.DecisionDeny
		if we.Code == wire.CodeInvalidInput {
			decision = wire.DecisionInvalid
		}
		return a, &stop{step: "enforce", decision: decision, err: we,
			reasons: append(append([]string(nil), dec.Reasons...), "enforcement: "+we.Message),
			ruleIDs: withRuleID(dec.RuleIDs, "enforce."+string(we.Code))}
	}
	a.scope = scope
	return a, nil
}

// recordDecision makes the allow decision durable before anything runs
// (write-ahead). When it cannot, the call is refused evidence_unavailable
// and never runs: ok is false and status and resp are the answer.
func (s *Server) recordDecision(ctx context.Context, rec *record, tool tools.Tool, call tools.Call) (int, wire.ToolCallResponse, bool) {
	_, err := step(ctx, s, "record_decision", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.appendEvents(ctx, s.decisionEvent(rec, wire.DecisionAllow, ""))
	})
	if err == nil {
		return 0, wire.ToolCallResponse{}, true
	}
	return s.decisionNotRecorded(ctx, rec, tool, call, err)
}

// decisionNotRecorded answers an admitted call whose decision did not
// become durable: it does not run.
func (s *Server) decisionNotRecorded(ctx context.Context, rec *record, tool tools.Tool, call tools.Call, err error) (int, wire.ToolCallResponse, bool) {
	if r, ok := call.(tools.Releaser); ok {
		r.Release()
	}
	s.metrics.evidenceFailures.Inc()
	s.log.ErrorContext(ctx, "decision event not durable; refusing to dispatch", "err", err, "tool", tool.Name())
	// The commit's result may be unknown (lost with its connection):
	// should the decision turn up, it gets the outcome "did not run".
	s.late.Queue(evidence.NotRunOutcome(rec.id, s.opts.InstanceID, s.opts.Now()), true)
	we := wire.Errorf(wire.CodeEvidenceUnavailable, "the evidence store is unavailable, so the call was not run; retry later")
	return statusOf(we.Code), wire.ToolCallResponse{CallID: rec.req.CallID, Decision: s.decisionResult(rec), Output: failed(we, nil)}, false
}

// dispatch runs the admitted call within its scope. Tools that run code
// (code.run) call other tools through the dispatcher it installs: each
// nested call is decided and recorded like any other.
func (s *Server) dispatch(ctx context.Context, rec *record, a admission) tools.Result {
	res, _ := step(ctx, s, "dispatch", func(ctx context.Context) (tools.Result, error) {
		ctx = tools.WithDispatcher(ctx, &nested{s: s, principal: rec.principal, parent: rec.id, session: rec.req.SessionID, depth: rec.depth + 1})
		ctx = tools.WithCaller(ctx, tools.Caller{PrincipalID: rec.principal.ID, SessionID: rec.req.SessionID, ReceiptID: rec.idText})
		return a.call.Run(ctx, a.scope), nil
	})
	if res.Output.Metadata == nil {
		res.Output.Metadata = map[string]any{}
	}
	res.Output.Metadata["receipt_id"] = rec.idText
	return res
}

// recordOutcome records how the call ended. The call already ran: an
// outcome the store does not take is queued to record later
// (evidence.LateOutcomes), and the answer says so.
func (s *Server) recordOutcome(ctx context.Context, rec *record, res *tools.Result) {
	outcome := s.outcomeEvent(rec, *res)
	if _, err := step(ctx, s, "record_outcome", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.appendEvents(ctx, outcome)
	}); err != nil {
		// The receipt keeps its durable decision until the outcome is
		// recorded late, or marked interrupted when this instance restarts
		// first.
		s.metrics.evidenceFailures.Inc()
		s.log.ErrorContext(ctx, "outcome event not durable; queued to record later", "err", err, "receipt_id", rec.id)
		res.Output.Metadata["evidence_outcome"] = "unrecorded"
		s.late.Queue(outcome, false)
	}
}

// answerCall is the answer of a call that ran: 200 unless the run failed
// for want of a backend or inside the gateway (api.md, "How a tool call
// gets its status"). It logs the cause a failed run's error wraps, which
// the answer does not carry.
func (s *Server) answerCall(ctx context.Context, span trace.Span, rec *record, tool tools.Tool, res tools.Result) (int, wire.ToolCallResponse) {
	status, code := http.StatusOK, ""
	if we := res.Output.Error; we != nil {
		switch we.Code {
		case wire.CodeBackendUnavailable, wire.CodeSandboxUnavailable, wire.CodeInternal:
			status = statusOf(we.Code)
		}
		code = string(we.Code)
		span.SetAttributes(attribute.String("error.type", code))
		if we.Err != nil {
			s.logCause(ctx, we, "tool", tool.Name(), "receipt_id", rec.id)
		}
	}
	span.SetAttributes(attribute.String("portcullis.outcome", res.Status))
	s.metrics.calls.WithLabelValues(tool.Name(), wire.DecisionAllow, code).Inc()
	s.metrics.duration.WithLabelValues(tool.Name(), wire.DecisionAllow).Observe(time.Since(rec.at).Seconds())
	return status, wire.ToolCallResponse{
		ReceiptID: rec.idText, CallID: rec.req.CallID,
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

var (
	_ tools.Dispatcher = (*nested)(nil)
	_ tools.ToolLister = (*nested)(nil)
)

func (n *nested) Dispatch(ctx context.Context, tool string, input json.RawMessage) (int, wire.ToolCallResponse) {
	parent := n.parent
	in, err := n.s.typedCall(n.principal, wire.ToolCallRequest{Tool: tool, Input: input, SessionID: n.session}, &parent, n.depth)
	if err != nil {
		return http.StatusBadRequest, wire.ToolCallResponse{Output: failed(wire.FieldError(wire.CodeInvalidInput, "input", "input is not JSON"), nil)}
	}
	return n.s.governedCall(ctx, in)
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
	if err := s.appendEvents(ctx, s.refusalEvents(rec, decision, we)...); err != nil {
		s.refusalSpan(ctx, we)
		s.countRefusal(ctx, rec, decision, we)
		s.metrics.evidenceFailures.Inc()
		s.log.ErrorContext(ctx, "receipt for refused call not durable", "err", err, "code", we.Code)
		ue := wire.Errorf(wire.CodeEvidenceUnavailable, "the evidence store is unavailable; the call was refused (%s) but could not be recorded; retry later", we.Code)
		return statusOf(ue.Code), wire.ToolCallResponse{CallID: rec.req.CallID, Decision: s.decisionResult(rec), Output: failed(ue, nil)}
	}
	return s.refused(ctx, rec, decision, we)
}

// refusalEvents completes rec's decision for a refusal (the refusal's
// reason and the gateway's rule when the policy gave none, the policy
// revision) and returns its receipt: the decision and an outcome event
// saying the call did not run.
func (s *Server) refusalEvents(rec *record, decision string, we *wire.Error) []evidence.Event {
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
	outcome := evidence.Event{
		ID: uuid.Must(uuid.NewV7()), ReceiptID: rec.id, Kind: evidence.KindOutcome, Time: s.opts.Now().UTC(),
		InstanceID: s.opts.InstanceID,
		Outcome:    &wire.Outcome{Status: wire.StatusError, ErrorCode: ptr(string(we.Code)), Backend: "none"},
	}
	return []evidence.Event{s.decisionEvent(rec, decision, string(we.Code)), outcome}
}

// refused answers a refusal whose receipt (refusalEvents) is durable.
func (s *Server) refused(ctx context.Context, rec *record, decision string, we *wire.Error) (int, wire.ToolCallResponse) {
	s.refusalSpan(ctx, we)
	s.countRefusal(ctx, rec, decision, we)
	return statusOf(we.Code), wire.ToolCallResponse{
		ReceiptID: rec.idText, CallID: rec.req.CallID,
		Decision: s.decisionResult(rec),
		Output:   failed(we, map[string]any{"receipt_id": rec.idText}),
	}
}

func (s *Server) refusalSpan(ctx context.Context, we *wire.Error) {
	if trace.SpanFromContext(ctx).IsRecording() {
		trace.SpanFromContext(ctx).SetStatus(codes.Error, string(we.Code))
	}
}

// countRefusal counts and logs a refusal.
func (s *Server) countRefusal(ctx context.Context, rec *record, decision string, we *wire.Error) {
	s.metrics.calls.WithLabelValues(metricTool(s, rec.req.Tool), decision, string(we.Code)).Inc()
	s.metrics.duration.WithLabelValues(metricTool(s, rec.req.Tool), decision).Observe(time.Since(rec.at).Seconds())
	s.logCause(ctx, we, "receipt_id", rec.id)
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
	if _, ok := s.catalogue().tools[name]; ok {
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
	args := evidence.BoundedArgs(rec.args, rec.req.Input, limit)
	return evidence.Event{
		ID: rec.id, ReceiptID: rec.id, Kind: evidence.KindDecision, Time: rec.at,
		InstanceID: s.opts.InstanceID, PrincipalID: rec.principal.ID,
		SessionID: rec.req.SessionID, CallID: rec.req.CallID, Tool: truncate(rec.req.Tool, 128),
		Decision: decision, Reasons: evidence.BoundReasons(rec.decision.Reasons), RuleIDs: rec.decision.RuleIDs,
		PolicyRevision: rec.decision.PolicyRevision, ArgsSHA256: evidence.ArgsDigest(rec.req.Input),
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
	if res.Timed {
		o.DurationMS = res.DurationMS
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

// bindState gives the decision's @state grant the call's own state
// directory (gateway/statedir), or drops it, with a reason, when the call
// has no session or the gateway keeps no state directories.
func (s *Server) bindState(ctx context.Context, p wire.Principal, req wire.ToolCallRequest, d *wire.Decision) *stop {
	var notes []string
	if s.opts.StateDirs == nil {
		d.FSGrants, notes = statedir.Unbound(d.FSGrants)
	} else {
		grants, n, err := s.opts.StateDirs.Bind(ctx, p.ID, req.SessionID, d.FSGrants)
		var full *statedir.LimitError
		if errors.As(err, &full) {
			secs := int64(full.RetryAfter / time.Second)
			return &stop{step: "enforce", decision: wire.DecisionDeny,
				err: &wire.Error{Code: wire.CodeRateLimited,
					Message: fmt.Sprintf("this principal already holds %d @state directories (sandbox.state_max_per_principal); reuse a session_id, or retry after %ds when the oldest is swept", full.Max, secs),
					Details: map[string]any{"field": "session_id", "limit": full.Max, "retry_after_s": secs}},
				reasons: append(slices.Clone(d.Reasons), "state directory limit reached")}
		}
		if err != nil {
			s.log.ErrorContext(ctx, "state directory unavailable; refusing the call", "err", err)
			return &stop{step: "enforce", decision: wire.DecisionDeny,
				err:     wire.Errorf(wire.CodeSandboxUnavailable, "the call's @state directory could not be prepared"),
				reasons: append(slices.Clone(d.Reasons), "state directory unavailable")}
		}
		d.FSGrants, notes = grants, n
	}
	d.Reasons = append(d.Reasons, notes...)
	return nil
}
