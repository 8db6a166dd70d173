package sandbox

import (
	"strings"

	"github.com/portcullis/portcullis/wire"
)

// AutorunRefusal is the error a tool reports for a run the autorun guard
// had to clean up after (nil when changes is empty): fs_denied, naming each
// path and where it was moved, with the list in details.changes. The
// program ran; its data stays in the answer.
func AutorunRefusal(changes []AutorunChange) *wire.Error {
	if len(changes) == 0 {
		return nil
	}
	var b strings.Builder
	for i, ch := range changes {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(ch.Path)
		b.WriteString(" (")
		b.WriteString(ch.Reason)
		if ch.QuarantinedAs != "" {
			b.WriteString(", moved to " + ch.QuarantinedAs)
		} else {
			b.WriteString(", could not be moved aside: " + ch.Error)
		}
		b.WriteString(")")
	}
	return &wire.Error{Code: wire.CodeFSDenied,
		Message: "the autorun guard refused what this run wrote: it created or replaced files that run later for someone else " +
			"(shell start-up files, git hooks or config, CI or editor task files) inside a read-write grant, and they were moved aside: " +
			b.String() + ". A policy may lift the guard for a grant with allow_autorun",
		Details: map[string]any{"changes": changes}}
}
