package exectool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// A program's memory (its address space, or its cgroup) when the policy
// leaves memory_bytes at zero, and the ceiling a policy value is clamped to.
// The other limits' defaults and ceilings are every program's
// (tools.ProgramLimits).
const (
	DefaultMemoryBytes = 1 << 30
	MaxMemoryBytes     = 64 << 30
)

// BasePath is the child's PATH. Exec itself never searches it; it is there
// for the programs the child runs.
const BasePath = "/usr/local/bin:/usr/bin:/bin"

// call is one prepared Exec request.
type call struct {
	tool *Tool
	in   *input

	// Set by Enforce: the environment minus HOME, which is made per run.
	enforced bool
	env      map[string]string

	// The path facts of the arguments, resolved once (resolvedPaths).
	pathsOnce sync.Once
	paths     []argPath
}

var _ tools.Call = (*call)(nil)

// Args is the caller's input as decoded by encoding/json into any: numbers
// are float64, arrays []any, objects map[string]any.
func (c *call) Args() map[string]any { return c.in.args }

// Resolved holds the real paths the program will really touch, for policy
// rules to match: argv0 (real path), argv0_base (its base name), argv (with
// argv[0] replaced by the real path), cwd (real path or ""), env_names
// (sorted names of the caller's env), and paths: aligned with argv, for
// each operand and each "--opt=value" the path it would name
// ({"path": real path, "value": true for an option's value}; path "" for
// a relative one without cwd), null for argv[0] and other options. Lists
// are []any so they look the same as JSON-decoded input.
func (c *call) Resolved() map[string]any {
	argv := make([]any, len(c.in.argv))
	argv[0] = c.in.argv0
	for i, a := range c.in.argv[1:] {
		argv[i+1] = a
	}
	names := []any{}
	for _, k := range sortedKeys(c.in.env) {
		names = append(names, k)
	}
	return map[string]any{
		"argv0":      c.in.argv0,
		"argv0_base": filepath.Base(c.in.argv0),
		"argv":       argv,
		"cwd":        c.in.cwd,
		"env_names":  names,
		"paths":      c.pathFacts(),
	}
}

// Enforce holds argv[0] and cwd against the decision's fs grants (any mode:
// running a program needs only read access to it) and computes the enforced
// scope.
//
// Network: the posture is recorded as the policy gave it; confining it is
// the runner's job, and the process runner cannot confine the network at
// all, which the scope's Backend ("process") makes visible in evidence.
func (c *call) Enforce(ctx context.Context, d wire.Decision) (wire.Scope, error) {
	if !d.Allow {
		// The pipeline never enforces a denial; refusing here keeps a
		// wiring mistake from running a denied call.
		return wire.Scope{}, wire.Errorf(wire.CodePermissionDenied, "the policy denied this call")
	}
	// A path outside every grant gets one answer whether or not it exists
	// and whatever its links point to: the message names the path as
	// given, never its resolution. Only inside the grants, which the
	// caller may read anyway, is it said what is wrong with it.
	grants := c.tool.resolveGrants(ctx, d.FSGrants)
	if !withinAny(c.in.argv0, grants) {
		return wire.Scope{}, &wire.Error{
			Code:    wire.CodeFSDenied,
			Message: fmt.Sprintf("argv[0] %q is outside the granted paths; run a program inside %s", c.in.argv[0], grantList(grants)),
			Details: map[string]any{"field": "argv[0]", "path": c.in.argv[0]},
		}
	}
	if err := checkExecutable(c.in.argv0, c.in.argv[0]); err != nil {
		return wire.Scope{}, err
	}
	if c.in.cwd != "" && !withinAny(c.in.cwd, grants) {
		return wire.Scope{}, &wire.Error{
			Code:    wire.CodeFSDenied,
			Message: fmt.Sprintf("cwd %q is outside the granted paths; use a directory inside %s", c.in.cwdGiven, grantList(grants)),
			Details: map[string]any{"field": "cwd", "path": c.in.cwdGiven},
		}
	}
	if c.in.cwd != "" {
		if err := checkDir(c.in.cwd, c.in.cwdGiven); err != nil {
			return wire.Scope{}, err
		}
	}
	deny := tools.DenyPaths(d.FSDeny)
	plan, _, err := c.enforcePlan(d.Exec, grants, deny)
	if err != nil {
		return wire.Scope{}, err
	}
	limits, err := effectiveLimits(c.in, d.Limits)
	if err != nil {
		return wire.Scope{}, err
	}
	env, err := c.tool.composeEnv(d.Env, c.in.env)
	if err != nil {
		return wire.Scope{}, err
	}
	network := d.Network
	if network.Posture == "" {
		network.Posture = wire.PostureOff
	}
	if network.Allow == nil {
		network.Allow = []string{}
	}
	names := append(sortedKeys(env), "HOME")
	slices.Sort(names)
	c.env = env
	c.enforced = true
	return wire.Scope{
		FSGrants:    grants,
		Network:     network,
		EnvNames:    names,
		Limits:      limits,
		Backend:     c.tool.runner.Name(),
		FSDeny:      deny,
		Exec:        plan,
		MemoryLimit: backends.MemoryLimitOf(c.tool.runner),
	}, nil
}

