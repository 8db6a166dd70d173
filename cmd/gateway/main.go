// Command gateway is the one Portcullis binary: the server and the operator,
// policy-author and auditor tools around it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/backends/seatbelt"
)

func main() {
	// The Exec process backend re-executes this binary to apply rlimits
	// before the target program starts; that must happen before anything.
	process.MaybeRunHelper()
	// On macOS the seatbelt runner re-executes this binary to set a
	// call's limits before sandbox-exec starts.
	seatbelt.MaybeRunHelper()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
