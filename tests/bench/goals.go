package main

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
)

// Goal is one row of issue 17's table (docs/performance.md): a figure of
// this run beside its anchor, the ratio or difference the goal is stated
// in, and whether this run met it. A row whose runs are missing (a
// scenario not run, a system that failed) says so instead of a figure.
type Goal struct {
	ID      string  `json:"id"`
	Measure string  `json:"measure"`
	Value   string  `json:"value"`  // this run's figure, with its unit
	Anchor  string  `json:"anchor"` // what it is compared with, from the same run
	Result  float64 `json:"result"` // the ratio, difference or figure the goal is stated in
	Target  string  `json:"target"` // the goal, as in the issue
	Met     bool    `json:"met"`
	Missing string  `json:"missing,omitempty"` // why there is no figure
	// Fraction is Result as a share of the way to the goal, for the plot:
	// 1 is exactly the goal, above 1 is met.
	Fraction float64 `json:"fraction"`
}

// Goal-row parameters: the figures.
const (
	goalP5Rate    = 2000.0 // P5: open-loop decisions/s
	goalP6Clients = 64     // P6: closed-loop clients
	goalP1        = 1.5    // P1: gateway/trivial ≥ 1.5 × opa/trivial
	goalP1b       = 0.8    // P1b: gateway/shipped ≥ 0.8 × gateway/trivial
	goalP2        = 5000.0 // P2: calls/s on each store
	goalP3        = 1.15   // P3: gateway/bwrap p50 ≤ 1.15 × bare bwrap
	goalP5        = 0.3    // P5: added p99, ms
	goalP6        = 100.0  // P6: peak RSS, MB
)

// goalClients are the closed-loop client counts of the decision scenario:
// -clients, plus the P6 count when it is missing (a -quick run).
func (r *runner) goalClients() []int {
	c := slices.Clone(r.cfg.clients)
	if !slices.Contains(c, goalP6Clients) {
		c = append(c, goalP6Clients)
	}
	return c
}

// goalRates are the fixed open-loop rates of a decision system: P5's rate,
// on the trivial policy (the decision path, not the library).
func goalRates(policy string) []float64 {
	if policy == "trivial" {
		return []float64{goalP5Rate}
	}
	return nil
}

// find returns the first result of scenario and system in the given mode
// whose clients (closed) or rate (open) match pick, nil if none.
func (rep *Report) find(scenario, system string, pick func(*Result) bool) *Result {
	for _, r := range rep.Results {
		if r.Scenario == scenario && r.System == system && pick(r) {
			return r
		}
	}
	return nil
}

// bestClosed is the system's best error-free closed-loop throughput.
func (rep *Report) bestClosed(scenario, system string) *Result {
	var best *Result
	for _, r := range rep.Results {
		if r.Scenario == scenario && r.System == system && r.Mode == "closed" && r.Errors == 0 &&
			(best == nil || r.Throughput > best.Throughput) {
			best = r
		}
	}
	return best
}

func closedAt(c int) func(*Result) bool {
	return func(r *Result) bool { return r.Mode == "closed" && r.Clients == c }
}

func openAt(rate float64) func(*Result) bool {
	return func(r *Result) bool { return r.Mode == "open" && math.Abs(r.Rate-rate) < 0.5 }
}

