package main

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sleepOp is an Op that takes d and counts its calls.
func sleepOp(d time.Duration, calls *atomic.Int64) Op {
	return func(ctx context.Context) error {
		calls.Add(1)
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func TestClosedLoopCountsAndThroughput(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	st, err := RunLoad(context.Background(), LoadSpec{Clients: 4, Duration: 300 * time.Millisecond}, sleepOp(2*time.Millisecond, &calls))
	if err != nil {
		t.Fatal(err)
	}
	if st.Ops != calls.Load() || st.Failed() != 0 {
		t.Fatalf("ops %d, failed %d, calls %d: want every call counted once as a success", st.Ops, st.Failed(), calls.Load())
	}
	// 4 clients × 2 ms per op ≈ 2000/s; a loaded CI machine sleeps longer.
	if tp := st.Throughput(); tp < 150 || tp > 2100 {
		t.Errorf("throughput %.0f/s, want ≤ 2000/s and not absurdly low", tp)
	}
	if p50 := st.Percentile(50); p50 < 2*time.Millisecond || p50 > 50*time.Millisecond {
		t.Errorf("p50 %s, want about 2ms", p50)
	}
	if int64(st.Histogram.TotalCount()) != st.Total() {
		t.Errorf("histogram holds %d values for %d requests", st.Histogram.TotalCount(), st.Total())
	}
}

func TestOpenLoopKeepsRate(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	st, err := RunLoad(context.Background(), LoadSpec{Clients: 16, Rate: 500, Duration: 400 * time.Millisecond}, sleepOp(time.Millisecond, &calls))
	if err != nil {
		t.Fatal(err)
	}
	// 500/s for 0.4 s is 200 due requests: all sent, none dropped.
	if st.Ops != 200 || st.Dropped != 0 {
		t.Fatalf("ops %d dropped %d, want 200 and 0", st.Ops, st.Dropped)
	}
	if tp := st.Throughput(); tp < 250 || tp > 520 {
		t.Errorf("throughput %.0f/s, want about 500/s", tp)
	}
}

func TestErrorsCountedApart(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	op := func(context.Context) error {
		switch n.Add(1) % 3 {
		case 0:
			return &StatusError{Code: 503, Body: "busy"}
		case 1:
			return errors.New("connection refused")
		default:
			return nil
		}
	}
	st, err := RunLoad(context.Background(), LoadSpec{Clients: 1, Rate: 300, Duration: 100 * time.Millisecond}, op)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ops != 10 || st.Non2xx != 10 || st.Errors != 10 || st.Failed() != 20 {
		t.Fatalf("ops %d non2xx %d errors %d failed %d, want 10/10/10/20", st.Ops, st.Non2xx, st.Errors, st.Failed())
	}
	if st.FirstErr == "" {
		t.Error("first error not kept")
	}
}

func TestPercentilesFromHistogram(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	// 1..1000 ms, one each: the percentiles are the values themselves.
	for i := 1; i <= 1000; i++ {
		rec.record(time.Duration(i)*time.Millisecond, nil)
	}
	st := mergeRecorders([]*recorder{rec}, time.Second)
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{50, 500 * time.Millisecond}, {99, 990 * time.Millisecond}, {99.9, 999 * time.Millisecond}} {
		got := st.Percentile(c.q)
		// 3 significant digits: within 0.1%.
		if d := got - c.want; d < -c.want/1000 || d > c.want/1000 {
			t.Errorf("p%v = %s, want %s", c.q, got, c.want)
		}
	}
}

// stallServer answers at once, except during one stall of the whole
// server (like a GC pause or a blocked fsync), which every request waits
// out.
type stallServer struct {
	mu sync.RWMutex
}

func (s *stallServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, _ = io.WriteString(w, "ok")
}

func (s *stallServer) stallAt(after, d time.Duration) {
	time.Sleep(after)
	s.mu.Lock()
	time.Sleep(d)
	s.mu.Unlock()
}

// TestCoordinatedOmission runs the same server with one 300 ms stall in a
// 1.5 s window closed loop and open loop. Closed loop, the one client
// simply waits: one slow request among thousands, invisible at p99.9.
// Open loop, every request due during the stall is late by the rest of
// it, so the stall shows at p99 and p99.9.
func TestCoordinatedOmission(t *testing.T) {
	t.Parallel()
	const stall = 300 * time.Millisecond
	run := func(spec LoadSpec) *LoadStats {
		s := &stallServer{}
		srv := httptest.NewServer(s)
		defer srv.Close()
		c := &http.Client{Transport: newTransport(spec.Clients)}
		defer c.CloseIdleConnections()
		op := httpPost(c, srv.URL, []byte("{}"), http.Header{})
		go s.stallAt(500*time.Millisecond, stall)
		st, err := RunLoad(context.Background(), spec, op)
		if err != nil {
			t.Fatal(err)
		}
		// Dropped requests (open loop, a loaded machine fell more than
		// the drain behind) are recorded with the delay they suffered, so
		// they count as late below; only answers that failed are failures.
		if n := st.Non2xx + st.Errors; n != 0 {
			t.Fatalf("%d failures: %s", n, st.FirstErr)
		}
		return st
	}
	closed := run(LoadSpec{Clients: 1, Duration: 1500 * time.Millisecond})
	open := run(LoadSpec{Clients: 8, Rate: 1000, Duration: 1500 * time.Millisecond})
	t.Logf("closed: %d ops, p99 %s p99.9 %s max %dµs", closed.Ops, closed.Percentile(99), closed.Percentile(99.9), closed.Histogram.Max())
	t.Logf("open:   %d ops, p99 %s p99.9 %s", open.Ops, open.Percentile(99), open.Percentile(99.9))
	if closed.Ops < 1000 {
		t.Skipf("machine too slow for the comparison (%d closed-loop ops)", closed.Ops)
	}
	// Counted, not timed: a loaded machine adds its own pauses to both
	// loops, but only the open loop turns one stall into many late
	// requests. Closed loop, the stall is one sample; open loop, every
	// request due during it is late (~300 of ~1500).
	slow := func(st *LoadStats) int64 { return countAtLeast(st, stall*2/3) }
	if n := slow(closed); n > 3 {
		t.Errorf("closed loop: %d requests took ≥ %s; the one stall should be one sample", n, stall*2/3)
	}
	if n := slow(open); n < 20 || n < 10*slow(closed) {
		t.Errorf("open loop: %d requests took ≥ %s (closed loop %d): the stall is not corrected for", n, stall*2/3, slow(closed))
	}
}

// countAtLeast is how many recorded latencies are at least d.
func countAtLeast(st *LoadStats, d time.Duration) int64 {
	var n int64
	for _, b := range st.Histogram.Distribution() {
		if time.Duration(b.From)*time.Microsecond >= d {
			n += b.Count
		}
	}
	return n
}

func TestOpenLoopDropsWhenFarBehind(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	// One worker, 20 ms per op, 200 due per second: it falls behind at
	// once; the drain limit cuts the run and counts the rest as dropped.
	st, err := RunLoad(context.Background(), LoadSpec{Clients: 1, Rate: 200, Duration: 200 * time.Millisecond, Drain: 50 * time.Millisecond},
		sleepOp(20*time.Millisecond, &calls))
	if err != nil {
		t.Fatal(err)
	}
	if st.Dropped == 0 || st.Total() != 40 {
		t.Fatalf("dropped %d total %d, want some dropped of 40 due", st.Dropped, st.Total())
	}
	if st.Percentile(99) < 100*time.Millisecond {
		t.Errorf("p99 %s: dropped requests must carry their delay", st.Percentile(99))
	}
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	// A command name with spaces and parentheses, then fields 3..; utime
	// 14 = 250 ticks, stime 15 = 50, cutime 16 = 7, cstime 17 = 3.
	line := "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 3 0 100 1000 200"
	c, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if c.Self != 3*time.Second || c.Children != 100*time.Millisecond {
		t.Fatalf("got %+v, want self 3s children 100ms", c)
	}
	if _, err := readCPU("self"); err != nil {
		t.Fatalf("readCPU(self): %v", err)
	}
	if rss, err := peakRSS("self"); err != nil || rss <= 0 {
		t.Fatalf("peakRSS(self) = %d, %v", rss, err)
	}
}

func TestPlotAndReport(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	for i := 1; i <= 10000; i++ {
		rec.record(time.Duration(i)*time.Microsecond*10, nil)
	}
	st := mergeRecorders([]*recorder{rec}, time.Second)
	rep := &Report{Started: time.Now(), Command: "go run ./tests/bench", Machine: Machine{CPUs: 2, CPUModel: "test"}}
	for _, mode := range []string{"closed", "open"} {
		rep.Results = append(rep.Results, &Result{
			Scenario: "decision", System: "gateway/<shipped>", Mode: mode, Clients: 16, Rate: 100, RateFraction: 0.5,
			Unit: "decisions/s", ItemsPerOp: 1, Throughput: 1234.4, Ops: 10000,
			P50ms: 50, P99ms: 99, P999ms: 99.9, Distribution: distribution(st),
		})
	}
	dir := t.TempDir()
	if err := rep.write(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"decision-closed.svg", "decision-open.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		// Well-formed XML, one polyline per series, the label escaped.
		dec := xml.NewDecoder(strings.NewReader(string(b)))
		polylines := 0
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s is not well-formed XML: %v", name, err)
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
				polylines++
				for _, a := range se.Attr {
					if a.Name.Local == "points" && strings.Count(a.Value, ",") < 10 {
						t.Errorf("%s: polyline with %d points", name, strings.Count(a.Value, ","))
					}
				}
			}
		}
		if polylines != 1 {
			t.Errorf("%s: %d polylines, want 1", name, polylines)
		}
		if !strings.Contains(string(b), "gateway/&lt;shipped&gt;") {
			t.Errorf("%s: label not escaped", name)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| decision | gateway/<shipped> | closed | c=16 | 1,234 decisions/s | 50.0 | 99.0 | 99.9 | 0.000 |", "![decision-open](decision-open.svg)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "results.json")); err != nil {
		t.Error(err)
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	c, err := parseFlags([]string{"-quick", "-scenarios", "decision,exec"})
	if err != nil {
		t.Fatal(err)
	}
	if c.duration != 2*time.Second || len(c.clients) != 1 || c.clients[0] != 16 || len(c.scenarios) != 2 {
		t.Errorf("quick: %+v", c)
	}
	c, err = parseFlags([]string{"-quick", "-duration", "5s", "-clients", "8,32"})
	if err != nil {
		t.Fatal(err)
	}
	if c.duration != 5*time.Second || len(c.clients) != 2 {
		t.Errorf("explicit flags must win over -quick: %+v", c)
	}
	for _, bad := range [][]string{{"-scenarios", "nope"}, {"-clients", "0"}, {"-rates", "3"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}
