package coderun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/backends/egress"
	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/tools/coderun/tsdecl"
	"github.com/portcullis/portcullis/wire"
)

// DenoOverheadBytes is what Deno may use besides its V8 heap: the runner
// bounds the whole sandbox at the policy's memory_bytes (the heap cap, V8's
// --max-old-space-size) plus this. It covers Deno's own memory and
// ArrayBuffers, which live outside the V8 heap; and where RLIMIT_DATA
// carries the limit (no memory cgroup) V8's code range reservation, which
// counts towards it (measured: Deno 2.9 aborts with "Failed to reserve
// virtual memory for CodeRange" below about 550 MiB of RLIMIT_DATA). The
// address space is not limited at all: V8 reserves its pointer-compression
// and Oilpan cages up front, tens of GiB it never uses.
const DenoOverheadBytes = 1 << 30

// DefaultHeapBytes is the V8 heap cap when the policy sets no memory_bytes.
const DefaultHeapBytes = 1 << 30

// MaxHeapBytes caps a policy's memory_bytes for the V8 heap.
const MaxHeapBytes = 16 << 30

// call is one prepared code.run request.
type call struct {
	tool *Tool
	in   *input

	enforced bool
	denoNet  []string // --allow-net hosts (besides the bridge socket)
}

var _ tools.Call = (*call)(nil)

func (c *call) Args() map[string]any { return c.in.args }

// Resolved gives policy what the code is without its text: language, size
// and digest.
func (c *call) Resolved() map[string]any {
	sum := sha256.Sum256([]byte(c.in.code))
	return map[string]any{
		"language":    c.in.language,
		"code_bytes":  len(c.in.code),
		"code_sha256": hex.EncodeToString(sum[:]),
	}
}

// Enforce computes the scope: the grants (real paths), the posture and
// the limits. Grants Deno cannot express (a comma in the path would split
// its permission list) are refused rather than mangled.
func (c *call) Enforce(ctx context.Context, d wire.Decision) (wire.Scope, error) {
	if !d.Allow {
		return wire.Scope{}, wire.Errorf(wire.CodePermissionDenied, "the policy denied this call")
	}
	grants := []wire.FSGrant{}
	for _, g := range d.FSGrants {
		if !filepath.IsAbs(g.Path) || (g.Mode != wire.ModeRead && g.Mode != wire.ModeReadWrite) {
			c.tool.log.WarnContext(ctx, "coderun: ignoring malformed fs grant", "path", g.Path, "mode", g.Mode)
			continue
		}
		real, err := filepath.EvalSymlinks(g.Path)
		if err != nil {
			continue
		}
		if strings.ContainsAny(real, ",\x00") {
			return wire.Scope{}, &wire.Error{Code: wire.CodeSandboxViolation, Message: fmt.Sprintf("the granted path %s contains a comma, which Deno's permission lists cannot express; refusing rather than grant something else", real), Details: map[string]any{"field": "code", "path": real}}
		}
		g.Path = filepath.Clean(real)
		if err := sandbox.CheckNotPrivate(g.Path); err != nil {
			// On every runner: on the process backend Deno's permissions
			// are all that keeps the code from other runs' bridges.
			return wire.Scope{}, &wire.Error{Code: wire.CodeSandboxViolation, Message: strings.TrimSuffix(strings.TrimPrefix(err.Error(), "sandbox: "), ": "+sandbox.ErrUnsafePath.Error()), Details: map[string]any{"field": "code", "path": g.Path}}
		}
		grants = append(grants, g)
	}
	network := d.Network
	if network.Posture == "" {
		network.Posture = wire.PostureOff
	}
	if network.Allow == nil {
		network.Allow = []string{}
	}
	switch network.Posture {
	case wire.PostureOff:
	case wire.PostureAllowlist:
		if _, err := egress.ParseAllowlist(network.Allow); err != nil {
			return wire.Scope{}, &wire.Error{Code: wire.CodeNetworkDenied, Message: fmt.Sprintf("the policy's network allowlist is malformed (%v); refusing rather than guess", err), Details: map[string]any{"field": "code"}}
		}
		c.denoNet = denoNetEntries(network.Allow)
	case wire.PostureFull:
	default:
		return wire.Scope{}, &wire.Error{Code: wire.CodeNetworkDenied, Message: fmt.Sprintf("unknown network posture %q; refusing", network.Posture), Details: map[string]any{"field": "code"}}
	}
	l, err := tools.ProgramLimits(wire.Limits{TimeoutS: c.in.timeoutS, MaxOutputBytes: c.in.maxOutputBytes}, d.Limits, DefaultHeapBytes, MaxHeapBytes)
	if err != nil {
		return wire.Scope{}, err
	}
	c.enforced = true
	return wire.Scope{
		FSGrants: grants,
		Network:  network,
		EnvNames: []string{},
		Limits:   l,
		Backend:  c.tool.runner.Name(),
		FSDeny:   tools.DenyPaths(d.FSDeny),
		// How the sandbox's memory bound (heap cap + DenoOverheadBytes) is
		// enforced, decided here so that evidence records it.
		MemoryLimit: backends.MemoryLimitOf(c.tool.runner),
	}, nil
}

