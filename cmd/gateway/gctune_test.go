package main

import (
	"bytes"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
)

// TestTuneGC: the configured values take effect unless GOGC / GOMEMLIMIT
// are set, and the log line says which is in force and why. It changes
// process-wide runtime settings, so it is not parallel and restores them.
func TestTuneGC(t *testing.T) {
	oldGC, oldLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(oldGC)
		debug.SetMemoryLimit(oldLimit)
	})
	cases := []struct {
		name      string
		rt        config.Runtime
		env       map[string]string
		wantGC    int
		wantLimit int64
		wantLog   string
	}{
		{"configured", config.Runtime{GCPercent: 400, MemoryLimit: "512MiB"}, nil, 400, 512 << 20, `"memory_limit_from":"runtime.memory_limit"`},
		{"no limit", config.Runtime{GCPercent: 250}, nil, 250, -1, `"memory_limit_from":"none"`},
		{"GOGC wins", config.Runtime{GCPercent: 400}, map[string]string{"GOGC": "100"}, 100, -1, `"gc_percent_from":"GOGC"`},
		{"GOMEMLIMIT wins", config.Runtime{GCPercent: 400, MemoryLimit: "1GiB"}, map[string]string{"GOMEMLIMIT": "64MiB"}, 400, -1, `"memory_limit_from":"GOMEMLIMIT"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			debug.SetMemoryLimit(noLimit)
			var buf bytes.Buffer
			if err := tuneGC(tc.rt, func(k string) string { return tc.env[k] }, slog.New(slog.NewJSONHandler(&buf, nil))); err != nil {
				t.Fatal(err)
			}
			gc := debug.SetGCPercent(100)
			limit := debug.SetMemoryLimit(noLimit)
			if gc != tc.wantGC {
				t.Errorf("gc percent = %d, want %d", gc, tc.wantGC)
			}
			if want := tc.wantLimit; (want == -1 && limit != noLimit) || (want != -1 && limit != want) {
				t.Errorf("memory limit = %d, want %d", limit, want)
			}
			if !strings.Contains(buf.String(), tc.wantLog) {
				t.Errorf("log %s lacks %s", buf.String(), tc.wantLog)
			}
		})
	}
}

// noLimit is the runtime's "no memory limit" value (math.MaxInt64).
const noLimit = int64(^uint64(0) >> 1)
