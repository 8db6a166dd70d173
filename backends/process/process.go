// Package process runs a sandbox.Spec as a plain child process with rlimits,
// its own session and process group, a wall-clock timeout and bounded output.
// It confines resources, not the filesystem or the network: it is the
// fallback when bubblewrap is unavailable, and the gateway records
// Backend "process" so evidence says the call ran unconfined.
//
// Every run also gets its own pids cgroup when this process can create one
// (a pids hierarchy, v1 or v2, writable here; probed once, at the first
// run): the helper moves itself into it before it sets the limits and execs
// the program, so nothing the program starts is ever outside it. pids.max
// bounds a fork bomb, and when the call ends (program exit, timeout,
// cancellation) everything still in the cgroup is killed, including
// descendants that left the process group or session (setsid, setpgid). A
// PID namespace would also catch those, but it makes the program PID 1,
// which ignores SIGTERM, SIGXCPU and SIGXFSZ unless it installs handlers.
//
// Without a usable pids hierarchy (logged once per Runner) the runner falls
// back to the process group alone: a descendant that leaves the group may
// then outlive the call, and the run still returns on time only because
// output is read for at most half a second after the program exits.
//
// Exit code convention of sandbox.Result: the program's exit status when it
// exited; -1 when it was killed by a signal (Signal then names it, e.g.
// "SIGKILL", "SIGXCPU", "SIGXFSZ").
package process

import (
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/portcullis/portcullis/backends/cgroup"
)

// Name is the runner's backend name as recorded in evidence.
const Name = "process"

// Defaults for how a run is stopped.
const (
	// TermGrace is how long the process group has between SIGTERM and
	// SIGKILL when the timeout fires or the context is done.
	TermGrace = time.Second
	// drainGrace bounds how long output is still read after the program's
	// group was killed: a process that escaped the group may hold the pipes.
	drainGrace = 500 * time.Millisecond
	// DefaultPidsMax is Options.PidsMax when it is zero.
	DefaultPidsMax = 1024
	// cgroupKillTimeout bounds killing what is left in a run's cgroup.
	cgroupKillTimeout = 2 * time.Second
)

// Options configure a Runner.
type Options struct {
	// Logger receives start failures and helper refusals; never output or
	// environment values. Default: slog.Default().
	Logger *slog.Logger
	// HelperPath is the binary re-executed as the rlimit helper; it must
	// call MaybeRunHelper first thing in main. Default: /proc/self/exe.
	HelperPath string
	// User, when set, is who the program runs as: the helper, started as
	// root, joins the call cgroup and then drops to it for good (no
	// supplementary groups, no_new_privs) before it sets the limits and
	// execs. The gateway sets it when it runs as root, so that programs on
	// this backend cannot read its config, keys, evidence or memory, nor
	// signal it. Needs root (CAP_SETUID, CAP_SETGID). The runner also
	// hands the run's private directories (Spec.PrivateDirs and its own
	// working directory) to this user. Nil: programs run as the gateway.
	User *Credential
	// PidsMax caps the tasks (processes and threads) of one run through its
	// pids cgroup. It must leave room for the helper's own Go threads,
	// which are in the cgroup until the exec. Default 1024; negative: no
	// cgroup, process-group containment only.
	PidsMax int
}

// Credential is a numeric user and group, never root.
type Credential struct {
	UID, GID uint32
}

// Runner executes specs as plain processes. It is safe for concurrent use.
type Runner struct {
	log    *slog.Logger
	helper string
	user   *Credential
	// noClamp makes the runner pass limits as given instead of clamping
	// them to the inherited hard limits; tests use it to provoke a helper
	// refusal.
	noClamp bool

	pidsMax  int
	cgOnce   sync.Once
	cgParent *cgroup.Parent // nil: no pids hierarchy, group kill only
	// testAfterNewCall, when set, sees each call cgroup right after it is
	// created; tests use it to make the helper's join fail.
	testAfterNewCall func(*cgroup.Call)
}

// New returns a Runner.
func New(opts Options) *Runner {
	r := &Runner{log: opts.Logger, helper: opts.HelperPath, pidsMax: opts.PidsMax, user: opts.User}
	if r.pidsMax == 0 {
		r.pidsMax = DefaultPidsMax
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.helper == "" {
		r.helper = "/proc/self/exe"
	}
	return r
}

// Name is the backend name recorded in the enforced scope and the receipt.
func (r *Runner) Name() string { return Name }

// Launch lets a runner that wraps the program in a sandbox launcher (bwrap)
// reuse this runner's rlimit helper, process-group handling, timeout and
// bounded output capture instead of copying them: the helper sets the
// spec's limits, then execs Launch.Argv in place of spec.Argv, and the
// limits survive that exec into the launcher and everything it starts.
type Launch struct {
	// Argv is what the helper execs after setting the limits; argv[0]
	// absolute. Empty: spec.Argv.
	Argv []string
	// ExtraFiles are inherited by the launcher as fds 4, 5, ... in order
	// (fd 3 is the helper's status pipe, closed before the exec). RunLaunch
	// closes them once the helper has started or failed to start, so that
	// pipes whose other end the caller reads reach EOF.
	ExtraFiles []*os.File
	// OnThread runs on the locked OS thread that starts and waits for the
	// helper, just before the start, so a runner can move that thread into
	// a namespace (a per-call network namespace) that the helper inherits.
	// Its error fails the run before anything starts. When set, the thread
	// is never returned to the scheduler: it exits with its goroutine.
	OnThread func() error
	// Direct execs Argv itself, without the rlimit helper: the caller
	// applies the limits another way that leaves no window (bwrap: prlimit
	// on the sandbox's first process while bwrap holds it on --block-fd,
	// which saves the helper's Go start-up on every call). ExtraFiles then
	// start at fd 3. No call cgroup is made either: only the helper could
	// join it before the exec, and the caller has its own (bwrap moves the
	// held child into one).
	Direct bool
	// Started, when set, is called once with the helper's pid right after
	// it started, before output is read.
	Started func(pid int)
}
