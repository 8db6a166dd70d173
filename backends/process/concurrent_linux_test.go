package process

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRunConcurrentOutputs: many runs at once each get exactly their own
// program's output.
func TestRunConcurrentOutputs(t *testing.T) {
	t.Parallel()
	r := New(Options{})
	const n = 40
	var wg sync.WaitGroup
	for round := range 5 {
		for i := range n {
			wg.Go(func() {
				res, err := r.Run(context.Background(), spec("/bin/echo", "n", strconv.Itoa(i)))
				if err != nil {
					t.Errorf("round %d run %d: %v", round, i, err)
					return
				}
				if want := "n " + strconv.Itoa(i) + "\n"; res.Stdout != want || res.ExitCode != 0 {
					t.Errorf("round %d run %d: stdout %q exit %v stderr %q duration %s, want %q", round, i, res.Stdout, res.ExitCode, res.Stderr, res.Duration, want)
				}
			})
		}
		wg.Wait()
	}
}

// TestRunCanceledBeforeHelperReports: a run stopped before its helper got
// to report ran nothing and ends canceled, not as a helper refusal.
func TestRunCanceledBeforeHelperReports(t *testing.T) {
	t.Parallel()
	r := New(Options{})
	for i := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		res, err := r.Run(ctx, spec("/bin/sleep", "30"))
		cancel()
		switch {
		case err != nil && errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "helper"):
			// Expired before the start: nothing was started.
		case err != nil || !res.Canceled:
			t.Fatalf("run %d: %+v %v, want a canceled result (or not started), never a helper refusal", i, res, err)
		}
	}
}
