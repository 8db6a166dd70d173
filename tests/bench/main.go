// Command bench runs Portcullis' side-by-side load benchmarks on loopback:
// the real gateway binary against `opa run --server`, bare bubblewrap,
// fork/exec and a raw PostgreSQL COPY, each under the same load generator,
// and writes a results table, JSON and latency plots to a folder.
//
//	go run ./tests/bench                        # every scenario, 10 s per run
//	go run ./tests/bench -quick                 # a smoke run in about two minutes
//	go run ./tests/bench -scenarios decision,exec -duration 20s -out /tmp/b
//
// Scenarios: decision (POST /v1/decisions vs OPA's data API), fsread
// (governed fs.read with durable evidence on PostgreSQL and SQLite vs OPA
// with decision logs to a file), exec (Exec /bin/true through the gateway on
// the process and bwrap backends vs bare bwrap vs fork/exec), evidence (the
// evidence writer alone vs a raw CopyFrom ceiling), upstream (an MCP
// client calling server-everything's echo directly vs through the gateway). Every system runs
// closed loop at each -clients count, then open loop at -rates fractions of
// its best closed-loop throughput, with latency measured from each
// request's intended send time.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is the command line.
type config struct {
	scenarios       []string
	duration        time.Duration
	warmup          time.Duration
	clients         []int
	rates           []float64 // open-loop rates as fractions of the closed-loop max
	maxInflight     int       // open loop: most requests in flight (HTTP scenarios)
	execInflight    int       // open loop: most requests in flight (exec scenario)
	out             string
	gatewayBin      string
	opaBin          string
	dbURL           string
	repo            string
	keep            bool
	gatewayLogLevel string
	gatewayDebug    string // debug.listen of the gateways under test, "" for none
	opaLogLevel     string
	render          string // re-render this results.json instead of running
	// quota gives the fs.read grant a quota (config.quotas) so every call
	// draws on a counter in the evidence store (issue 15's cost check).
	quota bool
	// noOPA skips the OPA systems (no opa binary to build).
	noOPA bool
	// execBackends are the gateway backends the exec scenario measures.
	execBackends []string
}

