package main

import (
	"context"
	"fmt"
	"time"
)

// system is one thing measured in a scenario: a server behind an Op, or an
// in-process operation.
type system struct {
	name  string
	unit  string // throughput unit, e.g. "calls/s"
	perOp int    // items per op for the throughput (rows per COPY batch); 0 means 1
	op    Op
	// pid is the process whose CPU (self + waited-for children) and peak
	// RSS are reported: a server, or "self" for in-process systems, where
	// the figures include the load generator.
	pid      string
	cpuScope string // what the CPU column covers, for the report
	db       string // a PostgreSQL database whose server CPU to sample too (dbCPU)
	inflight int    // open loop: most requests in flight
	clients  []int  // closed-loop client counts; nil means -clients
	// noOpen skips the open-loop runs (systems whose op is a batch).
	noOpen bool
	// fixedRates are open-loop runs at these absolute rates (ops/s), after
	// the fractional ones: the same rate for every system compared (P5).
	fixedRates []float64
	note       string
}

// runner runs scenarios and collects their results.
type runner struct {
	cfg    *config
	env    *benchEnv
	report *Report
}

// measure runs sys closed loop at every client count, then open loop at
// each rate fraction of its best closed-loop throughput.
func (r *runner) measure(ctx context.Context, scenario string, sys system) error {
	clients := sys.clients
	if clients == nil {
		clients = r.cfg.clients
	}
	best := 0.0
	for _, c := range clients {
		if r.cfg.warmup > 0 {
			if _, err := RunLoad(ctx, LoadSpec{Clients: c, Duration: r.cfg.warmup}, sys.op); err != nil {
				return err
			}
		}
		res, err := r.runOne(ctx, scenario, sys, LoadSpec{Clients: c, Duration: r.cfg.duration})
		if err != nil {
			return err
		}
		if res.Errors == 0 && res.OpsPerSec > best {
			best = res.OpsPerSec
		}
	}
	if sys.noOpen {
		return nil
	}
	if best == 0 {
		return fmt.Errorf("%s/%s: no error-free closed-loop run to base the open-loop rates on", scenario, sys.name)
	}
	inflight := sys.inflight
	if inflight == 0 {
		inflight = r.cfg.maxInflight
	}
	for _, f := range r.cfg.rates {
		spec := LoadSpec{Clients: inflight, Rate: f * best, Duration: r.cfg.duration}
		res, err := r.runOne(ctx, scenario, sys, spec)
		if err != nil {
			return err
		}
		res.RateFraction = f
	}
	for _, rate := range sys.fixedRates {
		if _, err := r.runOne(ctx, scenario, sys, LoadSpec{Clients: inflight, Rate: rate, Duration: r.cfg.duration}); err != nil {
			return err
		}
	}
	return nil
}

// runOne runs one load spec with CPU and memory sampling and appends its
// result to the report.
func (r *runner) runOne(ctx context.Context, scenario string, sys system, spec LoadSpec) (*Result, error) {
	pid := sys.pid
	if pid == "" {
		pid = "self"
	}
	cpu0, err := readCPU(pid)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sys.name, err)
	}
	gen0, err := readCPU("self")
	if err != nil {
		return nil, err
	}
	var db0 time.Duration
	if sys.db != "" {
		db0 = dbCPU(sys.db)
	}
	st, err := RunLoad(ctx, spec, sys.op)
	if err != nil {
		return nil, err
	}
	cpu1, err := readCPU(pid)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sys.name, err)
	}
	gen1, err := readCPU("self")
	if err != nil {
		return nil, err
	}
	perOp := sys.perOp
	if perOp == 0 {
		perOp = 1
	}
	res := &Result{
		Scenario: scenario, System: sys.name, Unit: sys.unit, ItemsPerOp: perOp,
		Mode: "closed", Clients: spec.Clients,
		Ops: st.Ops, Non2xx: st.Non2xx, Errors: st.Failed(), Dropped: st.Dropped, FirstError: st.FirstErr,
		Transport: st.Errors,
		ElapsedS:  st.Elapsed.Seconds(), OpsPerSec: st.Throughput(),
		Throughput: st.Throughput() * float64(perOp),
		P50ms:      ms(st.Percentile(50)), P99ms: ms(st.Percentile(99)), P999ms: ms(st.Percentile(99.9)),
		Maxms:    ms(time.Duration(st.Histogram.Max()) * time.Microsecond),
		CPUScope: sys.cpuScope, Load1: loadAvg(), Note: sys.note,
		Distribution: distribution(st),
	}
	if spec.Rate > 0 {
		res.Mode, res.Rate = "open", spec.Rate
	}
	// CPU is per item (call, decision, run, event), like the throughput.
	if items := float64((st.Ops + st.Non2xx + st.Errors) * int64(perOp)); items > 0 {
		d := cpu1.Sub(cpu0)
		res.CPUmsPerOp = ms(d.Total()) / items
		res.ChildCPUmsPerOp = ms(d.Children) / items
		if pid != "self" {
			res.GenCPUmsPerOp = ms(gen1.Sub(gen0).Total()) / items
		}
		if sys.db != "" {
			res.DBCPUmsPerOp = ms(dbCPU(sys.db)-db0) / items
		}
	}
	if rss, err := peakRSS(pid); err == nil {
		res.PeakRSSMB = float64(rss) / (1 << 20)
	}
	r.report.Results = append(r.report.Results, res)
	logf("%-9s %-22s %-6s %5s  %9.0f %-8s p50 %7.3f p99 %8.3f p99.9 %8.3f ms  cpu %.3f ms/item  rss %.0f MB  errors %d  load %.2f",
		scenario, sys.name, res.Mode, res.Load(), res.Throughput, res.Unit, res.P50ms, res.P99ms, res.P999ms,
		res.CPUmsPerOp, res.PeakRSSMB, res.Errors, res.Load1)
	if res.Errors > 0 {
		logf("  first error: %s", res.FirstError)
	}
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// distribution samples the latency percentile curve for the plots.
func distribution(st *LoadStats) []Point {
	qs := []float64{0, 10, 25, 50, 75, 90, 95, 97, 98, 99, 99.5, 99.7, 99.8, 99.9, 99.95, 99.97, 99.99, 99.995, 99.999, 100}
	pts := make([]Point, 0, len(qs))
	for _, q := range qs {
		if q == 100 {
			pts = append(pts, Point{Q: q, Ms: ms(time.Duration(st.Histogram.Max()) * time.Microsecond)})
			continue
		}
		pts = append(pts, Point{Q: q, Ms: ms(st.Percentile(q))})
	}
	return pts
}