// resolveGrants returns the grants with their paths resolved to real paths.
// A grant whose path does not exist, is not absolute or has an unknown mode
// grants nothing and is left out.
func (t *Tool) resolveGrants(ctx context.Context, in []wire.FSGrant) []wire.FSGrant {
	out := []wire.FSGrant{}
	for _, g := range in {
		if !filepath.IsAbs(g.Path) || (g.Mode != wire.ModeRead && g.Mode != wire.ModeReadWrite) {
			t.log.WarnContext(ctx, "exectool: ignoring malformed fs grant", "path", g.Path, "mode", g.Mode)
			continue
		}
		real, err := filepath.EvalSymlinks(g.Path)
		if err != nil {
			continue
		}
		g.Path = filepath.Clean(real)
		out = append(out, g)
	}
	return out
}

// within reports whether path lies in dir, comparing whole path segments:
// "/usr" contains "/usr/bin" but not "/usrx". Both must be clean and absolute.
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

func withinAny(path string, grants []wire.FSGrant) bool {
	for _, g := range grants {
		if within(path, g.Path) {
			return true
		}
	}
	return false
}

func grantList(grants []wire.FSGrant) string {
	if len(grants) == 0 {
		return "the grants (the policy granted none)"
	}
	paths := make([]string, len(grants))
	for i, g := range grants {
		paths[i] = g.Path
	}
	return strings.Join(paths, ", ")
}

// effectiveLimits is tools.ProgramLimits with Exec's memory bounds.
func effectiveLimits(in *input, p wire.Limits) (wire.Limits, error) {
	return tools.ProgramLimits(wire.Limits{TimeoutS: in.timeoutS, MaxOutputBytes: in.maxOutputBytes}, p, DefaultMemoryBytes, MaxMemoryBytes)
}

