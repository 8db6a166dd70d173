//go:build darwin

package seatbelt

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// Runner runs specs under sandbox-exec. Posture allowlist is refused until
// the egress proxy is wired for macOS (fail closed).
type Runner struct {
	log  *slog.Logger
	proc *process.Runner
	opts sandbox.ProfileOptions
}

// New returns a Runner.
func New(log *slog.Logger, opts sandbox.ProfileOptions) *Runner {
	if log == nil {
		log = slog.Default()
	}
	return &Runner{log: log, proc: process.New(process.Options{Logger: log}), opts: opts}
}

// Name is "seatbelt".
func (r *Runner) Name() string { return Name }

// Run generates the profile and runs the program under sandbox-exec,
// through the process runner (rlimits, group kill, bounded output).
func (r *Runner) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	prof, err := sandbox.BuildProfile(spec, r.opts)
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("seatbelt: %w", err)
	}
	if prof.Network.Posture == wire.PostureAllowlist {
		return sandbox.Result{}, fmt.Errorf("seatbelt: posture allowlist is not supported on macOS yet")
	}
	tmp, err := os.MkdirTemp("", "portcullis-sb-")
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("seatbelt: %w", err)
	}
	defer os.RemoveAll(tmp)
	sbpl, err := Generate(prof, Options{TempDirs: []string{tmp}})
	if err != nil {
		return sandbox.Result{}, err
	}
	argv := append([]string{"/usr/bin/sandbox-exec", "-p", sbpl, "--"}, spec.Argv...)
	res, err := r.proc.RunLaunch(ctx, spec, process.Launch{Argv: argv})
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("seatbelt: %w", err)
	}
	res.Profile = &prof
	return res, nil
}
