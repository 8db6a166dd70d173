package upstream

import (
	"fmt"
	"strings"
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
			logged, suppressed := 0, 0
			var sums []int
			logLines(strings.NewReader(in.String()), rate.NewLimiter(stderrLinesPerSecond, stderrBurst), now,
				func(string) { logged++ }, func(n int) { sums = append(sums, n); suppressed += n })
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
	logLines(strings.NewReader(in), rate.NewLimiter(rate.Inf, 1), time.Now,
		func(l string) { got = append(got, l) }, func(int) {})
	if len(got) != 3 || len(got[0]) > 4096 || got[1] != "next" || len(got[2]) > 4096 {
		t.Fatalf("got %d lines: %.20q", len(got), got)
	}
}
