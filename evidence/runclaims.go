package evidence

import (
	"context"

	"github.com/google/uuid"
)

// ApprovalActionInterrupted records that an approved call's run never
// reported its end: the process running it died (or lost the store) first.
// Another process (a replica, or this one after a restart) found it and
// ended it with outcome "interrupted"; it was not run again, so whether it
// took effect is unknown.
const ApprovalActionInterrupted = "interrupted"

// RunClaimer is a ControlStore shared by several processes (PostgreSQL).
// The process that approves and runs a parked call holds the call's run
// claim from before the approval is stored until the run's answer is; the
// claim dies with that process (or its connection to the store), so any
// other process that can take the claim of an approved call without an
// answer knows nobody runs it any more. A store without RunClaimer is used
// by one process at a time (SQLite's file lock), whose own bookkeeping
// says which approved calls it runs.
type RunClaimer interface {
	// ClaimRun takes the run claim of the parked call approvalID; ok is
	// false (release nil) when another live process holds it. release
	// gives it up.
	ClaimRun(ctx context.Context, approvalID uuid.UUID) (release func(), ok bool, err error)
}

// RunLister lists approved parked calls that have no answer yet: running
// now, or abandoned by a runner that died. Both stores implement it.
type RunLister interface {
	UnansweredRuns(ctx context.Context, limit int) ([]uuid.UUID, error)
}