// goals computes issue 17's rows from the run's results.
func (rep *Report) goals() []Goal {
	c16 := closedAt(16)
	var out []Goal
	missing := func(g Goal, what string) Goal {
		g.Missing = what + " not measured in this run"
		return g
	}

	// P1: decision throughput, gateway vs OPA, trivial policy, c=16.
	g := Goal{ID: "P1", Measure: "decision-only decisions/s, gateway `POST /v1/decisions` vs `opa run --server`, trivial policy, c=16",
		Target: fmt.Sprintf("≥ %.1f× OPA", goalP1)}
	out = append(out, ratioGoal(g, rep.find("decision", "gateway/trivial", c16), rep.find("decision", "opa/trivial", c16), "opa/trivial", goalP1,
		"decision gateway/trivial or opa/trivial at c=16"))

	// P1b: shipped library vs trivial policy, both through the gateway.
	g = Goal{ID: "P1b", Measure: "shipped policy library: gateway decisions/s vs the trivial policy, c=16",
		Target: fmt.Sprintf("≥ %.1f× trivial", goalP1b)}
	out = append(out, ratioGoal(g, rep.find("decision", "gateway/shipped", c16), rep.find("decision", "gateway/trivial", c16), "gateway/trivial", goalP1b,
		"decision gateway/shipped or gateway/trivial at c=16"))

	// P2: governed fs.read with durable evidence, each store, best closed loop.
	g = Goal{ID: "P2", Measure: "governed fs.read, durable chained evidence, best closed loop: PostgreSQL and SQLite",
		Target: fmt.Sprintf("≥ %s calls/s on both", fmtNum(goalP2))}
	if pg, sq := rep.bestClosed("fsread", "gateway/postgres"), rep.bestClosed("fsread", "gateway/sqlite"); pg != nil && sq != nil {
		g.Value = fmt.Sprintf("PostgreSQL %s (c=%d), SQLite %s (c=%d)", rate(pg), pg.Clients, rate(sq), sq.Clients)
		if opa := rep.bestClosed("fsread", "opa/decision-logs"); opa != nil {
			g.Anchor = "opa/decision-logs " + rate(opa)
		}
		g.Result = min(pg.Throughput, sq.Throughput)
		g.Met, g.Fraction = g.Result >= goalP2, g.Result/goalP2
	} else {
		g = missing(g, "fsread gateway/postgres or gateway/sqlite")
	}
	out = append(out, g)

	// P3: Exec /bin/true p50, gateway on bwrap vs bare bwrap, c=16.
	g = Goal{ID: "P3", Measure: "Exec `/usr/bin/true` p50, gateway + bwrap vs bare bwrap, c=16, rw grant of a project of 20k files in 2k dirs, bare bwrap with the same mounts",
		Target: fmt.Sprintf("≤ %.2f× bare bwrap", goalP3)}
	if gw, bare := rep.find("exec", "gateway/bwrap", c16), rep.find("exec", "bare-bwrap", c16); gw != nil && bare != nil && bare.P50ms > 0 {
		g.Value, g.Anchor = fmtMs(gw.P50ms)+" ms", "bare-bwrap "+fmtMs(bare.P50ms)+" ms"
		g.Result = gw.P50ms / bare.P50ms
		g.Met, g.Fraction = g.Result <= goalP3, goalP3/g.Result
	} else {
		g = missing(g, "exec gateway/bwrap or bare-bwrap at c=16")
	}
	out = append(out, g)

	// P5: p99 the gateway adds over OPA at the same open-loop rate.
	g = Goal{ID: "P5", Measure: fmt.Sprintf("added p99 of the decision path at %s/s open loop: gateway/trivial p99 − opa/trivial p99", fmtNum(goalP5Rate)),
		Target: fmt.Sprintf("≤ %.1f ms", goalP5)}
	if gw, opa := rep.find("decision", "gateway/trivial", openAt(goalP5Rate)), rep.find("decision", "opa/trivial", openAt(goalP5Rate)); gw != nil && opa != nil {
		g.Value, g.Anchor = "p99 "+fmtMs(gw.P99ms)+" ms", "opa/trivial p99 "+fmtMs(opa.P99ms)+" ms"
		if gw.Errors > 0 || opa.Errors > 0 {
			g.Value += fmt.Sprintf(" (errors: gateway %d, OPA %d)", gw.Errors, opa.Errors)
		}
		g.Result = gw.P99ms - opa.P99ms
		g.Met = g.Result <= goalP5 && gw.Errors == 0
		g.Fraction = goalP5 / math.Max(g.Result, goalP5/10)
	} else {
		g = missing(g, fmt.Sprintf("decision trivial at %s/s open loop", fmtNum(goalP5Rate)))
	}
	out = append(out, g)

	// P6: peak RSS of the gateways at c=64 (VmHWM after that run).
	g = Goal{ID: "P6", Measure: fmt.Sprintf("peak RSS (VmHWM) of the gateway at c=%d, the largest over the gateways measured there", goalP6Clients),
		Target: fmt.Sprintf("≤ %.0f MB", goalP6)}
	var worst, opaWorst *Result
	for _, r := range rep.Results {
		if r.Mode != "closed" || r.Clients != goalP6Clients {
			continue
		}
		switch {
		case strings.HasPrefix(r.System, "gateway/") && (worst == nil || r.PeakRSSMB > worst.PeakRSSMB):
			worst = r
		case strings.HasPrefix(r.System, "opa/") && (opaWorst == nil || r.PeakRSSMB > opaWorst.PeakRSSMB):
			opaWorst = r
		}
	}
	if worst != nil {
		g.Value = fmt.Sprintf("%.0f MB (%s %s)", worst.PeakRSSMB, worst.Scenario, worst.System)
		if opaWorst != nil {
			g.Anchor = fmt.Sprintf("OPA %.0f MB (%s %s)", opaWorst.PeakRSSMB, opaWorst.Scenario, opaWorst.System)
		}
		g.Result = worst.PeakRSSMB
		g.Met, g.Fraction = g.Result <= goalP6, goalP6/g.Result
	} else {
		g = missing(g, fmt.Sprintf("a gateway at c=%d", goalP6Clients))
	}
	out = append(out, g)
	return out
}

