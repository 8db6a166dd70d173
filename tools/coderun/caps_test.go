package coderun

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/wire"
)

// denoAlive reports the processes whose command line names the run
// directory the code wrote to its marker file.
func denoAlive(t *testing.T, marker string) []string {
	t.Helper()
	b, err := os.ReadFile(marker)
	if err != nil {
		t.Fatalf("the code did not write its run directory: %v", err)
	}
	dir := strings.TrimSuffix(strings.TrimPrefix(string(b), "file://"), "/code.ts")
	if !strings.Contains(dir, "portcullis-coderun-") {
		t.Fatalf("marker %q names no run directory", b)
	}
	var alive []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if cmd, err := os.ReadFile(p); err == nil && strings.Contains(string(cmd), dir) {
			alive = append(alive, p)
		}
	}
	return alive
}

// TestCapsStopTheRun: past the output cap, and past the tool-call budget,
// the run is killed (Deno gone at once, not at the timeout), the call
// fails with too_large naming the limit, and the counters say what
// happened (seed 004; issue #20).
func TestCapsStopTheRun(t *testing.T) {
	eachRunner(t, func(t *testing.T, r backends.Runner, deno string) {
		for _, tc := range []struct {
			name, code  string
			field       string
			count, left int // tool calls made, and at least this many refused
		}{
			{name: "stdout", field: "max_output_bytes", code: `for (;;) console.log("x".repeat(100));`},
			{name: "stderr", field: "max_output_bytes", code: `for (;;) console.error("x".repeat(100));`},
			{name: "one big write", field: "max_output_bytes", code: `console.log("x".repeat(5000)); for (;;) {}`},
			{name: "tool-call budget", field: "tool_calls", count: 3, left: 1, code: `
for (let i = 0; i < 10; i++) await tools.call("fs.read", {n: i});
console.log("AFTER THE BUDGET");
for (;;) {}`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				marker := filepath.Join(e.work, "rundir")
				code := `Deno.writeTextFileSync(` + "`" + marker + "`" + `, import.meta.url);` + "\n" + tc.code
				disp := &fakeDispatcher{}
				tool := New(Options{Runner: r, Deno: deno, MaxToolCalls: 3})
				start := time.Now()
				res, data := exec(t, tool, e.decision(), disp, map[string]any{"code": code, "timeout_s": 60, "max_output_bytes": 1024})
				took := time.Since(start)
				we := res.Output.Error
				if res.Output.Success || we == nil || we.Code != wire.CodeTooLarge || we.Details["field"] != tc.field || res.Status != wire.StatusFailed {
					t.Fatalf("status %s error %+v\n%s", res.Status, we, data.Stderr)
				}
				if took > 20*time.Second {
					t.Errorf("took %s: the run was not stopped at the cap", took)
				}
				if alive := denoAlive(t, marker); len(alive) > 0 {
					t.Errorf("Deno still running after the call returned: %v", alive)
				}
				if len(data.Output) > 1024 || len(data.Stderr) > 1024 || strings.Contains(data.Output, "AFTER") {
					t.Errorf("output %d bytes, stderr %d bytes: %.80q", len(data.Output), len(data.Stderr), data.Output)
				}
				if data.ToolCalls.Count != tc.count || data.ToolCalls.Refused < tc.left || len(disp.calls) != tc.count {
					t.Errorf("tool_calls %+v, dispatched %d", data.ToolCalls, len(disp.calls))
				}
				if string(data.Result) != "null" {
					t.Errorf("result %s", data.Result)
				}
			})
		}
	})
}

// TestResultOverTheCapFails: an exported result larger than
// max_output_bytes fails the call rather than vanishing from a success.
func TestResultOverTheCapFails(t *testing.T) {
	t.Parallel()
	deno := denoPath(t)
	e := newEnv(t)
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, data := exec(t, New(Options{Runner: r, Deno: deno}), e.decision(), nil, map[string]any{"code": `export const result = "r".repeat(5000);`, "max_output_bytes": 1024})
			if we := res.Output.Error; res.Output.Success || we == nil || we.Code != wire.CodeTooLarge || we.Details["field"] != "result" || !data.ResultTruncated {
				t.Fatalf("status %s error %+v data %+v", res.Status, we, data)
			}
		})
	}
}

// TestResultAtTheCapArrives: a result just under max_output_bytes at its
// largest (4 MiB) arrives whole; the bridge's line bound leaves room for
// the envelope around it, so the result never vanishes from a success.
func TestResultAtTheCapArrives(t *testing.T) {
	t.Parallel()
	deno := denoPath(t)
	e := newEnv(t)
	r := runners(t)["process"]
	n := MaxMaxOutputBytes - 2 // the JSON string's quotes
	res, data := exec(t, New(Options{Runner: r, Deno: deno}), e.decision(), nil, map[string]any{"code": `export const result = "r".repeat(` + strconv.Itoa(n) + `);`, "max_output_bytes": MaxMaxOutputBytes})
	if !res.Output.Success || len(data.Result) != MaxMaxOutputBytes || data.ResultTruncated {
		t.Fatalf("status %s error %+v: result of %d bytes (truncated %v), want %d", res.Status, res.Output.Error, len(data.Result), data.ResultTruncated, MaxMaxOutputBytes)
	}
}

// TestResultPastTheBridgeLineFails: a result line longer than the bridge
// reads (a result far over the cap) fails the call as too large, never a
// success without its result.
func TestResultPastTheBridgeLineFails(t *testing.T) {
	t.Parallel()
	deno := denoPath(t)
	e := newEnv(t)
	r := runners(t)["process"]
	res, data := exec(t, New(Options{Runner: r, Deno: deno}), e.decision(), nil, map[string]any{"code": `export const result = "r".repeat(` + strconv.Itoa(MaxMaxOutputBytes+64<<10+10) + `);`, "max_output_bytes": MaxMaxOutputBytes})
	if we := res.Output.Error; res.Output.Success || we == nil || we.Code != wire.CodeTooLarge || we.Details["field"] != "result" || !data.ResultTruncated {
		t.Fatalf("status %s error %+v result %d bytes", res.Status, we, len(data.Result))
	}
}