// denoNetEntries turns allowlist entries into Deno --allow-net hosts.
// Deno has no CIDRs or subdomain wildcards, so those entries are left out
// (narrower, never wider); under bubblewrap the egress proxy enforces the
// full list anyway, including the check of resolved addresses that Deno
// lacks (deno#21227).
func denoNetEntries(allow []string) []string {
	out := []string{}
	for _, e := range allow {
		e = strings.TrimSpace(e)
		if e == "" || strings.Contains(e, "/") || strings.HasPrefix(e, "*") || strings.ContainsAny(e, ", ") {
			continue
		}
		out = append(out, strings.ToLower(e))
	}
	return out
}

// ToolCalls is what the bridge did.
type ToolCalls struct {
	// Count is the calls made: each went through the pipeline and has a
	// receipt, listed in ReceiptIDs.
	Count      int      `json:"count"`
	ReceiptIDs []string `json:"receipt_ids"`
	// Denied counts the calls made that the gateway refused (policy
	// denial, invalid input, enforcement): receipts with decision deny or
	// invalid.
	Denied int `json:"denied"`
	// Refused counts calls asked for past the per-run budget: never
	// made, no receipt. The first one stops the run, which then fails.
	Refused int `json:"refused"`
}

// Exception is an uncaught error of the user's code.
type Exception struct {
	Message string `json:"message"`
	// Line and Column are in the user's code (0 when the trace names no
	// position there).
	Line   int `json:"line"`
	Column int `json:"column"`
}

// Data is code.run's output.data. OutputSHA256 is over its JSON encoding.
type Data struct {
	Output          string          `json:"output"`
	Stderr          string          `json:"stderr"`
	OutputTruncated bool            `json:"output_truncated"`
	StderrTruncated bool            `json:"stderr_truncated"`
	Result          json.RawMessage `json:"result"`
	ResultTruncated bool            `json:"result_truncated"`
	ToolCalls       ToolCalls       `json:"tool_calls"`
	ExitCode        int             `json:"exit_code"`
	TimedOut        bool            `json:"timed_out"`
	Exception       *Exception      `json:"exception"`
	DurationMS      int64           `json:"duration_ms"`
}

