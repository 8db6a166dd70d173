package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Report is one bench run: where it ran, how, and what it measured.
type Report struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Command  string    `json:"command"`
	Machine  Machine   `json:"machine"`
	Settings Settings  `json:"settings"`
	Results  []*Result `json:"results"`
	// Goals are issue 17's rows, computed from Results when written.
	Goals    []Goal   `json:"goals,omitempty"`
	Notes    []string `json:"notes,omitempty"`
	Problems []string `json:"problems,omitempty"`
}

// Machine describes the host, because every figure depends on it.
type Machine struct {
	CPUs      int     `json:"cpus"`
	CPUModel  string  `json:"cpu_model"`
	MemoryGiB float64 `json:"memory_gib"`
	Kernel    string  `json:"kernel"`
	OS        string  `json:"os"`
	Go        string  `json:"go"`
	OPA       string  `json:"opa,omitempty"`
	Postgres  string  `json:"postgres,omitempty"`
	Bwrap     string  `json:"bwrap,omitempty"`
	LoadStart float64 `json:"load_avg_start"`
	LoadEnd   float64 `json:"load_avg_end,omitzero"`
}

// Settings are the run's knobs.
type Settings struct {
	Scenarios       []string  `json:"scenarios"`
	Duration        string    `json:"duration"`
	Warmup          string    `json:"warmup"`
	Clients         []int     `json:"clients"`
	Rates           []float64 `json:"rate_fractions"`
	MaxInflight     int       `json:"max_inflight"`
	ExecInflight    int       `json:"exec_inflight"`
	GatewayLogLevel string    `json:"gateway_log_level"`
	OPALogLevel     string    `json:"opa_log_level"`
}

// Result is one load run of one system.
type Result struct {
	Scenario     string  `json:"scenario"`
	System       string  `json:"system"`
	Mode         string  `json:"mode"` // closed | open
	Clients      int     `json:"clients"`
	Rate         float64 `json:"rate,omitempty"`          // open loop: ops/s due
	RateFraction float64 `json:"rate_fraction,omitempty"` // of the closed-loop best
	Unit         string  `json:"unit"`
	ItemsPerOp   int     `json:"items_per_op"`
	Throughput   float64 `json:"throughput"` // items/s
	OpsPerSec    float64 `json:"ops_per_sec"`
	Ops          int64   `json:"ops"`
	Errors       int64   `json:"errors"` // non-2xx + transport + dropped
	Non2xx       int64   `json:"non_2xx"`
	Transport    int64   `json:"transport_errors"`
	Dropped      int64   `json:"dropped"`
	FirstError   string  `json:"first_error,omitempty"`
	ElapsedS     float64 `json:"elapsed_s"`
	P50ms        float64 `json:"p50_ms"`
	P99ms        float64 `json:"p99_ms"`
	P999ms       float64 `json:"p99_9_ms"`
	Maxms        float64 `json:"max_ms"`
	// CPU per item (call, decision, run or event, as the unit says): the
	// measured process' user+system time, its waited-for children
	// included, over the window, divided by the items sent.
	CPUmsPerOp      float64 `json:"cpu_ms_per_op"`
	ChildCPUmsPerOp float64 `json:"child_cpu_ms_per_op"`
	DBCPUmsPerOp    float64 `json:"db_cpu_ms_per_op,omitempty"`
	// GenCPUmsPerOp is the load generator's (this process') CPU per item,
	// for systems in other processes: with the server's and the
	// database's, it shows whether the two cores were saturated.
	GenCPUmsPerOp float64 `json:"gen_cpu_ms_per_op,omitempty"`
	CPUScope      string  `json:"cpu_scope"`
	PeakRSSMB     float64 `json:"peak_rss_mb"`
	Load1         float64 `json:"load_avg_1m"`
	Note          string  `json:"note,omitempty"`
	Distribution  []Point `json:"distribution"`
}

// Point is one percentile of a latency distribution.
type Point struct {
	Q  float64 `json:"q"`
	Ms float64 `json:"ms"`
}

