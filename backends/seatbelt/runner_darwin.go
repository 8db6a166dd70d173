//go:build darwin

package seatbelt

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// SandboxExec is macOS's Seatbelt launcher.
const SandboxExec = "/usr/bin/sandbox-exec"

// Runner runs specs under sandbox-exec with the profile Generate renders
// from the enforced scope, through the rlimit helper (the gateway binary
// re-executed; its main must call MaybeRunHelper first thing). Posture
// allowlist is refused until the egress proxy is wired for macOS (fail
// closed).
type Runner struct {
	log  *slog.Logger
	x    execer
	opts sandbox.ProfileOptions
}

// RunnerOptions configure a Runner.
type RunnerOptions struct {
	Logger *slog.Logger
	// HelperPath is the binary re-executed as the rlimit helper. Default:
	// this executable.
	HelperPath string
	Profile    sandbox.ProfileOptions
}

// New returns a Runner.
func New(opts RunnerOptions) (*Runner, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	helper := opts.HelperPath
	if helper == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("seatbelt: the helper is this executable: %w", err)
		}
		if helper, err = filepath.EvalSymlinks(self); err != nil {
			return nil, fmt.Errorf("seatbelt: the helper is this executable: %w", err)
		}
	}
	return &Runner{log: log, x: execer{log: log, helper: helper}, opts: opts.Profile}, nil
}

// Name is "seatbelt".
func (r *Runner) Name() string { return Name }

// Probe really runs /usr/bin/true under sandbox-exec with posture off and
// no grants, so a missing or refusing sandbox-exec shows at start, not at
// the first call.
func (r *Runner) Probe(ctx context.Context) error {
	if _, err := os.Stat(SandboxExec); err != nil {
		return fmt.Errorf("seatbelt: %w", err)
	}
	res, err := r.Run(ctx, sandbox.Spec{
		Argv: []string{"/usr/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"},
		Timeout: 20 * time.Second, MaxOutputBytes: 4096,
		Scope: wire.Scope{Network: wire.Network{Posture: wire.PostureOff}},
	})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("seatbelt: /usr/bin/true under sandbox-exec exited %d: %s", res.ExitCode, res.Stderr)
	}
	return nil
}

// Run generates the profile and runs the program under sandbox-exec.
func (r *Runner) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	if len(spec.Argv) == 0 || !filepath.IsAbs(spec.Argv[0]) {
		return sandbox.Result{}, fmt.Errorf("seatbelt: argv %q must start with an absolute path", spec.Argv)
	}
	prof, err := sandbox.BuildProfile(spec, r.opts)
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("seatbelt: %w", err)
	}
	if prof.Network.Posture == wire.PostureAllowlist {
		return sandbox.Result{}, wire.Errorf(wire.CodeBackendUnavailable, "network posture allowlist is not supported by the seatbelt backend (macOS) yet; the call was not run")
	}
	tmp, err := os.MkdirTemp("", "portcullis-sb-")
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("seatbelt: %w", err)
	}
	defer os.RemoveAll(tmp)
	if tmp, err = filepath.EvalSymlinks(tmp); err != nil { // /var -> /private/var: SBPL matches real paths
		return sandbox.Result{}, fmt.Errorf("seatbelt: %w", err)
	}
	sbpl, err := Generate(prof, Options{TempDirs: []string{tmp}})
	if err != nil {
		return sandbox.Result{}, err
	}
	argv := append([]string{SandboxExec, "-p", sbpl, "--"}, spec.Argv...)
	res, err := r.x.run(ctx, spec, argv)
	if err != nil {
		return sandbox.Result{}, err
	}
	res.Profile = &prof
	return res, nil
}
