// Package bwrap runs a sandbox.Spec inside bubblewrap: an allowlisted mount
// layout (system directories read-only, the grants and nothing else, secrets
// inside the grants hidden), its own user, pid, ipc, uts and cgroup
// namespaces as uid 65534 with no capabilities, an empty network namespace
// (or one whose only door is a per-call egress proxy), a seccomp filter,
// rlimits and a per-call pids cgroup.
//
// It reuses the process runner for everything around the sandbox (the rlimit
// re-exec helper, process-group kill on timeout, bounded UTF-8 output): the
// helper sets the limits and execs bwrap instead of the program, so the
// limits survive into the sandbox.
package bwrap

import (
	"log/slog"

	"github.com/portcullis/portcullis/backends/cgroup"
	"github.com/portcullis/portcullis/backends/egress"
	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// Name is the backend name recorded in evidence.
const Name = "bwrap"

// SandboxUID is the uid and gid the program runs as inside the sandbox.
const SandboxUID = 65534

// ProxyAddr is where the per-call egress proxy listens inside the call's
// network namespace (posture allowlist); HTTP_PROXY and friends point here.
const ProxyAddr = "127.0.0.1:3128"

// Options configure a Runner.
type Options struct {
	// Logger receives setup failures; never output or environment values.
	// Default: slog.Default().
	Logger *slog.Logger
	// BwrapPath is the bubblewrap binary. Default: /usr/bin/bwrap if it
	// exists, else "bwrap" looked up in PATH once, at New.
	BwrapPath string
	// HelperPath is the binary re-executed as the rlimit helper (it must
	// call process.MaybeRunHelper first thing in main). Default:
	// /proc/self/exe.
	HelperPath string
	// PidsMax caps the processes and threads of one call through a pids
	// cgroup (RLIMIT_NPROC is per uid and does not bind a sandbox that is
	// root outside its user namespace). Default 1024; negative: no cgroup.
	PidsMax int
	// RequirePidsLimit makes a call fail when the pids cgroup cannot be
	// created, instead of running with only the timeout to stop a fork
	// bomb.
	RequirePidsLimit bool
	// Profile tunes the search of the granted trees for secrets and
	// autorun files (its budget, the trees skipped).
	Profile sandbox.ProfileOptions
	// Resolver resolves allowed names for the egress proxy. Default: the
	// system resolver.
	Resolver egress.Resolver
}

// Runner executes specs inside bubblewrap. It is safe for concurrent use.
type Runner struct {
	log     *slog.Logger
	bwrap   string
	opts    Options
	proc    *process.Runner
	layout  layout
	cgroups *cgroup.Parent
	// cache keeps the granted trees searched and watched between calls.
	cache *sandbox.Cache
	// frz stops the calls that could write to a tree while another call's
	// sandbox over it is being built.
	frz *freezer
	// sync tells when a sandbox's mounts are in place.
	sync syncWatcher
}

// Name is the backend name recorded in the enforced scope and the receipt.
func (r *Runner) Name() string { return Name }

// ProxyAddr is where the call's egress proxy listens inside its network
// namespace (backends.EgressProxy).
func (r *Runner) ProxyAddr() string { return ProxyAddr }

// MemoryLimit is how this runner bounds a call's memory_bytes:
// wire.MemoryLimitCgroup when calls get their own memory cgroup, else
// wire.MemoryLimitRlimitData. Exec records it in the enforced scope.
func (r *Runner) MemoryLimit() string {
	if r.cgroups.Memory() {
		return wire.MemoryLimitCgroup
	}
	return wire.MemoryLimitRlimitData
}