// Run executes the code. Outcomes follow Exec: exit 0 succeeded; an
// uncaught exception or non-zero exit is failed with data (exception names
// the line); the timeout is timed_out with code timeout; a run that could
// not start is backend_unavailable (or sandbox_unavailable /
// sandbox_violation from the runner).
func (c *call) Run(ctx context.Context, scope wire.Scope) tools.Result {
	t := c.tool
	backend := t.runner.Name()
	start := time.Now()
	meta := func() map[string]any {
		m := map[string]any{"backend": backend, "runtime": "deno"}
		if backend == "process" {
			m["confinement"] = "deno permissions only: no OS sandbox on this gateway"
		}
		return m
	}
	failWith := func(we *wire.Error) tools.Result {
		r := tools.Result{
			Output:  wire.ToolOutput{Error: we, Metadata: meta()},
			Status:  wire.StatusError,
			Backend: backend,
		}
		r.SetDuration(time.Since(start).Milliseconds())
		return r
	}
	fail := func(code wire.Code, format string, a ...any) tools.Result {
		return failWith(wire.Errorf(code, format, a...))
	}
	if !c.enforced || scope.Limits.TimeoutS <= 0 || scope.Limits.MaxOutputBytes <= 0 {
		return fail(wire.CodeInternal, "code.run was run before its scope was enforced")
	}
	if t.deno == "" {
		return fail(wire.CodeBackendUnavailable, "code.run needs Deno and this gateway has none; set tools.deno (PORTCULLIS_TOOLS_DENO) to the deno binary")
	}
	deno, err := filepath.EvalSymlinks(t.deno)
	if err != nil {
		return failWith(wire.Wrap(wire.CodeBackendUnavailable, "coderun: deno", err, "the configured Deno binary %s is not usable", t.deno))
	}

	disp, _ := tools.DispatcherFrom(ctx)
	dir, cleanup, we := c.runDir(ctx, disp)
	defer cleanup()
	if we != nil {
		return failWith(we)
	}
	im, err := importMap(dir, scope.FSGrants)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, importMapFile), im, 0o400)
	}
	if err != nil {
		return failWith(wire.Wrap(wire.CodeBackendUnavailable, "coderun: import map", err, "could not write the run's import map"))
	}
	reqPath, respPath := filepath.Join(dir, "bridge.req"), filepath.Join(dir, "bridge.resp")
	// Nested calls end with the run: the runner stops Deno at the
	// timeout, and the context stops a nested call still in flight.
	runCtx, cancel := context.WithTimeout(ctx, time.Duration(scope.Limits.TimeoutS)*time.Second+2*time.Second)
	defer cancel()
	br, err := openBridge(reqPath, respPath, disp, t.maxCalls, scope.Limits.MaxOutputBytes)
	if err != nil {
		return failWith(wire.Wrap(wire.CodeBackendUnavailable, "coderun: bridge", err, "could not open the tool bridge"))
	}
	// Past the tool-call budget the bridge stops the run: the runner
	// sees runCtx end and kills Deno's whole process group.
	br.stop = cancel
	br.serve(runCtx)

	res, err := t.runner.Run(runCtx, c.spec(deno, dir, reqPath, respPath, scope))
	cancel()
	br.close()
	calls, result, resultTruncated, overBudget := br.snapshot()
	if err != nil {
		t.log.ErrorContext(ctx, "coderun: runner could not start deno", "backend", backend, "error", err)
		return failWith(tools.RunnerFailure(err, backend, "Deno"))
	}
	stdout, stderr := scrub(res.Stdout, dir), scrub(res.Stderr, dir)
	data := Data{
		Output:          stdout,
		Stderr:          stderr,
		OutputTruncated: res.StdoutTruncated,
		StderrTruncated: res.StderrTruncated,
		Result:          result,
		ResultTruncated: resultTruncated,
		ToolCalls:       calls,
		ExitCode:        res.ExitCode,
		TimedOut:        res.TimedOut || res.CPULimited(),
		DurationMS:      res.Duration.Milliseconds(),
	}
	outputCapped := res.OutputCapped || res.StdoutTruncated || res.StderrTruncated
	stopped := data.TimedOut || outputCapped || overBudget
	if res.ExitCode != 0 && !stopped {
		data.Exception = exception(stderr, userFile(c.in.language))
	}
	if res.ExitCode != 0 || stopped {
		data.Result = nil
	}
	if data.Result == nil {
		data.Result = json.RawMessage("null")
	}
	out, we := tools.ProgramResult("coderun", data, res, backend, meta(), data.DurationMS)
	if we != nil {
		return failWith(we)
	}
	c.judge(&out, res, scope, overBudget, outputCapped, resultTruncated)
	t.log.DebugContext(ctx, "coderun: ran", "backend", backend, "status", out.Status, "exit_code", res.ExitCode, "tool_calls", calls.Count, "duration_ms", data.DurationMS)
	return out
}

