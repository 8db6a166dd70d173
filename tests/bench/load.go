package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Op is one request of a load run. It returns nil on success, a *StatusError
// when the server answered with a non-2xx status, and any other error when
// the request failed (connection refused, timeout, bad answer).
type Op func(ctx context.Context) error

// StatusError is a non-2xx answer. It is counted apart from transport
// errors, because a 4xx means the benchmark is wrong and a 5xx that the
// server is.
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Code, e.Body) }

// Histogram bounds: 1 µs to 5 min, 3 significant digits. Values are
// recorded in microseconds.
const (
	histMin     = 1
	histMax     = int64(5 * time.Minute / time.Microsecond)
	histSigFigs = 3
)

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histMin, histMax, histSigFigs)
}

// LoadSpec is one load run. Rate 0 means closed loop: Clients workers each
// send their next request as soon as the previous one was answered, which
// measures the maximum throughput but hides queueing delay. Rate > 0 means
// open loop: requests are due at a fixed rate whatever the server does, and
// each latency is measured from the request's intended send time, so a
// stall shows up in every request that should have been sent during it
// (the coordinated-omission correction of wrk2 and HdrHistogram).
type LoadSpec struct {
	Clients  int           // closed loop: concurrent clients; open loop: most requests in flight
	Rate     float64       // requests per second; 0 = closed loop
	Duration time.Duration // measured window
	// Drain bounds how long an open-loop run may overrun its window to send
	// and finish the requests that were due in it. Requests still unsent
	// then are counted as Dropped, with their latency so far recorded.
	// 0 means Duration.
	Drain time.Duration
}

// LoadStats is what a load run measured.
type LoadStats struct {
	Ops       int64         // requests that succeeded
	Non2xx    int64         // requests answered with a non-2xx status
	Errors    int64         // requests that failed otherwise
	Dropped   int64         // open loop: due requests never sent (the server fell too far behind)
	Elapsed   time.Duration // from the window's start to the last answer
	FirstErr  string        // the first failure, for the report
	Histogram *hdrhistogram.Histogram
}

// Total is every request that was due or sent.
func (s *LoadStats) Total() int64 { return s.Ops + s.Non2xx + s.Errors + s.Dropped }

// Failed is every request that did not succeed.
func (s *LoadStats) Failed() int64 { return s.Non2xx + s.Errors + s.Dropped }

// Throughput is successful requests per second over the window.
func (s *LoadStats) Throughput() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Ops) / s.Elapsed.Seconds()
}

// Percentile returns the latency at q (0..100).
func (s *LoadStats) Percentile(q float64) time.Duration {
	return time.Duration(s.Histogram.ValueAtQuantile(q)) * time.Microsecond
}

// recorder collects results from many workers: each keeps its own histogram
// and counters, merged at the end, so recording never contends.
type recorder struct {
	hist              *hdrhistogram.Histogram
	ops, non2xx, errs int64
	dropped           int64
	firstErr          string
}

func newRecorder() *recorder { return &recorder{hist: newHistogram()} }

func (r *recorder) record(latency time.Duration, err error) {
	us := latency.Microseconds()
	if us < histMin {
		us = histMin
	}
	if us > histMax {
		us = histMax
	}
	_ = r.hist.RecordValue(us)
	if err == nil {
		r.ops++
		return
	}
	var se *StatusError
	if errors.As(err, &se) {
		r.non2xx++
	} else {
		r.errs++
	}
	if r.firstErr == "" {
		r.firstErr = err.Error()
	}
}

func mergeRecorders(recs []*recorder, elapsed time.Duration) *LoadStats {
	st := &LoadStats{Histogram: newHistogram(), Elapsed: elapsed}
	for _, r := range recs {
		st.Histogram.Merge(r.hist)
		st.Ops += r.ops
		st.Non2xx += r.non2xx
		st.Errors += r.errs
		st.Dropped += r.dropped
		if st.FirstErr == "" {
			st.FirstErr = r.firstErr
		}
	}
	return st
}

// RunLoad runs spec against op. ctx cancels the run early.
func RunLoad(ctx context.Context, spec LoadSpec, op Op) (*LoadStats, error) {
	if spec.Clients < 1 {
		return nil, fmt.Errorf("load: clients must be ≥ 1, got %d", spec.Clients)
	}
	if spec.Duration <= 0 {
		return nil, fmt.Errorf("load: duration must be > 0, got %s", spec.Duration)
	}
	if spec.Rate < 0 || math.IsNaN(spec.Rate) || math.IsInf(spec.Rate, 0) {
		return nil, fmt.Errorf("load: bad rate %v", spec.Rate)
	}
	if spec.Rate == 0 {
		return closedLoop(ctx, spec.Clients, spec.Duration, op)
	}
	drain := spec.Drain
	if drain <= 0 {
		drain = spec.Duration
	}
	return openLoop(ctx, spec.Clients, spec.Rate, spec.Duration, drain, op)
}

// closedLoop runs clients workers back to back for d.
func closedLoop(ctx context.Context, clients int, d time.Duration, op Op) (*LoadStats, error) {
	recs := make([]*recorder, clients)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range clients {
		rec := newRecorder()
		recs[i] = rec
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				err := op(ctx)
				rec.record(time.Since(t0), err)
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return mergeRecorders(recs, time.Since(start)), nil
}

// openLoop sends requests due every 1/rate seconds for d, from at most
// inflight concurrent workers. Workers claim the next due slot from a
// shared counter: when all of them are busy, due slots wait, and the next
// free worker sends the overdue request at once. Latency is always measured
// from the slot's due time, never from the actual send.
func openLoop(ctx context.Context, inflight int, rate float64, d, drain time.Duration, op Op) (*LoadStats, error) {
	period := time.Duration(float64(time.Second) / rate)
	if period <= 0 {
		return nil, fmt.Errorf("load: rate %v too high", rate)
	}
	slots := int64(d / period)
	if slots < 1 {
		slots = 1
	}
	recs := make([]*recorder, inflight)
	var next atomic.Int64
	start := time.Now()
	hardStop := start.Add(d + drain)
	var wg sync.WaitGroup
	for i := range inflight {
		rec := newRecorder()
		recs[i] = rec
		wg.Go(func() {
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			for ctx.Err() == nil {
				slot := next.Add(1) - 1
				if slot >= slots {
					return
				}
				due := start.Add(time.Duration(slot) * period)
				if wait := time.Until(due); wait > 0 {
					timer.Reset(wait)
					select {
					case <-timer.C:
					case <-ctx.Done():
						return
					}
				}
				if now := time.Now(); now.After(hardStop) {
					// Too far behind: count this slot (and let the other
					// workers count theirs) as dropped, with the delay it
					// has already suffered.
					rec.dropped++
					_ = rec.hist.RecordValue(min(now.Sub(due).Microseconds(), histMax))
					continue
				}
				err := op(ctx)
				rec.record(time.Since(due), err)
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return mergeRecorders(recs, time.Since(start)), nil
}
