// Package tools holds the contract between the gateway's call pipeline and
// the tools it runs, in the manner of database/sql/driver: the pipeline owns
// authentication, policy, evidence and error mapping; a Tool owns validation,
// normalization, enforcement against the decision's grants and execution.
//
// The tools themselves live below: exec (Exec), fs (fs.*), httpget
// (http.get), coderun (code.run), readresult (read_tool_result). Tools that
// start programs do so on a backends.Runner chosen by the binary; "backend"
// always means such a runner, never a tool.
package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// Tool is one callable tool (Exec, fs.read, ...).
type Tool interface {
	// Name is the wire name, e.g. "Exec".
	Name() string
	// Description is shown to models in GET /v1/tools.
	Description() string
	// Parameters is the JSON Schema of the tool's input.
	Parameters() json.RawMessage
	// Prepare validates and normalizes input. Bad input returns a *wire.Error
	// with code invalid_input (or too_large) naming the field at fault.
	Prepare(ctx context.Context, input json.RawMessage) (Call, error)
}

// Call is one validated, normalized request, ready for policy and enforcement.
type Call interface {
	// Args is the caller's input as decoded: policy input.args.
	Args() map[string]any
	// Resolved holds the gateway's normalized facts: policy input.resolved.
	Resolved() map[string]any
	// Enforce holds the concrete request against the decision's grants and
	// returns the enforced scope, or a *wire.Error (fs_denied,
	// network_denied, sandbox_violation, invalid_input ...).
	Enforce(ctx context.Context, d wire.Decision) (wire.Scope, error)
	// Run executes the call within scope. It never returns an error: every
	// failure is a ToolOutput with success false and a contract error code.
	Run(ctx context.Context, scope wire.Scope) Result
}

// Releaser is implemented by calls whose Enforce holds resources for Run:
// the file tools keep the descriptors they checked, so that Run touches
// exactly what was checked. The pipeline calls Release for a call that
// enforced successfully but will not run (a dry run, a decision that could
// not be recorded); Run releases them itself.
type Releaser interface {
	Release()
}

// Result is a finished call: what the caller gets and what evidence records.
type Result struct {
	Output       wire.ToolOutput
	Status       string // wire.Status* (succeeded, failed, timed_out, error)
	ExitCode     *int
	OutputSHA256 string // SHA-256 hex over the tool's data as returned
	Backend      string // what really ran the call: "process", "bwrap", ...
	// Network attributes proxied connections to the call (nil: none).
	Network *wire.NetworkStats
	// DurationMS is how long the tool ran, as the outcome records it, when
	// Timed; otherwise the pipeline measures the call itself. Set both with
	// SetDuration, which also shows it to the caller as metadata
	// duration_ms.
	DurationMS int64
	Timed      bool
}

// SetDuration records that the call ran for ms milliseconds: on the result,
// for the outcome's evidence, and as the output's metadata duration_ms, for
// the caller, from one value so that the two never differ.
func (r *Result) SetDuration(ms int64) {
	if r.Output.Metadata == nil {
		r.Output.Metadata = map[string]any{}
	}
	r.Output.Metadata["duration_ms"] = ms
	r.DurationMS, r.Timed = ms, true
}

// Timed is r after r.SetDuration(ms), for a result built in one expression.
func Timed(r Result, ms int64) Result {
	r.SetDuration(ms)
	return r
}

// Dispatcher runs a tool call on behalf of the call that is running now: the
// same principal, through the whole pipeline (decision, enforcement, receipt
// with parent_receipt_id), exactly as if the agent had made it. Tools that
// run code (code.run) reach other tools only through it.
type Dispatcher interface {
	Dispatch(ctx context.Context, tool string, input json.RawMessage) (status int, resp wire.ToolCallResponse)
}

type dispatcherKey struct{}

// WithDispatcher gives a running call the way back into the pipeline.
func WithDispatcher(ctx context.Context, d Dispatcher) context.Context {
	return context.WithValue(ctx, dispatcherKey{}, d)
}

// DispatcherFrom returns the running call's dispatcher, if the pipeline set
// one.
func DispatcherFrom(ctx context.Context) (Dispatcher, bool) {
	d, ok := ctx.Value(dispatcherKey{}).(Dispatcher)
	return d, ok
}

