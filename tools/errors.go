package tools

import (
	"errors"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// RunnerFailure is the contract error for a runner that could not start
// what (a program, Deno) at all, the one mapping Exec and code.run share:
//   - the runner's own contract error (sandbox_unavailable from a refuser,
//     too_large ...) as it is;
//   - a sandbox that could not be built safely (sandbox.ErrUnsafePath) as
//     sandbox_violation, with the sandbox's explanation, which is written
//     for the caller (a grant that changed, a symlink where a file must be
//     hidden, a tree over the search budget: what to change);
//   - anything else as backend_unavailable, its cause wrapped for the log
//     and never in the message (it names host paths, helper binaries,
//     kernel errors).
func RunnerFailure(err error, backend, what string) *wire.Error {
	var we *wire.Error
	switch {
	case errors.As(err, &we):
		return &wire.Error{Code: we.Code, Message: we.Message, Details: map[string]any{}, Op: backend + ": start", Err: err}
	case errors.Is(err, sandbox.ErrUnsafePath):
		return wire.Wrap(wire.CodeSandboxViolation, backend+": build sandbox", err, "the sandbox for %s could not be built safely: %v", what, err)
	}
	return wire.Wrap(wire.CodeBackendUnavailable, backend+": start", err, "the %s backend could not start %s", backend, what)
}
