//go:build !linux

package process

import (
	"context"
	"errors"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// HelperExitCode is the exit status of a helper that refused to start the
// target; the helper exists only on Linux.
const HelperExitCode = 125

// MaybeRunHelper does nothing outside Linux: there is no helper mode.
func MaybeRunHelper() {}

// Run refuses outside Linux: the runner's group and rlimit handling is
// Linux-specific, and running without it would not be fail-closed.
func (r *Runner) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	return sandbox.Result{}, errors.New("process: runner is only supported on linux")
}

// RunLaunch refuses outside Linux, like Run.
func (r *Runner) RunLaunch(ctx context.Context, spec sandbox.Spec, l Launch) (sandbox.Result, error) {
	return sandbox.Result{}, errors.New("process: runner is only supported on linux")
}

// MemoryLimit names RLIMIT_DATA outside Linux, where the runner refuses to
// run anything anyway.
func (r *Runner) MemoryLimit() string { return wire.MemoryLimitRlimitData }

// ErrNoLandlock means an exec restriction was asked for where there is no
// Landlock (every system but Linux).
var ErrNoLandlock = errors.New("process: exec restrictions need Landlock, which exists only on Linux")

// LandlockABI is 0 outside Linux.
func LandlockABI() int { return 0 }

// ExecChain is the real path of path alone outside Linux.
func ExecChain(path string) []string { return []string{path} }

// ExecChainVisiting is ExecChain; visit is told path.
func ExecChainVisiting(path string, visit func(p string)) []string {
	if visit != nil {
		visit(path)
	}
	return ExecChain(path)
}