type dryRunKey struct{}

// WithDryRun marks ctx as a dry run (POST /v1/decisions): Prepare and
// Enforce compute what a call would get without any effect an attacker
// could observe beyond the policy input, so no DNS lookup, no connection
// and no file opened for a name the caller chose. A dry run writes no
// receipt, so anything it did would be an unrecorded channel out.
func WithDryRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, dryRunKey{}, true)
}

// IsDryRun reports whether ctx is a dry run's.
func IsDryRun(ctx context.Context) bool {
	v, _ := ctx.Value(dryRunKey{}).(bool)
	return v
}

// ToolLister is implemented by a Dispatcher that can also say which tools
// the running call's principal may call (the policy's purpose "list", as
// GET /v1/tools), so code.run can offer typed stubs for exactly those.
// Each spec's Name is the tool's own name, as Dispatch takes it.
type ToolLister interface {
	ListTools(ctx context.Context) ([]wire.FunctionSpec, error)
}

// GuardAutorun refuses a run after which the autorun guard moved aside
// what the program planted (sandbox.AutorunRefusal): the call fails with
// the guard's error, and its metadata says what was moved.
func (r *Result) GuardAutorun(changes []sandbox.AutorunChange) {
	we := sandbox.AutorunRefusal(changes)
	if we == nil {
		return
	}
	if r.Status == wire.StatusSucceeded {
		r.Status = wire.StatusFailed
	}
	r.Output.Success, r.Output.Error = false, we
	if r.Output.Metadata == nil {
		r.Output.Metadata = map[string]any{}
	}
	r.Output.Metadata["autorun_guard"] = changes
}

// DenyPaths keeps the absolute paths of a policy's deny list, cleaned: the
// sandbox hides them even inside the grants. A relative entry names
// nothing and is dropped.
func DenyPaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		if filepath.IsAbs(p) {
			out = append(out, filepath.Clean(p))
		}
	}
	return out
}

// ProgramResult is the result of a program that ran (Exec, code.run): its
// data, encoded once for the output digest; its exit code, network stats
// (also in the metadata) and duration. The tool then sets its status. The
// error is an encoding failure, internal (op names the tool).
func ProgramResult(op string, data any, res sandbox.Result, backend string, meta map[string]any, durationMS int64) (Result, *wire.Error) {
	sum, err := json.Marshal(data)
	if err != nil {
		return Result{}, wire.Wrap(wire.CodeInternal, op+": encode output", err, "encoding the output failed")
	}
	digest := sha256.Sum256(sum)
	exit := res.ExitCode
	out := Result{
		Output:       wire.ToolOutput{Data: data, Metadata: meta},
		ExitCode:     &exit,
		OutputSHA256: hex.EncodeToString(digest[:]),
		Backend:      backend,
		Network:      res.Network,
	}
	out.SetDuration(durationMS)
	if res.Network != nil {
		out.Output.Metadata["network"] = res.Network
	}
	return out, nil
}

// CPULimitError is the error of a program (what names it) that died of
// SIGXCPU: it used its CPU time (cpu_seconds, which defaults to the
// timeout; every thread of the program counts). A timeout, on the field the
// policy sets.
func CPULimitError(what string, cpuSeconds int) *wire.Error {
	e := wire.FieldError(wire.CodeTimeout, "cpu_seconds", "%s used its %d s of CPU time (all its threads together) and was stopped; ask the policy for a higher cpu_seconds or do less per call", what, cpuSeconds)
	e.Details["limit"] = cpuSeconds
	return e
}

// Hints are a tool's behaviour hints as MCP's tools/list annotations name
// them: readOnlyHint (changes nothing), destructiveHint (may change or
// delete what exists; meaningful when not read-only), idempotentHint
// (repeating a call has no further effect) and openWorldHint (reaches
// beyond the gateway's host: the network, other processes). A tool offers
// them with an Annotations() map[string]any method; they are advice to
// clients and models, never a control: the policy decides.
func Hints(readOnly, destructive, idempotent, openWorld bool) map[string]any {
	h := map[string]any{"readOnlyHint": readOnly, "idempotentHint": idempotent, "openWorldHint": openWorld}
	if !readOnly {
		h["destructiveHint"] = destructive
	}
	return h
}
