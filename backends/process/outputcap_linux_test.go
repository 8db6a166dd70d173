package process

import (
	"testing"
	"time"
)

// TestRunStopAtOutputCap: with StopAtOutputCap, a program that writes past
// the cap on either stream is killed at once (no grace, even if it ignores
// SIGTERM), its children with it; without it, the run goes on and only the
// first MaxOutputBytes are kept.
func TestRunStopAtOutputCap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		script string
	}{
		{"stdout", `trap "" TERM; "$0" 100 & while :; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; done`},
		{"stderr", `trap "" TERM; "$0" 100 & while :; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx >&2; done`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			marker := markedSleep(t)
			s := spec("/bin/sh", "-c", tc.script, marker)
			s.MaxOutputBytes = 4096
			s.Timeout = 20 * time.Second
			s.StopAtOutputCap = true
			start := time.Now()
			res := run(t, s)
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("returned after %v: the cap did not stop the run", took)
			}
			if !res.OutputCapped || res.TimedOut || sig(res) != "SIGKILL" || !(res.StdoutTruncated || res.StderrTruncated) {
				t.Errorf("capped %v timed out %v signal %q truncated %v/%v", res.OutputCapped, res.TimedOut, sig(res), res.StdoutTruncated, res.StderrTruncated)
			}
			if len(res.Stdout) > 4096 || len(res.Stderr) > 4096 {
				t.Errorf("kept %d/%d bytes, cap 4096", len(res.Stdout), len(res.Stderr))
			}
			waitNoSurvivors(t, marker)
		})
	}
	t.Run("off: cut, not stopped", func(t *testing.T) {
		t.Parallel()
		s := spec("/bin/sh", "-c", `i=0; while [ $i -lt 300 ]; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done; echo done >&2`)
		s.MaxOutputBytes = 4096
		res := run(t, s)
		if res.OutputCapped || res.ExitCode != 0 || !res.StdoutTruncated || res.Stderr != "done\n" {
			t.Errorf("capped %v exit %d truncated %v stderr %q", res.OutputCapped, res.ExitCode, res.StdoutTruncated, res.Stderr)
		}
	})
}
