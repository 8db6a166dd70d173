package main

import (
	"context"
	"log/slog"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/backends/seatbelt"
)

// osSandbox is what sandbox.backend auto tries: Seatbelt on macOS.
const osSandbox = "seatbelt"

// openSeatbelt returns the sandbox-exec runner once its probe passed. Its
// rlimit helper is this binary (main calls seatbelt.MaybeRunHelper).
func openSeatbelt(ctx context.Context, log *slog.Logger) (backends.Runner, error) {
	r, err := seatbelt.New(seatbelt.RunnerOptions{Logger: log})
	if err != nil {
		return nil, err
	}
	if err := r.Probe(ctx); err != nil {
		return nil, err
	}
	return r, nil
}