// composeEnv builds the child's environment, HOME aside, in contract order:
// the fixed base; the decision's env.pass names copied from the gateway's
// environment, except secret-shaped names, which never pass whatever the
// policy says; the decision's env.set values; the caller's env, which may
// add variables but not replace one the decision sets (refused).
func (t *Tool) composeEnv(p wire.EnvPolicy, caller map[string]string) (map[string]string, error) {
	env := map[string]string{
		"PATH":   BasePath,
		"LANG":   "C.UTF-8",
		"LC_ALL": "C.UTF-8",
		"USER":   t.user,
		"TERM":   "dumb",
		"SHELL":  "/bin/sh",
	}
	if len(p.Pass) > 0 {
		gateway := map[string]string{}
		for _, kv := range t.environ() {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				if _, seen := gateway[k]; !seen { // first wins, like getenv
					gateway[k] = v
				}
			}
		}
		for _, name := range p.Pass {
			if wire.SecretName(name) || name == "HOME" {
				continue
			}
			if v, ok := gateway[name]; ok && validEnvName(name) {
				env[name] = v
			}
		}
	}
	for _, k := range sortedKeys(p.Set) {
		if !validEnvName(k) || strings.IndexByte(p.Set[k], 0) >= 0 {
			return nil, wire.Errorf(wire.CodeInternal, "the policy's env.set names %q, which is not a valid variable name or has a NUL in its value", k)
		}
		if k == "HOME" {
			continue
		}
		env[k] = p.Set[k]
	}
	for _, k := range sortedKeys(caller) {
		if k == "HOME" {
			continue
		}
		// What the policy sets is forced (a profile's hardening, such as
		// GOTOOLCHAIN=local): the caller may not override it.
		if _, forced := p.Set[k]; forced {
			return nil, &wire.Error{
				Code:    wire.CodePermissionDenied,
				Message: fmt.Sprintf("env %s is set by the policy for this call and cannot be overridden; leave it out of env", k),
				Details: map[string]any{"field": "env." + k},
			}
		}
		env[k] = caller[k]
	}
	return env, nil
}

func validEnvName(k string) bool {
	return k != "" && !strings.ContainsAny(k, "=\x00")
}

// Data is Exec's output.data (wire.ExecData). OutputSHA256 is over its JSON
// encoding.
type Data = wire.ExecData

// recheck holds the real paths again at run time: Enforce checked them
// against the grants, and a link swapped in since is refused.
func (c *call) recheck(scope wire.Scope) *wire.Error {
	if real, err := filepath.EvalSymlinks(c.in.argv0); err != nil || real != c.in.argv0 || !withinAny(real, scope.FSGrants) {
		return wire.Errorf(wire.CodeSandboxViolation, "argv[0] %s changed after it was checked (a symlink was swapped in or it was removed)", c.in.argv0)
	}
	if c.in.cwd != "" {
		if real, err := filepath.EvalSymlinks(c.in.cwd); err != nil || real != c.in.cwd || !withinAny(real, scope.FSGrants) {
			return wire.Errorf(wire.CodeSandboxViolation, "cwd %s changed after it was checked (a symlink was swapped in or it was removed)", c.in.cwd)
		}
	}
	if err := c.recheckPaths(scope.Exec); err != nil {
		var we *wire.Error
		errors.As(err, &we)
		return wire.Errorf(we.Code, "%s", we.Message)
	}
	return nil
}

// spec is what the runner runs: the program with exactly the scope's
// environment (its names are authoritative: nothing beyond them reaches
// the child), a private HOME, the scope's limits and exec restriction.
func (c *call) spec(scope wire.Scope, home string) sandbox.Spec {
	env := make([]string, 0, len(scope.EnvNames))
	for _, name := range scope.EnvNames {
		if name == "HOME" {
			env = append(env, "HOME="+home)
		} else if v, ok := c.env[name]; ok {
			env = append(env, name+"="+v)
		}
	}
	spec := sandbox.Spec{
		Argv:           c.runArgv(scope.Exec, home),
		Dir:            c.in.cwd,
		Env:            env,
		Timeout:        time.Duration(scope.Limits.TimeoutS) * time.Second,
		MaxOutputBytes: scope.Limits.MaxOutputBytes,
		Limits:         scope.Limits,
		Scope:          scope,
		PrivateDirs:    []string{home},
	}
	if scope.Exec != nil && scope.Exec.ExecRestrict {
		spec.ExecAllow = append([]string{}, scope.Exec.ExecAllow...) // never nil: nil is no restriction
	}
	return spec
}

