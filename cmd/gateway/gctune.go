package main

import (
	"log/slog"
	"runtime/debug"

	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
)

// tuneGC applies runtime.gc_percent and runtime.memory_limit unless the
// standard GOGC and GOMEMLIMIT variables already set them (the runtime read
// those at start), and logs what is in force. getenv is os.Getenv but in
// tests.
func tuneGC(rt config.Runtime, getenv func(string) string, log *slog.Logger) error {
	gcFrom, limitFrom := "GOGC", "GOMEMLIMIT"
	if getenv("GOGC") == "" {
		debug.SetGCPercent(rt.GCPercent)
		gcFrom = "runtime.gc_percent"
	}
	if getenv("GOMEMLIMIT") == "" {
		limit, err := rt.MemoryLimitBytes()
		if err != nil {
			return err // Validate refused it already; kept for direct callers
		}
		limitFrom = "none"
		if limit > 0 {
			debug.SetMemoryLimit(limit)
			limitFrom = "runtime.memory_limit"
		}
	}
	// Both setters return the value in force; a negative argument changes nothing
	// for SetMemoryLimit, and SetGCPercent is put straight back.
	gc := debug.SetGCPercent(-1)
	debug.SetGCPercent(gc)
	log.Info("garbage collector", "gc_percent", gc, "gc_percent_from", gcFrom,
		"memory_limit_bytes", debug.SetMemoryLimit(-1), "memory_limit_from", limitFrom)
	return nil
}
