package process

import (
	"context"
	"strconv"
	"sync"
	"testing"
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
