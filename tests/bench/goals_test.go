package main

import (
	"strings"
	"testing"
)

// TestGoals: each issue row is computed from the runs it names, met or not
// by its goal, and a row whose runs are missing says so.
func TestGoals(t *testing.T) {
	t.Parallel()
	res := func(sc, sys, mode string, c int, rate, tput, p50, p99, rss float64) *Result {
		return &Result{Scenario: sc, System: sys, Mode: mode, Clients: c, Rate: rate, Throughput: tput, Unit: "x/s", P50ms: p50, P99ms: p99, PeakRSSMB: rss}
	}
	full := []*Result{
		res("decision", "gateway/trivial", "closed", 16, 0, 9000, 1, 2, 50),
		res("decision", "opa/trivial", "closed", 16, 0, 5000, 1, 2, 40),
		res("decision", "gateway/shipped", "closed", 16, 0, 6000, 1, 2, 60),
		res("decision", "gateway/trivial", "open", 512, 2000, 2000, 1, 1.2, 70),
		res("decision", "opa/trivial", "open", 512, 2000, 2000, 1, 1.0, 40),
		res("decision", "gateway/shipped", "closed", 64, 0, 6000, 1, 2, 120),
		res("decision", "opa/shipped", "closed", 64, 0, 600, 1, 2, 90),
		res("fsread", "gateway/postgres", "closed", 16, 0, 4000, 1, 2, 80),
		res("fsread", "gateway/sqlite", "closed", 16, 0, 6000, 1, 2, 80),
		res("exec", "gateway/bwrap", "closed", 16, 0, 100, 11, 20, 80),
		res("exec", "bare-bwrap", "closed", 16, 0, 100, 10, 20, 80),
	}
	cases := []struct {
		name    string
		results []*Result
		met     map[string]bool
		missing []string
		result  map[string]float64
	}{
		{"all measured", full,
			map[string]bool{"P1": true, "P1b": false, "P2": false, "P3": true, "P5": true, "P6": false}, nil,
			map[string]float64{"P1": 1.8, "P1b": 6000.0 / 9000, "P2": 4000, "P3": 1.1, "P6": 120}},
		{"nothing measured", nil, map[string]bool{}, []string{"P1", "P1b", "P2", "P3", "P5", "P6"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := &Report{Results: tc.results}
			goals := rep.goals()
			if len(goals) != 6 {
				t.Fatalf("%d rows, want 6", len(goals))
			}
			for _, g := range goals {
				if want, ok := tc.met[g.ID]; ok && g.Met != want {
					t.Errorf("%s met = %v, want %v (%+v)", g.ID, g.Met, want, g)
				}
				if want, ok := tc.result[g.ID]; ok && (g.Result < want-1e-9 || g.Result > want+1e-9) {
					t.Errorf("%s result = %v, want %v", g.ID, g.Result, want)
				}
			}
			for _, id := range tc.missing {
				for _, g := range goals {
					if g.ID == id && (g.Missing == "" || g.Met) {
						t.Errorf("%s: want missing and not met, got %+v", id, g)
					}
				}
			}
			md := goalsMarkdown(goals)
			for _, g := range goals {
				if !strings.Contains(md, "| "+g.ID+" |") {
					t.Errorf("markdown lacks row %s", g.ID)
				}
			}
			if svg := GoalsPlot(goals); !strings.HasPrefix(svg, "<svg") || !strings.HasSuffix(svg, "</svg>") {
				t.Errorf("plot is not an SVG document")
			}
		})
	}
}
