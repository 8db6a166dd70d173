//go:build !darwin

package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/portcullis/portcullis/backends"
)

// osSandbox is what sandbox.backend auto tries: bubblewrap (Linux; its
// probe fails elsewhere).
const osSandbox = "bwrap"

func openSeatbelt(context.Context, *slog.Logger) (backends.Runner, error) {
	return nil, fmt.Errorf("seatbelt is the macOS sandbox; this is %s", runtime.GOOS)
}