// judge sets the status and error of a run that started: stopped over the
// tool-call budget, over the output cap or at the timeout, a result too
// large, cancelled, succeeded or failed; then the autorun guard's refusal.
func (c *call) judge(out *tools.Result, res sandbox.Result, scope wire.Scope, overBudget, outputCapped, resultTruncated bool) {
	t := c.tool
	switch {
	case overBudget:
		out.Status = wire.StatusFailed
		out.Output.Error = wire.FieldError(wire.CodeTooLarge, "tool_calls", "the code asked for more than %d tool calls and was stopped; make at most %d calls per run", t.maxCalls, t.maxCalls)
		out.Output.Error.Details["limit"] = t.maxCalls
	case outputCapped:
		out.Status = wire.StatusFailed
		out.Output.Error = wire.FieldError(wire.CodeTooLarge, "max_output_bytes", "the code wrote more than %d bytes to stdout or stderr and was stopped; raise max_output_bytes (at most %d, and the policy's limit) or write less", scope.Limits.MaxOutputBytes, MaxMaxOutputBytes)
		out.Output.Error.Details["limit"] = scope.Limits.MaxOutputBytes
	case res.TimedOut:
		out.Status = wire.StatusTimedOut
		out.Output.Error = wire.FieldError(wire.CodeTimeout, "timeout_s", "the code did not finish within %d s and was stopped; raise timeout_s (at most %d, and the policy's limit) or do less per run", scope.Limits.TimeoutS, MaxTimeoutS)
	case res.CPULimited():
		out.Status = wire.StatusTimedOut
		out.Output.Error = tools.CPULimitError("the code", scope.Limits.CPUSeconds)
	case resultTruncated && res.ExitCode == 0:
		out.Status = wire.StatusFailed
		out.Output.Error = wire.FieldError(wire.CodeTooLarge, "result", "the exported result is larger than %d bytes (max_output_bytes); return less, or raise max_output_bytes (at most %d, and the policy's limit)", scope.Limits.MaxOutputBytes, MaxMaxOutputBytes)
		out.Output.Error.Details["limit"] = scope.Limits.MaxOutputBytes
	case res.Canceled:
		out.Status = wire.StatusError
		out.Output.Error = wire.Errorf(wire.CodeBackendUnavailable, "the code was stopped because the request was cancelled or the gateway is shutting down")
	case res.ExitCode == 0 && res.Signal == nil:
		out.Status = wire.StatusSucceeded
		out.Output.Success = true
	default:
		out.Status = wire.StatusFailed
	}
	out.GuardAutorun(res.Autorun)
}

// runDir makes the run's private directory (home, Deno's cache, the
// program with its tool stubs); cleanup removes it.
func (c *call) runDir(ctx context.Context, disp tools.Dispatcher) (dir string, cleanup func(), we *wire.Error) {
	cleanup = func() {}
	dir, err := os.MkdirTemp("", "portcullis-coderun-")
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return "", cleanup, wire.Wrap(wire.CodeBackendUnavailable, "coderun: run directory", err, "could not create the run directory")
	}
	cleanup = func() {
		if err := os.RemoveAll(dir); err != nil {
			c.tool.log.WarnContext(ctx, "coderun: removing the run directory", "dir", dir, "error", err)
		}
	}
	if strings.ContainsAny(dir, ",\x00") {
		return "", cleanup, wire.Errorf(wire.CodeBackendUnavailable, "the run directory %s contains a comma; set TMPDIR to a plain path", dir)
	}
	for _, d := range []string{filepath.Join(dir, "home"), filepath.Join(dir, "deno")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", cleanup, wire.Wrap(wire.CodeBackendUnavailable, "coderun: run directory", err, "could not create the run directory")
		}
	}
	if err := writeRunDir(dir, c.in.language, c.in.code, tsdecl.StubsJS(c.stubs(ctx, disp))); err != nil {
		return "", cleanup, wire.Wrap(wire.CodeBackendUnavailable, "coderun: write program", err, "could not write the program")
	}
	return dir, cleanup, nil
}

// spec is what the runner runs: Deno on the program in dir, with the
// decision's limits (its memory plus Deno's own overhead) and grants plus
// what Deno needs (itself, read-only; the run directory). Deno's own
// permissions still give the code only the decision's grants.
func (c *call) spec(deno, dir, reqPath, respPath string, scope wire.Scope) sandbox.Spec {
	spec := sandbox.Spec{
		Argv: c.argv(deno, dir, reqPath, respPath, scope),
		Dir:  dir,
		Env: []string{
			"HOME=" + filepath.Join(dir, "home"), "DENO_DIR=" + filepath.Join(dir, "deno"), "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1",
			"DENO_NO_PROMPT=1", "LANG=C.UTF-8", "PATH=/usr/bin:/bin",
		},
		Timeout:        time.Duration(scope.Limits.TimeoutS) * time.Second,
		MaxOutputBytes: scope.Limits.MaxOutputBytes,
		// Past the output cap Deno is killed and the call fails (seed
		// 004), rather than its output being cut while it runs on.
		StopAtOutputCap: true,
		Limits:          scope.Limits,
		Scope:           scope,
		PrivateDirs:     []string{dir}, // home, Deno's cache, the program, the bridge fifos
	}
	spec.Limits.MemoryBytes = scope.Limits.MemoryBytes + DenoOverheadBytes
	spec.Scope.FSGrants = append(append([]wire.FSGrant{}, scope.FSGrants...),
		wire.FSGrant{Path: filepath.Dir(deno), Mode: wire.ModeRead},
		wire.FSGrant{Path: dir, Mode: wire.ModeReadWrite})
	return spec
}