// Load is the clients or rate column.
func (r *Result) Load() string {
	if r.Mode == "open" {
		return fmt.Sprintf("%.0f/s", r.Rate*float64(max(r.ItemsPerOp, 1)))
	}
	return fmt.Sprintf("c=%d", r.Clients)
}

// label names a result in plots.
func (r *Result) label() string {
	if r.Mode == "open" {
		return fmt.Sprintf("%s open %.0f%% (%s)", r.System, r.RateFraction*100, r.Load())
	}
	return fmt.Sprintf("%s %s", r.System, r.Load())
}

func describeMachine(ctx context.Context, env *benchEnv, opaVersion string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), OPA: opaVersion, LoadStart: loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		for line := range strings.SplitSeq(string(b), "\n") {
			if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
				m.MemoryGiB = float64(kb) / (1 << 20)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	if out, err := exec.CommandContext(ctx, "bwrap", "--version").Output(); err == nil {
		m.Bwrap = strings.TrimSpace(string(out))
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(cctx, env.adminURL); err == nil {
		_ = conn.QueryRow(cctx, "SHOW server_version").Scan(&m.Postgres)
		conn.Close(context.Background())
	}
	return m
}

// write writes results.json, results.md and the plots into dir.
func (rep *Report) write(dir string) error {
	rep.Goals = rep.goals()
	if err := os.WriteFile(filepath.Join(dir, "goals.svg"), []byte(GoalsPlot(rep.Goals)), 0o644); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		return err
	}
	plots, err := rep.writePlots(dir)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(rep.markdown(plots)), 0o644)
}

// scenarioOrder is the order of scenarios in reports.
func (rep *Report) scenarioOrder() []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rep.Results {
		if !seen[r.Scenario] {
			seen[r.Scenario] = true
			out = append(out, r.Scenario)
		}
	}
	return out
}