var allScenarios = []string{"decision", "fsread", "exec", "evidence"}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if cfg.render != "" {
		if err := render(cfg.render, cfg.out); err != nil {
			logf("%v", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		logf("%v", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var (
		scenarios = fs.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios: "+strings.Join(allScenarios, ", "))
		duration  = fs.Duration("duration", 10*time.Second, "measured window of each run")
		warmup    = fs.Duration("warmup", 2*time.Second, "unmeasured closed-loop warm-up before each closed-loop run")
		clients   = fs.String("clients", "16,64", "closed-loop client counts")
		rates     = fs.String("rates", "0.5,0.8", "open-loop arrival rates, as fractions of the system's best closed-loop throughput")
		execBacks = fs.String("exec-backends", "process,bwrap", "gateway backends of the exec scenario (bwrap alone is enough for P3)")
		quick     = fs.Bool("quick", false, "a fast smoke run: 2 s windows, 0.5 s warm-up, 16 clients, one open-loop rate (0.5)")
		c         = &config{}
	)
	fs.IntVar(&c.maxInflight, "max-inflight", 512, "open loop: most requests in flight at once (HTTP scenarios)")
	fs.IntVar(&c.execInflight, "exec-inflight", 64, "open loop: most requests in flight at once (exec scenario)")
	fs.StringVar(&c.out, "out", "", "output folder (default ./bench-results/<timestamp>)")
	fs.StringVar(&c.gatewayBin, "gateway", "", "prebuilt gateway binary, with portcullis-exec-helper beside it (default: go build ./cmd/gateway)")
	fs.StringVar(&c.opaBin, "opa", "", "opa binary (default: <repo>/.tools/bin/opa, go-installed at go.mod's version when missing)")
	fs.StringVar(&c.dbURL, "db", envOr("PORTCULLIS_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "PostgreSQL admin URL; scratch databases are created and dropped there")
	fs.StringVar(&c.repo, "repo", "", "module root (default: found from the working directory)")
	fs.StringVar(&c.render, "render", "", "re-render results.md and the plots from this results.json into -out (default: its folder), running nothing")
	fs.BoolVar(&c.quota, "quota", false, "give the fs.read grant a quota (a counter drawn per call, never reached) to measure what quotas cost")
	fs.BoolVar(&c.noOPA, "no-opa", false, "skip the OPA systems of the decision and fsread scenarios")
	fs.BoolVar(&c.keep, "keep", false, "keep the work directory (configs, server logs, OPA decision logs)")
	fs.StringVar(&c.gatewayLogLevel, "gateway-log-level", "info", "gateway log_level (info logs one line per request, the default deployment)")
	fs.StringVar(&c.gatewayDebug, "gateway-debug", "", "debug.listen of the gateways under test (loopback pprof, e.g. 127.0.0.1:6060), to profile them during a run")
	fs.StringVar(&c.opaLogLevel, "opa-log-level", "info", "opa --log-level (info logs two lines per request, OPA's default)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.duration, c.warmup = *duration, *warmup
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["duration"] {
			c.duration = 2 * time.Second
		}
		if !set["warmup"] {
			c.warmup = 500 * time.Millisecond
		}
		if !set["clients"] {
			*clients = "16"
		}
		if !set["rates"] {
			*rates = "0.5"
		}
	}
	for s := range strings.SplitSeq(*scenarios, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		known := false
		for _, a := range allScenarios {
			known = known || a == s
		}
		if !known {
			return nil, fmt.Errorf("-scenarios: unknown scenario %q (want %s)", s, strings.Join(allScenarios, ", "))
		}
		c.scenarios = append(c.scenarios, s)
	}
	if len(c.scenarios) == 0 {
		return nil, errors.New("-scenarios: none given")
	}
	for s := range strings.SplitSeq(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-clients: bad count %q", s)
		}
		c.clients = append(c.clients, n)
	}
	for s := range strings.SplitSeq(*rates, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f <= 0 || f > 2 {
			return nil, fmt.Errorf("-rates: bad fraction %q (want 0 < f ≤ 2)", s)
		}
		c.rates = append(c.rates, f)
	}
	for s := range strings.SplitSeq(*execBacks, ",") {
		switch s = strings.TrimSpace(s); s {
		case "":
		case "process", "bwrap":
			c.execBackends = append(c.execBackends, s)
		default:
			return nil, fmt.Errorf("-exec-backends: unknown backend %q (want process, bwrap)", s)
		}
	}
	if c.duration <= 0 {
		return nil, errors.New("-duration must be > 0")
	}
	if c.maxInflight < 1 || c.execInflight < 1 {
		return nil, errors.New("-max-inflight and -exec-inflight must be ≥ 1")
	}
	return c, nil
}

// render rewrites results.md and the plots of a finished run from its
// results.json, e.g. after a change to the report's layout.
func render(jsonPath, out string) error {
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", jsonPath, err)
	}
	if out == "" {
		out = filepath.Dir(jsonPath)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return rep.write(out)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// findRepo walks up from the working directory to the module root.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/portcullis/portcullis\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the github.com/portcullis/portcullis module (use -repo)")
		}
		dir = parent
	}
}

func run(ctx context.Context, cfg *config) error {
	if runtime.GOOS != "linux" {
		return errors.New("the benchmarks read /proc and need Linux")
	}
	var err error
	if cfg.repo == "" {
		if cfg.repo, err = findRepo(); err != nil {
			return err
		}
	}
	started := time.Now()
	if cfg.out == "" {
		cfg.out = filepath.Join("bench-results", started.Format("20060102-150405"))
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "portcullis-bench-")
	if err != nil {
		return err
	}
	if cfg.keep {
		logf("work directory kept: %s", work)
	} else {
		defer os.RemoveAll(work)
	}
	env, err := setupEnv(cfg.repo, work, cfg)
	if err != nil {
		return err
	}
	defer env.cleanup()

	needs := map[string]bool{}
	for _, s := range cfg.scenarios {
		needs[s] = true
	}
	if needs["decision"] || needs["fsread"] || needs["exec"] || needs["upstream"] {
		if cfg.gatewayBin != "" {
			env.gatewayBin, err = filepath.Abs(cfg.gatewayBin)
		} else {
			logf("building the gateway and the exec helper")
			env.gatewayBin, err = buildGateway(ctx, cfg.repo, filepath.Join(work, "bin"))
		}
		if err != nil {
			return err
		}
	}
	var opaVer string
	if (needs["decision"] || needs["fsread"]) && !cfg.noOPA {
		if env.opaBin, opaVer, err = ensureOPA(ctx, cfg.repo, cfg.opaBin); err != nil {
			return err
		}
	}

	rep := &Report{
		Started: started.UTC(),
		Machine: describeMachine(ctx, env, opaVer),
		Settings: Settings{
			Scenarios: cfg.scenarios, Duration: cfg.duration.String(), Warmup: cfg.warmup.String(),
			Clients: cfg.clients, Rates: cfg.rates, MaxInflight: cfg.maxInflight, ExecInflight: cfg.execInflight,
			GatewayLogLevel: cfg.gatewayLogLevel, OPALogLevel: cfg.opaLogLevel,
		},
		Command: "go run ./tests/bench " + strings.Join(os.Args[1:], " "),
	}
	logf("machine: %s, %d CPUs, load average %.2f", rep.Machine.CPUModel, rep.Machine.CPUs, rep.Machine.LoadStart)
	r := &runner{cfg: cfg, env: env, report: rep}
	for _, s := range cfg.scenarios {
		var err error
		switch s {
		case "decision":
			err = r.decisionScenario(ctx)
		case "fsread":
			err = r.fsreadScenario(ctx)
		case "exec":
			err = r.execScenario(ctx)
		case "evidence":
			err = r.evidenceScenario(ctx)
		default:
			err = moreScenarios[s](r, ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			// A broken system must not hide the others: record and go on.
			logf("scenario %s: %v", s, err)
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %v", s, err))
		}
		if err := rep.write(cfg.out); err != nil { // keep partial results
			return err
		}
	}
	rep.Machine.LoadEnd = loadAvg()
	rep.Finished = time.Now().UTC()
	if err := rep.write(cfg.out); err != nil {
		return err
	}
	logf("results in %s (results.md, results.json, *.svg)", cfg.out)
	if len(rep.Problems) > 0 {
		return fmt.Errorf("%d problem(s); see results.md", len(rep.Problems))
	}
	return nil
}
