package main

import (
	"log/slog"
	"runtime/debug"

	"github.com/portcullis/portcullis/gateway/config"
)

// tuneGC (getenv is os.Getenv but in tests) applies runtime.gc_percent and runtime.memory_limit unless the
// standard GOGC and GOMEMLIMIT variables already set them (the runtime read
// those at start), and logs what is in force.
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
		if limit > 0 {
			debug.SetMemoryLimit(limit)
			limitFrom = "runtime.memory_limit"
		} else {
			limitFrom = "none"
		}
	}
	gc := debug.SetGCPercent(-1) // read the value in force...
	debug.SetGCPercent(gc)       // ...and put it back
	log.Info("garbage collector", "gc_percent", gc, "gc_percent_from", gcFrom,
		"memory_limit_bytes", debug.SetMemoryLimit(-1), "memory_limit_from", limitFrom)
	return nil
}
