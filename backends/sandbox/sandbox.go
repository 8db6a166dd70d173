// Package sandbox holds the plain description of one confined process run,
// shared by every runner (process, bwrap, seatbelt) so that the Exec tool can
// build it once from the enforced scope and hand it to whichever runner the
// gateway chose.
package sandbox

import (
	"time"

	"github.com/portcullis/portcullis/wire"
)

// Spec is one program run.
type Spec struct {
	Argv           []string      // argv[0] absolute, already resolved
	Dir            string        // working directory ("" = a fresh temporary one)
	Env            []string      // complete child environment, KEY=VALUE
	Timeout        time.Duration // wall clock
	MaxOutputBytes int           // cap per stream
	Limits         wire.Limits   // cpu_seconds, memory_bytes, fsize_bytes, nofile
	Scope          wire.Scope    // enforced scope: grants and network posture

	// StopAtOutputCap stops the run, as its timeout would, once stdout or
	// stderr passes MaxOutputBytes (Result.OutputCapped), instead of
	// keeping the first MaxOutputBytes and discarding the rest while the
	// program runs on. code.run sets it: a run past its output cap fails.
	StopAtOutputCap bool

	// PrivateDirs are directories the caller created for this run alone
	// (a private HOME, code.run's run directory), never a policy grant. A
	// runner that runs the program as another user than the gateway (the
	// process backend under a root gateway) hands them to that user so
	// the program can use them.
	PrivateDirs []string

	// ExecAllow, when not nil, are the only files (and directories, whose
	// files) the program and everything it starts may execute; it must
	// include the program itself and its ELF interpreter
	// (process.ExecChain). Runners enforce it with Landlock and refuse to
	// run the call where they cannot. Nil: no restriction.
	ExecAllow []string
}

// Result is how the run ended.
type Result struct {
	ExitCode        int
	Stdout          string // UTF-8, invalid bytes replaced, at most MaxOutputBytes
	Stderr          string
	StdoutTruncated bool
	StderrTruncated bool
	TimedOut        bool
	// OutputCapped says the run was stopped because a stream passed
	// MaxOutputBytes (Spec.StopAtOutputCap).
	OutputCapped bool
	// Canceled says the run was stopped because its context was done (the
	// client went away or the gateway is shutting down), not by its timeout.
	Canceled bool
	Signal   *string // e.g. "SIGKILL" when the process died of a signal
	Duration time.Duration
	// Network attributes the call's proxied connections (posture
	// allowlist): how many, and which hosts were allowed or refused. Nil
	// when the runner does not proxy (posture off or full, or an
	// unconfined runner).
	Network *NetworkStats `json:"network,omitempty"`
	// Profile is the OS sandbox the program really ran in, for evidence.
	// Nil for runners that do not confine (process).
	Profile *Profile `json:"profile,omitempty"`
	// Autorun lists what the autorun guard found the run created or
	// replaced (and moved aside): files that run later for someone else,
	// inside read-write grants without allow_autorun. The caller reports
	// the call as refused (fs_denied) when it is not empty.
	Autorun []AutorunChange `json:"autorun,omitempty"`
}

// NetworkStats is what one call's egress proxy saw; it is wire vocabulary
// because the outcome event records it.
type NetworkStats = wire.NetworkStats

// CPULimited says the run died of SIGXCPU: it used the CPU time its
// cpu_seconds limit allowed (RLIMIT_CPU's soft limit). All of a process's
// threads count, so a multi-threaded program (Deno) can reach the limit
// before the wall-clock timeout.
func (r Result) CPULimited() bool {
	return !r.TimedOut && r.Signal != nil && *r.Signal == "SIGXCPU"
}
