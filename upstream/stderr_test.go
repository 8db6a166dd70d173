package upstream

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// TestStderrRateLimit: a server flooding stderr gets at most the burst
// plus the refill into the log; the rest is counted in summaries, and
// every line is either logged or counted.
func TestStderrRateLimit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		lines      int
		step       time.Duration // clock advance per line
		wantLogged int           // -1: check the sum only
		minSums    int
	}{
		{"flood at one instant", 1000, 0, stderrBurst, 1},
		{"under the rate", 100, 100 * time.Millisecond, 100, 0},
		{"flood over 30 s", 3000, 10 * time.Millisecond, -1, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var in strings.Builder
			for i := range c.lines {
				fmt.Fprintf(&in, "line %d\n", i)
			}
			clock := time.Unix(0, 0)
			now := func() time.Time { clock = clock.Add(c.step); return clock }
			var mu sync.Mutex // summaries may come from a timer
			logged, suppressed := 0, 0
			var sums []int
			logLines(strings.NewReader(in.String()), rate.NewLimiter(stderrLinesPerSecond, stderrBurst), now, stderrSummaryEvery,
				func(string) { logged++ }, func(n int) { mu.Lock(); sums = append(sums, n); suppressed += n; mu.Unlock() })
			mu.Lock()
			defer mu.Unlock()
			if logged+suppressed != c.lines {
				t.Fatalf("logged %d + suppressed %d != %d lines", logged, suppressed, c.lines)
			}
			if c.wantLogged >= 0 && logged != c.wantLogged {
				t.Fatalf("logged %d lines, want %d", logged, c.wantLogged)
			}
			if len(sums) < c.minSums {
				t.Fatalf("%d summaries, want at least %d", len(sums), c.minSums)
			}
			// At most the burst plus what the rate refills over the flood.
			span := time.Duration(c.lines) * c.step
			if max := stderrBurst + int(span.Seconds()*stderrLinesPerSecond) + 1; logged > max {
				t.Fatalf("logged %d lines, more than the bucket allows (%d)", logged, max)
			}
		})
	}
}

func TestStderrLongLines(t *testing.T) {
	t.Parallel()
	in := strings.Repeat("a", 100_000) + "\nnext\n" + strings.Repeat("b", 10_000)
	var got []string
	logLines(strings.NewReader(in), rate.NewLimiter(rate.Inf, 1), time.Now, stderrSummaryEvery,
		func(l string) { got = append(got, l) }, func(int) {})
	if len(got) != 3 || len(got[0]) > 4096 || got[1] != "next" || len(got[2]) > 4096 {
		t.Fatalf("got %d lines: %.20q", len(got), got)
	}
}

// TestStderrSummaryAfterFloodStops: a flood followed by silence (the
// server keeps stderr open) still gets its summary, from the timer.
func TestStderrSummaryAfterFloodStops(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	got := make(chan int, 50)
	done := make(chan struct{})
	go func() {
		defer close(done)
		logLines(pr, rate.NewLimiter(rate.Limit(1e-9), 2), time.Now, 10*time.Millisecond, func(string) {}, func(n int) { got <- n })
	}()
	if _, err := io.WriteString(pw, strings.Repeat("flood\n", 50)); err != nil {
		t.Fatal(err)
	}
	total := 0
	for total < 48 {
		total += <-got
	}
	if total != 48 {
		t.Fatalf("summaries of %d lines, want 48", total)
	}
	_ = pw.Close()
	<-done
}