// ratioGoal fills g with a throughput ratio goal: r's throughput over the
// anchor's (named anchorName), met at goal or more; missing says what was
// not measured when either result is absent.
func ratioGoal(g Goal, r, anchor *Result, anchorName string, goal float64, missing string) Goal {
	if r == nil || anchor == nil || anchor.Throughput <= 0 {
		g.Missing = missing + " not measured in this run"
		return g
	}
	g.Value, g.Anchor = rate(r), anchorName+" "+rate(anchor)
	g.Result = r.Throughput / anchor.Throughput
	g.Met, g.Fraction = g.Result >= goal, g.Result/goal
	return g
}

func rate(r *Result) string { return fmtNum(r.Throughput) + " " + r.Unit }

// goalsMarkdown is the table for results.md.
func goalsMarkdown(goals []Goal) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Issue 17 goals\n\n| | measure | this run | anchor (same run) | result | goal | met |\n|---|---|---|---|---|---|---|\n")
	for _, g := range goals {
		if g.Missing != "" {
			fmt.Fprintf(&b, "| %s | %s | — | — | — | %s | %s |\n", g.ID, g.Measure, g.Target, g.Missing)
			continue
		}
		met := "no"
		if g.Met {
			met = "**yes**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", g.ID, g.Measure, g.Value, g.Anchor, goalResult(g), g.Target, met)
	}
	b.WriteString("\n![issue 17 goals](goals.svg)\n\n")
	return b.String()
}

func goalResult(g Goal) string {
	switch g.ID {
	case "P1", "P1b", "P3":
		return fmt.Sprintf("%.2f×", g.Result)
	case "P2":
		return fmtNum(g.Result) + " calls/s (the lower)"
	case "P5":
		return fmt.Sprintf("%+.3f ms", g.Result)
	case "P6":
		return fmt.Sprintf("%.0f MB", g.Result)
	}
	return fmt.Sprintf("%g", g.Result)
}

// GoalsPlot draws each goal's Fraction as a horizontal bar against the
// goal line at 1 (bars past it are met), capped at 2.
func GoalsPlot(goals []Goal) string {
	const w, rowH, left, right, top = 900, 34, 70, 30, 40
	h := top + rowH*len(goals) + 40
	x := func(f float64) float64 { return left + (w-left-right)*math.Min(f, 2)/2 }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`, w, h, w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="24" font-size="15">Issue 17 goals: share of each goal reached (1 = the goal; capped at 2)</text>`, left)
	for i, g := range goals {
		y := top + i*rowH
		fmt.Fprintf(&b, `<text x="8" y="%d">%s</text>`, y+rowH/2+4, html.EscapeString(g.ID))
		if g.Missing != "" {
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#777">not measured</text>`, left+6, y+rowH/2+4)
			continue
		}
		colour := palette[1]
		if g.Met {
			colour = palette[2]
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, left, y+6, x(g.Fraction)-left, rowH-12, colour)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s (goal %s)</text>`, math.Min(x(g.Fraction)+6, w-260), y+rowH/2+4,
			html.EscapeString(goalResult(g)), html.EscapeString(g.Target))
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black" stroke-dasharray="4 3"/>`, x(1), top-4, x(1), top+rowH*len(goals)+4)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">goal</text>`, x(1), top+rowH*len(goals)+22)
	b.WriteString(`</svg>`)
	return b.String()
}
