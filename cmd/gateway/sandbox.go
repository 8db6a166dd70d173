package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/backends/bwrap"
	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
	"github.com/portcullis/portcullis/wire"
)

// chooseRunner picks where Exec and code.run run, probing the OS sandbox
// once at start (CONTRACT section 7):
//   - auto: the OS sandbox (bwrap on Linux, seatbelt on macOS) when its
//     probe passes; otherwise every Exec and code.run is refused with
//     sandbox_unavailable, saying why. auto never means the process backend.
//   - bwrap, seatbelt: that sandbox. When it does not work here, serve
//     refuses to start (sandbox.require, the default) or, with require
//     false, starts and refuses Exec and code.run.
//   - process: the process backend, only because it is named. It confines
//     resources, not files or network; under a root gateway programs run
//     as sandbox.run_as (default 65534:65534).
func chooseRunner(ctx context.Context, cfg config.Config, log *slog.Logger) (backends.Runner, error) {
	helper := helperPath(log)
	switch b := cfg.Sandbox.Backend; b {
	case "process":
		return processRunner(cfg, helper, log)
	case "bwrap", "seatbelt":
		r, err := openSandbox(ctx, cfg, b, helper, log)
		if err == nil {
			return r, nil
		}
		if cfg.Sandbox.Require {
			return nil, fmt.Errorf("config: sandbox.backend: %s does not work here: %w (sandbox.require is true; set it false to start anyway with Exec and code.run refused)", b, err)
		}
		reason := fmt.Sprintf("sandbox.backend %s does not work here (%v) and sandbox.require is false", b, err)
		log.Warn("Exec and code.run are refused (sandbox_unavailable): "+reason, "backend", b)
		return unavailableRunner{reason: reason}, nil
	default: // auto
		r, err := openSandbox(ctx, cfg, osSandbox, helper, log)
		if err == nil {
			return r, nil
		}
		reason := fmt.Sprintf("no OS sandbox works here (%s: %v); install bubblewrap, or name `sandbox.backend: process` explicitly to run programs without filesystem or network confinement", osSandbox, err)
		log.Warn("Exec and code.run are refused (sandbox_unavailable): "+reason, "backend", "auto")
		return unavailableRunner{reason: reason}, nil
	}
}

// openSandbox returns the named OS sandbox runner once its probe passed.
func openSandbox(ctx context.Context, cfg config.Config, name, helper string, log *slog.Logger) (backends.Runner, error) {
	switch name {
	case "bwrap":
		r := bwrap.New(bwrap.Options{Logger: log, HelperPath: helper, Profile: sandbox.ProfileOptions{
			MaxScanEntries: cfg.Sandbox.MaskMaxEntries, MaxScanDirs: cfg.Sandbox.MaskMaxDirs}})
		if err := r.Probe(ctx); err != nil {
			return nil, err
		}
		return r, nil
	case "seatbelt":
		return openSeatbelt(ctx, log)
	}
	return nil, fmt.Errorf("unknown sandbox %q", name)
}

// processRunner is the process backend. As root, programs run as
// sandbox.run_as so that they cannot read the gateway's config, keys,
// evidence, environment or memory, nor signal it. As any other user they
// run as that user, which nothing can change: that is said loudly.
func processRunner(cfg config.Config, helper string, log *slog.Logger) (backends.Runner, error) {
	opts := process.Options{Logger: log, HelperPath: helper}
	uid, gid, set, err := cfg.Sandbox.RunAsIDs()
	if err != nil {
		return nil, fmt.Errorf("config: sandbox.run_as: %w", err)
	}
	if euid := os.Geteuid(); euid == 0 {
		opts.User = &process.Credential{UID: uid, GID: gid}
		log.Warn("Exec and code.run run on the process backend (sandbox.backend: process): rlimits, a pids cgroup and a process group only, no filesystem or network confinement; programs run as an unprivileged user",
			"uid", uid, "gid", gid)
	} else {
		if set {
			return nil, fmt.Errorf("config: sandbox.run_as: %s needs the gateway to run as root (it runs as uid %d)", cfg.Sandbox.RunAs, euid)
		}
		log.Warn("Exec and code.run run on the process backend as this gateway's own user: programs can read every file it can (its config, keys and evidence database) and signal it; run the gateway as root (programs then run as sandbox.run_as) or use bwrap",
			"uid", euid)
	}
	return process.New(opts), nil
}

// unavailableRunner stands in when no sandbox may run programs: every Exec
// and code.run is refused with sandbox_unavailable and the reason.
type unavailableRunner struct{ reason string }

func (unavailableRunner) Name() string { return "none" }

func (u unavailableRunner) Run(context.Context, sandbox.Spec) (sandbox.Result, error) {
	reason := u.reason
	if reason == "" {
		reason = "no sandbox backend is available"
	}
	return sandbox.Result{}, wire.Errorf(wire.CodeSandboxUnavailable, "the call was refused rather than run unconfined: %s", reason)
}

// refusal says why Exec and code.run are refused, or "" when they run.
func refusal(r backends.Runner) string {
	if u, ok := r.(unavailableRunner); ok {
		return u.reason
	}
	return ""
}