// markdown renders the results table.
func (rep *Report) markdown(plots []string) string {
	var b strings.Builder
	m := rep.Machine
	fmt.Fprintf(&b, "# Benchmark results\n\n")
	fmt.Fprintf(&b, "Run %s, `%s`.\n\n", rep.Started.Format(time.RFC3339), rep.Command)
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %.1f GiB, %s, kernel %s; %s", m.CPUs, m.CPUModel, m.MemoryGiB, m.OS, m.Kernel, m.Go)
	if m.OPA != "" {
		fmt.Fprintf(&b, ", OPA %s", m.OPA)
	}
	if m.Postgres != "" {
		fmt.Fprintf(&b, ", PostgreSQL %s", m.Postgres)
	}
	if m.Bwrap != "" {
		fmt.Fprintf(&b, ", %s", m.Bwrap)
	}
	fmt.Fprintf(&b, ". Load average (1 min) %.2f at the start", m.LoadStart)
	if m.LoadEnd > 0 {
		fmt.Fprintf(&b, ", %.2f at the end", m.LoadEnd)
	}
	fmt.Fprintf(&b, ".\n\n")
	b.WriteString(goalsMarkdown(rep.Goals))
	b.WriteString("## All runs\n\n")
	s := rep.Settings
	fmt.Fprintf(&b, "Each run: %s measured after a %s closed-loop warm-up; closed loop at %v clients, then open loop at %v of the "+
		"system's best closed-loop throughput (at most %d requests in flight, %d for exec). Open-loop latency is measured from each "+
		"request's intended send time (coordinated omission corrected). Log levels: gateway %s, OPA %s.\n\n",
		s.Duration, s.Warmup, s.Clients, s.Rates, s.MaxInflight, s.ExecInflight, s.GatewayLogLevel, s.OPALogLevel)
	fmt.Fprintf(&b, "| scenario | system | mode | clients / rate | throughput | p50 ms | p99 ms | p99.9 ms | CPU ms/item | DB CPU ms/item | gen CPU ms/item | peak RSS MB | errors | load |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, sc := range rep.scenarioOrder() {
		for _, r := range rep.Results {
			if r.Scenario != sc {
				continue
			}
			db, gen := "", ""
			if r.DBCPUmsPerOp > 0 {
				db = fmt.Sprintf("%.3f", r.DBCPUmsPerOp)
			}
			if r.GenCPUmsPerOp > 0 {
				gen = fmt.Sprintf("%.3f", r.GenCPUmsPerOp)
			}
			errs := "0"
			if r.Errors > 0 {
				errs = fmt.Sprintf("**%d** (%d non-2xx, %d transport, %d dropped)", r.Errors, r.Non2xx, r.Transport, r.Dropped)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s %s | %s | %s | %s | %.3f | %s | %s | %.0f | %s | %.1f |\n",
				r.Scenario, r.System, r.Mode, r.Load(), fmtNum(r.Throughput), r.Unit,
				fmtMs(r.P50ms), fmtMs(r.P99ms), fmtMs(r.P999ms), r.CPUmsPerOp, db, gen, r.PeakRSSMB, errs, r.Load1)
		}
	}
	fmt.Fprintf(&b, "\nLatencies are per request (for raw-copyfrom, per 500-row COPY; for writer, per decision + outcome pair). "+
		"CPU ms/item is the measured process' user+system time (children included) over the window divided by the items "+
		"(calls, decisions, runs, events) sent; \"DB CPU\" is the PostgreSQL backends serving the run's database plus the "+
		"server's WAL writer, checkpointer and background writer (shared with anything else using that server); \"gen CPU\" is the load generator's own CPU (HTTP client), "+
		"for systems measured in another process. Peak RSS is the process' VmHWM since it started "+
		"(so it only grows across a system's runs). For `self` systems (bare-bwrap, fork-exec, writer, raw-copyfrom) both "+
		"include the load generator.\n\n")
	fmt.Fprintf(&b, "## Systems\n\n")
	seen := map[string]bool{}
	for _, r := range rep.Results {
		k := r.Scenario + "/" + r.System
		if seen[k] {
			continue
		}
		seen[k] = true
		fmt.Fprintf(&b, "- `%s` `%s`: %s. CPU: %s.\n", r.Scenario, r.System, r.Note, r.CPUScope)
	}
	if len(rep.Results) > 0 {
		fmt.Fprintf(&b, "\n## Errors\n\n")
		anyErr := false
		for _, r := range rep.Results {
			if r.Errors > 0 {
				anyErr = true
				fmt.Fprintf(&b, "- %s %s %s: %d errors; first: `%s`\n", r.Scenario, r.System, r.Load(), r.Errors, truncate(r.FirstError, 300))
			}
		}
		if !anyErr {
			fmt.Fprintf(&b, "None: every request of every run succeeded.\n")
		}
	}
	if len(plots) > 0 {
		fmt.Fprintf(&b, "\n## Latency plots\n\n")
		for _, p := range plots {
			fmt.Fprintf(&b, "![%s](%s)\n\n", strings.TrimSuffix(p, ".svg"), p)
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	if len(rep.Problems) > 0 {
		fmt.Fprintf(&b, "\n## Problems\n\n")
		for _, p := range rep.Problems {
			fmt.Fprintf(&b, "- %s\n", strings.ReplaceAll(truncate(p, 2000), "\n", " "))
		}
	}
	return b.String()
}

func fmtNum(v float64) string {
	switch {
	case v >= 100:
		return commas(int64(v + 0.5))
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func fmtMs(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// writePlots writes one percentile-distribution SVG per scenario and loop
// mode, and returns their file names.
func (rep *Report) writePlots(dir string) ([]string, error) {
	var names []string
	for _, sc := range rep.scenarioOrder() {
		for _, mode := range []string{"closed", "open"} {
			var series []Series
			for _, r := range rep.Results {
				if r.Scenario == sc && r.Mode == mode {
					series = append(series, Series{Label: r.label(), Points: r.Distribution})
				}
			}
			if len(series) == 0 {
				continue
			}
			title := fmt.Sprintf("%s: latency by percentile, %s loop", sc, mode)
			if mode == "open" {
				title += " (from intended send time)"
			}
			name := fmt.Sprintf("%s-%s.svg", sc, mode)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(PercentilePlot(title, series)), 0o644); err != nil {
				return nil, err
			}
			names = append(names, name)
		}
	}
	return names, nil
}