// Run executes the call within scope. HOME is a fresh private directory per
// call, removed afterwards, so programs that write dotfiles neither see nor
// leave the gateway user's. Outcomes:
//   - exit 0: success, status succeeded;
//   - non-zero exit or death by a signal: success false, status failed,
//     output.error null: the program ran, and exit_code, signal and stderr
//     in data say how it ended;
//   - timeout: status timed_out, error code timeout, data present;
//   - stopped because ctx was done: status error, backend_unavailable,
//     data present;
//   - the runner could not start it: status error, backend_unavailable,
//     data null.
func (c *call) Run(ctx context.Context, scope wire.Scope) tools.Result {
	t := c.tool
	backend := t.runner.Name()
	failWith := func(we *wire.Error) tools.Result {
		r := tools.Result{
			Output:  wire.ToolOutput{Error: we, Metadata: map[string]any{"backend": backend}},
			Status:  wire.StatusError,
			Backend: backend,
		}
		r.SetDuration(0)
		return r
	}
	fail := func(code wire.Code, format string, a ...any) tools.Result {
		return failWith(wire.Errorf(code, format, a...))
	}
	if !c.enforced {
		return fail(wire.CodeInternal, "Exec was run before its scope was enforced")
	}
	if scope.Limits.TimeoutS <= 0 || scope.Limits.MaxOutputBytes <= 0 {
		return fail(wire.CodeInternal, "the enforced scope has no timeout or output cap")
	}
	if we := c.recheck(scope); we != nil {
		return failWith(we)
	}

	home, err := os.MkdirTemp("", "portcullis-home-")
	if err != nil {
		return failWith(wire.Wrap(wire.CodeBackendUnavailable, "exec: private HOME", err, "could not create the private HOME"))
	}
	defer func() {
		if err := os.RemoveAll(home); err != nil {
			t.log.WarnContext(ctx, "exectool: removing private HOME", "dir", home, "error", err)
		}
	}()

	res, err := t.runner.Run(ctx, c.spec(scope, home))
	if err != nil {
		t.log.ErrorContext(ctx, "exectool: runner could not start the program", "argv0", c.in.argv0, "backend", backend, "error", err)
		return failWith(tools.RunnerFailure(err, backend, c.in.argv0))
	}

	data := Data{
		ExitCode:        res.ExitCode,
		Stdout:          res.Stdout,
		Stderr:          res.Stderr,
		StdoutTruncated: res.StdoutTruncated,
		StderrTruncated: res.StderrTruncated,
		TimedOut:        res.TimedOut || res.CPULimited(),
		Signal:          res.Signal,
		DurationMS:      res.Duration.Milliseconds(),
	}
	out, we := tools.ProgramResult("exec", data, res, backend, map[string]any{"backend": backend}, data.DurationMS)
	if we != nil {
		return failWith(we)
	}
	switch {
	case res.TimedOut:
		out.Status = wire.StatusTimedOut
		out.Output.Error = wire.Errorf(wire.CodeTimeout, "%s did not finish within %d s and was stopped; raise timeout_s (at most %d, and the policy's limit) or do less per call", c.in.argv0, scope.Limits.TimeoutS, MaxTimeoutS)
	case res.CPULimited():
		out.Status = wire.StatusTimedOut
		out.Output.Error = tools.CPULimitError(c.in.argv0, scope.Limits.CPUSeconds)
	case res.Canceled:
		out.Status = wire.StatusError
		out.Output.Error = wire.Errorf(wire.CodeBackendUnavailable, "%s was stopped because the request was cancelled or the gateway is shutting down", c.in.argv0)
	case res.ExitCode == 0 && res.Signal == nil:
		out.Status = wire.StatusSucceeded
		out.Output.Success = true
	default:
		out.Status = wire.StatusFailed
	}
	out.GuardAutorun(res.Autorun)
	t.log.DebugContext(ctx, "exectool: ran", "argv0", c.in.argv0, "backend", backend, "status", out.Status, "exit_code", res.ExitCode, "duration_ms", data.DurationMS)
	return out
}