// stubs are the typed stubs for this run: the tools the principal may call
// now (the dispatcher's ListTools: the policy's purpose "list"), so the
// code sees exactly what GET /v1/tools.d.ts declares for the same caller.
// Without a lister, or if listing fails, there are none: tools.call still
// works, and every call is decided on its own anyway.
func (c *call) stubs(ctx context.Context, disp tools.Dispatcher) []tsdecl.Stub {
	l, ok := disp.(tools.ToolLister)
	if !ok {
		return nil
	}
	specs, err := l.ListTools(ctx)
	if err != nil {
		c.tool.log.WarnContext(ctx, "coderun: listing the tools for typed stubs failed; only tools.call is offered", "error", err)
		return nil
	}
	return tsdecl.Stubs(specs)
}

// argv is Deno's command line: every permission denied but the decision's.
// --deny-import and --no-remote/--no-npm close the default import hosts
// (an exfiltration channel); --no-config keeps a deno.json in a granted
// directory from changing any of this; the import map (importMap) keeps
// local imports inside the run directory and the grants.
func (c *call) argv(deno, dir, reqPath, respPath string, scope wire.Scope) []string {
	var read, write []string
	for _, g := range scope.FSGrants {
		read = append(read, g.Path)
		if g.Mode == wire.ModeReadWrite {
			write = append(write, g.Path)
		}
	}
	// The bridge: answers are read, requests written.
	read, write = append(read, respPath), append(write, reqPath)
	heapMB := max(scope.Limits.MemoryBytes>>20, 64)
	a := []string{deno, "run",
		"--quiet", "--no-prompt", "--no-remote", "--no-npm", "--no-config", "--no-lock",
		"--import-map=" + filepath.Join(dir, importMapFile),
		"--deny-import", "--deny-run", "--deny-env", "--deny-ffi", "--deny-sys",
		"--v8-flags=--max-old-space-size=" + strconv.FormatInt(heapMB, 10),
		"--allow-read=" + strings.Join(read, ","),
		"--allow-write=" + strings.Join(write, ","),
	}
	switch scope.Network.Posture {
	case wire.PostureAllowlist:
		hosts := c.denoNet
		// Under bubblewrap the way out is the per-call egress proxy
		// (HTTP_PROXY in the call's own network namespace), and Deno 2
		// checks its net permission for the proxy's address too
		// ("Requires net access to 127.0.0.1:3128"). Inside that namespace
		// the address is only the proxy, which enforces the full list.
		// Never for other runners: there it would be the host's port.
		if proxy := backends.ProxyAddrOf(c.tool.runner); proxy != "" && len(hosts) > 0 {
			hosts = append(append([]string{}, hosts...), proxy)
		}
		if len(hosts) > 0 {
			a = append(a, "--allow-net="+strings.Join(hosts, ","))
		}
	case wire.PostureFull:
		a = append(a, "--allow-net")
	}
	// Never the cloud metadata service, whatever the posture. Deno matches
	// the addresses names resolve to and normalizes IPv4-mapped forms, but
	// takes no CIDRs: the NAT64 and IPv4-compatible forms are listed too.
	a = append(a, "--deny-net=169.254.169.254,169.254.170.2,[fd00:ec2::254],"+
		"[64:ff9b::a9fe:a9fe],[64:ff9b::a9fe:aa02],[::a9fe:a9fe],[::a9fe:aa02]")
	return append(a, filepath.Join(dir, "main.js"), reqPath, respPath)
}

// scrub replaces the run directory in Deno's messages so traces read
// "code.ts:3:7", not a gateway temp path.
func scrub(s, dir string) string {
	s = strings.ReplaceAll(s, "file://"+dir+"/", "")
	return strings.ReplaceAll(s, dir+"/", "")
}

// exception finds the uncaught error and its position in the user's file.
func exception(stderr, file string) *Exception {
	var e Exception
	for _, line := range strings.Split(stderr, "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "error: "); ok {
			e.Message = m
			break
		}
	}
	if m := regexp.MustCompile(regexp.QuoteMeta(file) + `:(\d+):(\d+)`).FindStringSubmatch(stderr); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Column, _ = strconv.Atoi(m[2])
	}
	if e.Message == "" && e.Line == 0 {
		return nil
	}
	return &e
}
