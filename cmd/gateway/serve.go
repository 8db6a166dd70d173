package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/bundles"
	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/postgres"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/gateway"
	"github.com/portcullis/portcullis/gateway/statedir"
	"github.com/portcullis/portcullis/policies"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/tools/coderun"
	exectool "github.com/portcullis/portcullis/tools/exec"
	fstool "github.com/portcullis/portcullis/tools/fs"
	"github.com/portcullis/portcullis/tools/httpget"
	"github.com/portcullis/portcullis/tools/readresult"
	"github.com/portcullis/portcullis/upstream"
	"github.com/portcullis/portcullis/wire"
)

// shutdownGrace bounds how long in-flight calls may finish after SIGTERM.
const shutdownGrace = 60 * time.Second

type serveFlags struct {
	dev        bool
	configPath string
	listen     string
}

func serveCmd() *cobra.Command {
	var f serveFlags
	c := &cobra.Command{
		Use:   "serve [--dev] [--config FILE] [--listen ADDR]",
		Short: "run the gateway",
		Long: `Run the gateway. With --dev and no config: the embedded store, the shipped
policy and a generated API key per role, printed once.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return cmdServe(c.Context(), f, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	fs := c.Flags()
	fs.BoolVar(&f.dev, "dev", false, "development mode: embedded store, shipped policy, generated keys printed once")
	fs.StringVar(&f.configPath, "config", os.Getenv("PORTCULLIS_CONFIG"), "config file (YAML)")
	fs.StringVar(&f.listen, "listen", "", "listen address, overrides the config")
	return c
}

func cmdServe(ctx context.Context, f serveFlags, stdout, stderr io.Writer) error {
	// Before any secret is read: nothing of this process (environment,
	// memory, open files) is readable through /proc by another process of
	// its user, such as a program on the process backend.
	if err := nonDumpable(); err != nil {
		return fmt.Errorf("making the gateway non-dumpable: %w", err)
	}
	cfg, devKeys, err := loadServeConfig(f)
	if err != nil {
		return err
	}
	logOut := newLogWriter(stderr)
	defer logOut.Close()
	log := newLogger(logOut, cfg.LogLevel)
	configFileWarning(f.configPath, log)
	warnUnknownEnv(func(name, nearest string) {
		log.Warn("unknown environment variable ignored", "name", name, "did_you_mean", nearest)
	})
	if err := tuneGC(cfg.Runtime, os.Getenv, log); err != nil {
		return err
	}
	startupDone := startupGC()
	shutdownTracing, err := setupTracing(ctx, log)
	if err != nil {
		return err
	}
	defer shutdownTracing()

	warnUnbuilt(cfg, log)
	st, err := openStack(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.close()
	ev, err := startEvidenceServices(ctx, cfg, f.dev, st, log)
	if err != nil {
		return err
	}
	defer ev.stop()
	// The upstreams' secrets named by environment variable are read now,
	// before the environment is scrubbed; they stay in memory only.
	ups, err := newUpstreams(cfg, st, log)
	if err != nil {
		return err
	}
	// Everything that reads the environment has (config, Deno path,
	// tracing): the secrets in it go.
	if names := scrubEnv(); len(names) > 0 {
		log.Info("secret-shaped and PORTCULLIS_* variables removed from the gateway's environment after reading", "names", names)
	}
	if err := ev.recover(ctx, log); err != nil {
		return err
	}

	srv, ident, err := newServer(ctx, cfg, st, ev, ups, log)
	if err != nil {
		return err
	}
	if ups != nil {
		ups.Start(ctx, srv, gateway.PinStore{S: srv})
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	dbg, err := startDebug(cfg.Debug.Listen, log)
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer dbg.close()
	hs := httpServer(cfg, srv, ident, log)
	if devKeys != nil {
		base := "http://" + ln.Addr().String()
		if ident.tls != nil {
			base = "https://" + ln.Addr().String()
		}
		printDevBanner(stdout, base, cfg, st, devKeys)
	}
	logListening(log, ln, st, ident)
	startupDone()

	go reloadOnHUP(ctx, st, log)
	go st.policy.manager.Run(ctx)
	go srv.Run(ctx)
	ident.run(ctx, log)
	if err := serveUntilDone(ctx, hs, ln); err != nil {
		return err
	}
	return shutdown(hs, srv, st, log)
}

// startupGC runs the start-up at Go's default gc_percent 100 (or lower,
// if configured lower): start-up (the bundle's parse, compile and index,
// the store's migrations) is mostly garbage, made once, and at the serving
// gc_percent (400 by default) the heap grew to ~70 MB for the shipped
// library while ~8 MB stayed live; that start-up peak was the gateway's
// peak RSS (docs/performance.md, P6). The function it returns collects the
// start-up's garbage, before the first request, and puts the serving
// value back. The collector sets its next goal from the heap live at the
// end of a cycle, times (1 + gc_percent/100): the last start-up cycle saw
// ~11-15 MB live where ~4 MB stay (16 MB of it goose's migration parser
// buffers, held in a sync.Pool), and at gc_percent 400 let the heap grow
// to 60-77 MB under the first load. Twice: a sync.Pool's objects survive
// one collection in its victim cache. A few milliseconds, once.
func startupGC() (done func()) {
	servingGC := debug.SetGCPercent(-1)
	debug.SetGCPercent(min(servingGC, 100))
	if servingGC < 0 {
		debug.SetGCPercent(servingGC) // off (memory_limit alone): left so
	}
	return func() {
		runtime.GC()
		runtime.GC()
		debug.SetGCPercent(servingGC)
	}
}

// serveUntilDone serves hs on ln until ctx ends (nil: shut down next) or
// serving fails.
func serveUntilDone(ctx context.Context, hs *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() {
		if hs.TLSConfig != nil {
			// Certificates come from the TLS config (reloaded), not files.
			errc <- hs.ServeTLS(ln, "", "")
			return
		}
		errc <- hs.Serve(ln)
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		return nil
	}
}

// newServer is the gateway's HTTP API over the opened stack: its metrics
// registry, the configured principals, proxies and identity providers.
func newServer(ctx context.Context, cfg config.Config, st *stack, ev *evidenceServices, ups *upstream.Manager, log *slog.Logger) (*gateway.Server, *identityStack, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoGauge())
	if err := st.policy.metrics.Register(reg); err != nil {
		return nil, nil, err
	}
	reg.MustRegister(memoMetrics(st.policy.engine)...)
	if err := st.evMetrics.register(reg); err != nil {
		return nil, nil, err
	}
	keys, err := principalKeys(cfg.Principals)
	if err != nil {
		return nil, nil, err
	}
	proxies, err := cfg.TrustedProxyNets()
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	ident, err := openIdentity(ctx, cfg, log)
	if err != nil {
		return nil, nil, err
	}
	opts := gateway.Options{
		Keys: keys, Policy: st.decider(), Evidence: st.writer, Receipts: st.store, Tools: st.tools,
		InstanceID: st.instanceID, MaxBodyBytes: cfg.MaxBodyBytes, Logger: log, Registry: reg,
		OpenAPI: gateway.OpenAPIDocument, PolicyRevision: st.revision, MCPAllowedOrigins: cfg.MCP.AllowedOrigins,
		PolicyAdmin: policyAdmin{st.policy.manager}, Explainer: st.engine, Auditor: ev.auditor, TrustedProxies: proxies,
		Late: ev.late, EvidenceTimeout: evidenceTimeout(cfg), Results: keeperOf(st.tools),
	}
	if opts.StateDirs, err = stateDirs(ctx, cfg, log); err != nil {
		return nil, nil, err
	}
	if ups != nil {
		opts.Upstreams = ups
	}
	if cs, ok := st.store.(evidence.ControlStore); ok {
		opts.Controls = cs
	}
	opts.Approvals = gateway.ApprovalOptions{MCPWait: cfg.Approvals.MCPWait.Std(), WebhookURL: cfg.Approvals.WebhookURL}
	ident.wire(&opts)
	return gateway.New(opts), ident, nil
}

// stateDirs are the per-session @state directories under
// data_dir/state, swept by sandbox.state_retention until ctx ends.
func stateDirs(ctx context.Context, cfg config.Config, log *slog.Logger) (*statedir.Dirs, error) {
	root, err := filepath.Abs(filepath.Join(cfg.DataDir, "state"))
	if err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	retention := cfg.Sandbox.StateRetention.Std()
	sd, err := statedir.New(statedir.Options{Root: root, Retention: retention, MaxPerPrincipal: cfg.Sandbox.StateMaxPerPrincipal, Logger: log})
	if err != nil {
		return nil, err
	}
	go sd.Run(ctx, statedir.SweepInterval(retention))
	return sd, nil
}

// httpServer serves srv with the configured HTTP bounds, over TLS when
// configured.
func httpServer(cfg config.Config, srv *gateway.Server, ident *identityStack, log *slog.Logger) *http.Server {
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: cfg.HTTP.ReadHeaderTimeout.Std(),
		ReadTimeout:       cfg.HTTP.ReadTimeout.Std(),
		WriteTimeout:      cfg.HTTP.WriteTimeout.Std(), // default 11 min: Exec may run 600 s
		IdleTimeout:       cfg.HTTP.IdleTimeout.Std(),
		MaxHeaderBytes:    int(cfg.HTTP.MaxHeaderBytes),
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if ident.tls != nil {
		hs.TLSConfig = ident.tls.Config()
	}
	hs.RegisterOnShutdown(srv.StopMCPStreams) // MCP GET streams would hold Shutdown to its grace
	return hs
}

// logListening says where and how the gateway serves, and what it refuses.
func logListening(log *slog.Logger, ln net.Listener, st *stack, ident *identityStack) {
	listening := []any{"addr", ln.Addr().String(), "instance_id", st.instanceID, "store", st.storeKind,
		"policy_revision", st.revision(), "exec_backend", st.backend}
	listening = append(listening, ident.logFields()...)
	if st.refused != "" {
		listening = append(listening, "exec_refused", st.refused)
	}
	if !st.engine.Ready() {
		listening = append(listening, "policy", "none active yet: calls are refused 503 backend_unavailable until a bundle activates")
	}
	log.Info("listening", listening...)
}

// shutdown finishes in-flight calls within shutdownGrace, records what
// late outcomes it can, and flushes the evidence writer.
func shutdown(hs *http.Server, srv *gateway.Server, st *stack, log *slog.Logger) error {
	log.Info("shutting down: finishing in-flight calls", "grace", shutdownGrace)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Error("shutdown did not finish in time", "err", err)
	}
	if n := srv.FlushLate(sctx); n > 0 {
		log.Warn("outcomes not recorded before stopping: they stay in the spool and the next start records them", "count", n)
	}
	if err := st.writer.Close(sctx); err != nil {
		log.Error("flushing evidence", "err", err)
		return err
	}
	log.Info("stopped")
	return nil
}

// warnUnbuilt says which configured settings serve does not act on itself, so
// an operator is never left believing a feature is on.
func warnUnbuilt(cfg config.Config, log *slog.Logger) {
	// Retention is a maintenance job, not part of serving: say so once, so
	// nobody assumes the server expires evidence by itself.
	log.Info("evidence.retention is applied by `gateway evidence retain` (run it from a scheduler), never by serve", "retention", cfg.Evidence.Retention.Std().String())
}

// devKey is a key generated for --dev, printed once and never stored in clear.
type devKey struct{ role, id, key string }

func loadServeConfig(f serveFlags) (config.Config, []devKey, error) {
	environ := os.Environ()
	cfg, err := config.Load(f.configPath, environ)
	if err != nil {
		return cfg, nil, err
	}
	if f.listen != "" {
		cfg.Listen = f.listen
	}
	var keys []devKey
	if f.dev {
		if f.configPath == "" && os.Getenv("PORTCULLIS_POLICY_BUNDLE") == "" {
			cfg.Policy.Bundle = config.ShippedBundle
		}
		if cfg.Evidence.CheckpointDir == "" {
			// Anchors for `evidence verify` (see devCheckpointDir).
			cfg.Evidence.CheckpointDir = filepath.Join(cfg.DataDir, devCheckpointDir)
		}
		for _, role := range []string{wire.RoleAgent, wire.RoleAuditor, wire.RoleAdmin} {
			k, err := newAPIKey()
			if err != nil {
				return cfg, nil, err
			}
			id := "dev-" + role
			sum := sha256.Sum256([]byte(k))
			cfg.Principals = append(cfg.Principals, config.Principal{ID: id, Roles: []string{role}, APIKeySHA256: hex.EncodeToString(sum[:])})
			keys = append(keys, devKey{role, id, k})
		}
		if err := cfg.Validate(); err != nil {
			return cfg, nil, err
		}
	}
	if len(cfg.Principals) == 0 && !cfg.Auth.JWT.Enabled() {
		return cfg, nil, errors.New("config: principals: none configured and auth.jwt off; every call would be refused (use --dev to try the gateway)")
	}
	return cfg, keys, nil
}

func newAPIKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "pcl_" + base64.RawURLEncoding.EncodeToString(b), nil
}

// printDevBanner says, on stdout and once, what --dev gave: the store, the
// policy actually loaded (the shipped one, or the config's bundle), the
// sandbox, what is refused and why, and the keys.
func printDevBanner(w io.Writer, base string, cfg config.Config, st *stack, keys []devKey) {
	store := "embedded store in " + cfg.DataDir
	if st.storeKind == "postgres" {
		store = "PostgreSQL store"
	}
	fmt.Fprintf(w, "Portcullis dev mode: %s.\n", store)
	fmt.Fprintf(w, "Policy: %s.\n", policyDescription(cfg, st))
	if st.refused != "" {
		fmt.Fprintf(w, "Exec and code.run: REFUSED (503 sandbox_unavailable): %s.\n", st.refused)
		fmt.Fprintf(w, "Everything else (fs.*, http.get, evidence, policy) works.\n")
	} else {
		fmt.Fprintf(w, "Exec and code.run: sandbox backend %s.\n", st.backend)
	}
	fmt.Fprintf(w, "API keys (shown once, not stored):\n")
	for _, k := range keys {
		fmt.Fprintf(w, "  %-8s %-12s %s\n", k.role, k.id, k.key)
	}
	if st.refused != "" {
		fmt.Fprintf(w, "\nTry:\n  curl -s -H 'Authorization: Bearer %s' %s/v1/tools\n\n", keys[0].key, base)
		return
	}
	fmt.Fprintf(w, "\nTry:\n  curl -s -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' \\\n"+
		"    -d '{\"tool\":\"Exec\",\"input\":{\"argv\":[\"/usr/bin/uname\",\"--version\"]}}' %s/v1/tool-calls\n\n",
		keys[0].key, base)
}

// policyDescription names the policy serve loaded: the shipped library or
// the configured bundle, with its revision, or that none is active yet.
func policyDescription(cfg config.Config, st *stack) string {
	src := "the shipped policy (compiled into the binary)"
	if cfg.Policy.Bundle != config.ShippedBundle {
		src = "bundle " + cfg.Policy.Bundle
	}
	if rev := st.revision(); rev != "" {
		return src + ", revision " + rev
	}
	return src + ": NONE ACTIVE YET (every call is refused 503 backend_unavailable while the gateway retries)"
}

func principalKeys(ps []config.Principal) ([]gateway.Key, error) {
	out := make([]gateway.Key, 0, len(ps))
	for _, p := range ps {
		if p.APIKeySHA256 == "" && p.ClientCertSubject != "" {
			continue // authenticates by client certificate only
		}
		var k gateway.Key
		b, err := hex.DecodeString(p.APIKeySHA256)
		if err != nil || len(b) != 32 {
			return nil, fmt.Errorf("principal %s: bad api_key_sha256", p.ID)
		}
		copy(k.SHA256[:], b)
		attrs := p.Attributes
		if attrs == nil {
			attrs = map[string]any{}
		}
		k.Principal = wire.Principal{ID: p.ID, Roles: p.Roles, Attributes: attrs}
		out = append(out, k)
	}
	return out, nil
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(gateway.TraceLogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})))
}

// stack is the gateway's parts, opened once and closed in reverse.
type stack struct {
	evMetrics  *evidenceMetrics
	store      evidence.Store
	storeKind  string
	writer     *evidence.Writer
	engine     *policies.Engine
	policy     *policyStack
	tools      []tools.Tool
	backend    string
	refused    string // why Exec and code.run are refused ("" when they run)
	instanceID string
	sandbox    upstream.Sandbox // launches stdio upstreams; nil without bwrap
}

func (s *stack) revision() string {
	if info, ok := s.engine.Info(); ok {
		return info.Revision
	}
	return ""
}

func (s *stack) close() {
	if s.policy != nil && s.policy.shadow != nil {
		s.policy.shadow.Close() // drain before the evidence writer closes
	}
	if s.writer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.writer.Close(ctx)
		cancel()
	}
	if s.store != nil {
		_ = s.store.Close()
	}
}

func openStore(ctx context.Context, cfg config.Config) (evidence.Store, string, error) {
	if cfg.DatabaseURL != "" {
		st, err := postgres.Open(ctx, cfg.DatabaseURL)
		if err != nil {
			return nil, "", fmt.Errorf("opening the PostgreSQL evidence store: %w", err)
		}
		return st, "postgres", nil
	}
	path, err := sqlitePath(cfg)
	if err != nil {
		return nil, "", err
	}
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, "", fmt.Errorf("opening the embedded evidence store: %w", err)
	}
	return st, "sqlite", nil
}

func openStack(ctx context.Context, cfg config.Config, log *slog.Logger) (*stack, error) {
	st := &stack{instanceID: instanceID(cfg)}
	// data_dir holds evidence, the dev signing key and archived bundles:
	// the gateway's alone (0700, files 0600), whatever the store.
	if err := privateDataDir(cfg, log); err != nil {
		return nil, err
	}
	var err error
	st.store, st.storeKind, err = openStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if l, ok := st.store.(interface{ SetLogger(*slog.Logger) }); ok {
		l.SetLogger(log)
	}
	st.evMetrics = newEvidenceMetrics()
	st.writer = evidence.NewWriter(st.store, evidence.WriterOptions{InstanceID: st.instanceID, Logger: log,
		CommitTimeout: time.Duration(cfg.Evidence.CommitTimeout), Observe: st.evMetrics.observe})
	st.evMetrics.writer = st.writer

	runner, err := chooseRunner(ctx, cfg, log)
	if err != nil {
		st.close()
		return nil, err
	}
	st.backend = runner.Name()
	if sb, ok := runner.(upstream.Sandbox); ok {
		st.sandbox = sb
	}
	st.refused = refusal(runner)
	st.tools = newTools(cfg, runner, log, ctx.Done())
	// The policy loads after the tools: bundles are type-checked against
	// the tools' input schemas.
	if st.policy, err = openPolicy(ctx, cfg, log, st.tools, evidenceRecorder{st.writer}, true); err != nil {
		st.close()
		return nil, err
	}
	st.engine = st.policy.engine
	if cfg.Policy.ShadowBundle != "" {
		if err := st.policy.openShadow(ctx, cfg, log, st.tools, evidenceRecorder{st.writer}); err != nil {
			st.close()
			return nil, err
		}
	}
	return st, nil
}

// helperName is the small rlimit helper binary; installed beside the gateway
// it saves the gateway's own start-up cost on every Exec.
const helperName = "portcullis-exec-helper"

// helperPath returns the sibling helper when there is one, else "" (the
// runner then re-executes the gateway binary itself).
func helperPath(log *slog.Logger) string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(self), helperName)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		log.Info("using the exec helper beside the gateway binary", "path", p)
		return p
	}
	return ""
}

// instanceID names this gateway in evidence: configured, or derived from the
// host name and data directory so a restart on the same host finds its own
// unfinished calls.
func instanceID(cfg config.Config) string {
	if cfg.InstanceID != "" {
		return cfg.InstanceID
	}
	host, _ := os.Hostname()
	dir, _ := filepath.Abs(cfg.DataDir)
	sum := sha256.Sum256([]byte(dir + "\x00" + cfg.DatabaseURL))
	return strings.ToLower(host) + "-" + hex.EncodeToString(sum[:4])
}

// reloadOnHUP reloads the policy on SIGHUP through the same checks as any
// activation; a refused bundle leaves the previous one live.
func reloadOnHUP(ctx context.Context, st *stack, log *slog.Logger) {
	onSIGHUP(ctx, func() {
		res, err := st.policy.manager.Reload(ctx, bundles.TriggerSignal)
		if err != nil {
			return // logged, with the reason, by the manager
		}
		log.Info("policy reload on SIGHUP", "status", res.Status, "revision", res.Policy.Revision, "digest", res.Policy.Digest)
	})
}

// onSIGHUP calls f on every SIGHUP, one at a time, until ctx ends.
func onSIGHUP(ctx context.Context, f func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			f()
		}
	}
}

// newTools is the gateway's tool set, the one place it is listed: serve
// runs these, and `policy schema` describes the same.
// stop is closed when serve shuts down: the file tools then abandon their
// read-only calls in flight rather than hold the shutdown.
func newTools(cfg config.Config, runner backends.Runner, log *slog.Logger, stop <-chan struct{}) []tools.Tool {
	ts := []tools.Tool{exectool.New(exectool.Options{Runner: runner, Logger: log})}
	ts = append(ts, fstool.Tools(fstool.Options{Logger: log, Stop: stop})...)
	ts = append(ts, httpget.New(httpget.Options{Logger: log}),
		coderun.New(coderun.Options{Runner: runner, Deno: denoPath(cfg), Logger: log}))
	if rs := resultStore(cfg, log); rs != nil {
		ts = append(ts, readresult.New(rs))
	}
	return ts
}
