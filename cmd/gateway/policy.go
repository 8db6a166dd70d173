package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portcullis/portcullis/bundles"
	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/gateway"
	"github.com/portcullis/portcullis/policies"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// policyStack is the live policy and its lifecycle.
type policyStack struct {
	engine  *policies.Engine
	manager *bundles.Manager
	metrics *bundles.Metrics
	// poll says whether the source is a bundle service to poll.
	poll bool
	// shadow evaluates policy.shadow_bundle beside the live policy; nil
	// when none is configured.
	shadow *bundles.Shadow
}

// shadowQueue bounds the shadow evaluations waiting; more are dropped and
// counted rather than slow calls down.
const shadowQueue = 1024

// openShadow loads policy.shadow_bundle with the live bundle's checks
// (signature included: an unsigned candidate must not even be evaluated
// when a key is configured) and starts its worker.
func (ps *policyStack) openShadow(ctx context.Context, cfg config.Config, log *slog.Logger, ts []tools.Tool, rec bundles.ShadowRecorder) error {
	opts, err := loadOptions(cfg, ts)
	if err != nil {
		return err
	}
	src, err := bundles.NewSource(cfg.Policy.ShadowBundle, bundles.HTTPOptions{BearerTokenFile: cfg.Policy.BearerTokenFile, Timeout: cfg.Policy.FetchTimeout.Std()})
	if err != nil {
		return fmt.Errorf("config: policy.shadow_bundle: %w", err)
	}
	fsys, err := src.Fetch(ctx)
	if err != nil {
		return fmt.Errorf("config: policy.shadow_bundle: %w", err)
	}
	engine := policies.NewEngine(policies.Options{Logger: log.With("policy", "shadow")})
	info, err := engine.LoadWith(ctx, fsys, src.String(), opts)
	if err != nil {
		return fmt.Errorf("config: policy.shadow_bundle: %w", err)
	}
	log.Info("shadow policy loaded: evaluated beside the live policy, never enforced", "revision", info.Revision, "source", info.Source)
	ps.shadow = bundles.NewShadow(engine, rec, ps.metrics, log, shadowQueue)
	return nil
}

// decider is what the pipeline decides with: the live engine, with the
// shadow observing after each decision when one is configured.
func (s *stack) decider() gateway.Decider {
	if s.policy.shadow != nil {
		return s.policy.shadow.Wrap(s.engine)
	}
	return s.engine
}

// policyAdmin serves /v1/policy from the lifecycle manager.
type policyAdmin struct{ m *bundles.Manager }

func (a policyAdmin) Status() wire.PolicyStatus {
	st := a.m.Status()
	out := wire.PolicyStatus{Revision: st.Live.Revision, Digest: st.Live.Digest, Source: st.Live.Source,
		Verified: st.Verified, LoadedAt: st.Live.LoadedAt, Files: st.Live.Files, Activations: st.Activations}
	if st.Live.Signature != nil {
		out.KeyID, out.Algorithm = st.Live.Signature.KeyID, st.Live.Signature.Algorithm
	}
	if st.LastResult.Status != "" {
		r := reloadOf(st.LastResult)
		out.LastReload = &r
	}
	return out
}

func (a policyAdmin) Reload(ctx context.Context) wire.PolicyReload {
	res, _ := a.m.Reload(ctx, bundles.TriggerAPI)
	return reloadOf(res)
}

func reloadOf(r bundles.Result) wire.PolicyReload {
	return wire.PolicyReload{Status: r.Status, Reason: r.Reason, Error: r.Error, Revision: r.Policy.Revision, Digest: r.Policy.Digest, At: r.At}
}

// describedTools is the tool set for commands that only read the tools'
// schemas: the same list serve runs, with a runner that never starts.
func describedTools() []tools.Tool {
	return newTools(config.Default(), unavailableRunner{}, slog.New(slog.DiscardHandler), nil)
}

// loadOptions are the checks every bundle passes before activation: the
// signature when a verification key is configured (enforced: unsigned,
// tampered or wrongly signed bundles never activate, directories included),
// the bundle's own tests unless policy.run_tests is false, and the input
// schemas of the gateway's tools.
func loadOptions(cfg config.Config, ts []tools.Tool) (policies.LoadOptions, error) {
	var opts policies.LoadOptions
	if cfg.Policy.VerificationKey != "" {
		vc, err := bundles.VerificationConfig(cfg.Policy.VerificationKey, cfg.Policy.KeyID)
		if err != nil {
			return opts, fmt.Errorf("config: policy.verification_key: %w", err)
		}
		opts.Verification, opts.KeyID = vc, cfg.Policy.KeyID
	}
	// The shipped bundle is compiled into this binary and its tests ran
	// when it was built (policies.TestShippedRegoTests): they cannot fail
	// now, and running them costs seconds at every start.
	opts.RunTests = cfg.Policy.RunTests && cfg.Policy.Bundle != config.ShippedBundle
	schemas, err := policies.InputSchemas(toolSchemas(ts))
	if err != nil {
		return opts, err
	}
	if opts.Schemas, err = policies.SchemaSet(schemas); err != nil {
		return opts, err
	}
	return opts, nil
}

func toolSchemas(ts []tools.Tool) []policies.ToolSchema {
	out := make([]policies.ToolSchema, 0, len(ts))
	for _, t := range ts {
		out = append(out, policies.ToolSchema{Name: t.Name(), Args: t.Parameters()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// openPolicy loads the configured bundle through the lifecycle manager. A
// local bundle (directory, archive, shipped) that fails stops the caller: it
// is a deployment error. A bundle service (http/https) that cannot give a
// bundle that passes every check at start is, when waitRemote is set (serve),
// not fatal: like OPA, the gateway starts with no policy, reports not-ready
// on /readyz, refuses every call 503 backend_unavailable, and the manager's
// Run retries with backoff until a bundle activates.
func openPolicy(ctx context.Context, cfg config.Config, log *slog.Logger, ts []tools.Tool, rec bundles.Recorder, waitRemote bool) (*policyStack, error) {
	src, err := bundles.NewSource(cfg.Policy.Bundle, bundles.HTTPOptions{BearerTokenFile: cfg.Policy.BearerTokenFile, Timeout: cfg.Policy.FetchTimeout.Std()})
	if err != nil {
		return nil, fmt.Errorf("config: policy.bundle: %w", err)
	}
	opts, err := loadOptions(cfg, ts)
	if err != nil {
		return nil, err
	}
	ps := &policyStack{engine: policies.NewEngine(policies.Options{Logger: log}), metrics: bundles.NewMetrics()}
	_, ps.poll = src.(*bundles.HTTPSource)
	interval := time.Duration(0)
	if ps.poll {
		interval = cfg.Policy.PollInterval.Std()
	}
	ps.manager = bundles.New(bundles.Options{
		Engine: ps.engine, Source: src, Load: opts, Recorder: rec, PollInterval: interval,
		Logger: log, Metrics: ps.metrics, ArchiveDir: filepath.Join(cfg.DataDir, "bundles"),
	})
	if _, err := ps.manager.Reload(ctx, bundles.TriggerStart); err != nil {
		if !ps.poll || !waitRemote {
			return nil, fmt.Errorf("loading policy: %w", err)
		}
		log.Error("no policy active: the bundle service gave no bundle that passed every check; serving not-ready (503 backend_unavailable) and retrying with backoff until one activates",
			"source", src.String(), "err", err)
	}
	return ps, nil
}

// evidenceRecorder records activations as policy_activated evidence events
// in the same hash-chained log as the receipts.
type evidenceRecorder struct{ w *evidence.Writer }

func (r evidenceRecorder) PolicyActivated(ctx context.Context, a bundles.Activation) error {
	body, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return r.w.Append(ctx, evidence.Event{Kind: evidence.KindPolicyActivated, Time: a.LoadedAt, PolicyRevision: a.Revision, Body: body})
}

func (r evidenceRecorder) ShadowDiff(ctx context.Context, d bundles.ShadowDiff) error {
	body, err := shadowDiffBody(d)
	if err != nil {
		return err
	}
	return r.w.Append(ctx, evidence.Event{Kind: evidence.KindShadowDiff, PolicyRevision: d.LiveRevision,
		PrincipalID: d.PrincipalID, Tool: d.Tool, SessionID: d.SessionID, CallID: d.CallID, Body: body})
}

// shadowDiffBody is the body of a shadow_diff evidence event. Both
// decisions are kept as a receipt keeps one: reasons through the
// redactor (they may quote the call's input), env.set by name only (its
// values may be secrets the policy injects).
func shadowDiffBody(d bundles.ShadowDiff) ([]byte, error) {
	d.Live, d.Shadow = redactDecision(d.Live), redactDecision(d.Shadow)
	return json.Marshal(d)
}

// redactDecision is d with its reasons redacted and bounded and its
// env.set values replaced by evidence.Redacted.
func redactDecision(d wire.Decision) wire.Decision {
	d.Reasons = evidence.BoundReasons(d.Reasons)
	if d.Env.Set != nil {
		set := make(map[string]string, len(d.Env.Set))
		for k := range d.Env.Set {
			set[evidence.RedactString(k)] = evidence.Redacted
		}
		d.Env.Set = set
	}
	return d
}

func policyCmd() *cobra.Command {
	return group("policy", "test, evaluate and replay policy decisions",
		policyTestCmd(), policyEvalCmd(), policySchemaCmd(), policyReplayCmd())
}

func policyTestCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "test [DIR|FILE.tar.gz] [--coverage] [--json]",
		Short: "run a bundle's Rego tests, with line coverage (default: the shipped policy)",
		Args:  maxArgs(1),
	}
	fs := c.Flags()
	coverage := fs.Bool("coverage", false, "report line coverage of the bundle's modules")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	c.RunE = func(c *cobra.Command, pos []string) error {
		ctx, stdout := c.Context(), c.OutOrStdout()
		fsys := policies.Shipped()
		if len(pos) == 1 {
			var err error
			if fsys, err = bundles.Open(pos[0]); err != nil {
				return err
			}
		}
		rep, err := policies.RunTestsWithCoverage(ctx, fsys, *coverage)
		if err != nil {
			return err
		}
		failed := 0
		for _, r := range rep.Tests {
			if !r.Pass {
				failed++
			}
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(rep); err != nil {
				return err
			}
		} else {
			for _, r := range rep.Tests {
				status := "PASS"
				if !r.Pass {
					status = "FAIL"
				}
				fmt.Fprintf(stdout, "%s %s.%s (%s)\n", status, r.Package, r.Name, r.Duration)
				if r.Fail != "" {
					fmt.Fprintf(stdout, "    %s\n", r.Fail)
				}
			}
			fmt.Fprintf(stdout, "%d passed, %d failed\n", len(rep.Tests)-failed, failed)
			if rep.Coverage != nil {
				printCoverage(stdout, rep)
			}
		}
		if failed > 0 {
			return fmt.Errorf("%d policy test(s) failed", failed)
		}
		return nil
	}
	return c
}

func printCoverage(w io.Writer, rep policies.TestReport) {
	files := make([]string, 0, len(rep.Coverage.Files))
	for f := range rep.Coverage.Files {
		files = append(files, f)
	}
	sort.Strings(files)
	fmt.Fprintf(w, "coverage: %.1f%% (%d lines covered, %d not)\n", rep.Coverage.Coverage, rep.Coverage.CoveredLines, rep.Coverage.NotCoveredLines)
	for _, f := range files {
		fr := rep.Coverage.Files[f]
		fmt.Fprintf(w, "  %6.1f%%  %s", fr.Coverage, f)
		if len(fr.NotCovered) > 0 {
			fmt.Fprint(w, "  not covered:")
			for _, r := range fr.NotCovered {
				if r.Start.Row == r.End.Row {
					fmt.Fprintf(w, " %d", r.Start.Row)
				} else {
					fmt.Fprintf(w, " %d-%d", r.Start.Row, r.End.Row)
				}
			}
		}
		fmt.Fprintln(w)
	}
}

func policyEvalCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "eval --input FILE [--bundle DIR|FILE.tar.gz] [--explain]",
		Short: "evaluate a decision for an input document",
		Args:  noArgs,
	}
	fs := c.Flags()
	input := fs.String("input", "", "policy input document (JSON, CONTRACT section 5)")
	bundle := fs.String("bundle", "", "bundle directory or .tar.gz (default: the shipped policy)")
	explain := fs.Bool("explain", false, "also print which rules produced the denial reasons")
	c.RunE = func(c *cobra.Command, pos []string) error {
		ctx, stdout := c.Context(), c.OutOrStdout()
		if *input == "" {
			return usageErrorf("--input FILE is required")
		}
		b, err := os.ReadFile(*input)
		if err != nil {
			return err
		}
		var in wire.PolicyInput
		if err := json.Unmarshal(b, &in); err != nil {
			return fmt.Errorf("input: %w", err)
		}
		engine := policies.NewEngine(policies.Options{Logger: slog.New(slog.DiscardHandler)})
		fsys := policies.Shipped()
		source := "shipped"
		if *bundle != "" {
			if fsys, err = bundles.Open(*bundle); err != nil {
				return err
			}
			source = *bundle
		}
		if _, err = engine.Load(ctx, fsys, source); err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if *explain {
			d, ex, err := engine.Explain(ctx, in)
			if err != nil {
				return err
			}
			return enc.Encode(map[string]any{"decision": d, "explanation": ex})
		}
		d, err := engine.Decide(ctx, in)
		if err != nil {
			return err
		}
		return enc.Encode(d)
	}
	return c
}

// cmdPolicySchema prints the JSON Schemas rules can be type-checked
// against: the shared input envelope and one per tool of this build.
func policySchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use: "schema [TOOL]", Short: "print the policy input JSON Schemas (of one tool, or all)", Args: maxArgs(1),
		RunE: func(c *cobra.Command, args []string) error { return cmdPolicySchema(args, c.OutOrStdout()) },
	}
}

func cmdPolicySchema(args []string, stdout io.Writer) error {
	schemas, err := policies.InputSchemas(toolSchemas(describedTools()))
	if err != nil {
		return err
	}
	out := map[string]json.RawMessage{}
	for k, v := range schemas {
		if len(args) == 0 || k == policies.ToolSchemaRef(args[0]) {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return fmt.Errorf("no tool %q in this build", args[0])
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// replayReport is what `policy replay` prints.
type replayReport struct {
	ReceiptID string `json:"receipt_id"`
	// Bundle is the archive or directory replayed against; Revision and
	// Digest are its own.
	Bundle   string        `json:"bundle"`
	Revision string        `json:"revision"`
	Digest   string        `json:"digest"`
	Recorded replayOutcome `json:"recorded"`
	Replayed replayOutcome `json:"replayed"`
	Match    bool          `json:"match"`
	// Limits say how far the replayed input may differ from the original.
	Limits []string `json:"limits"`
}

type replayOutcome struct {
	Revision string   `json:"policy_revision"`
	Decision string   `json:"decision"`
	Reasons  []string `json:"reasons"`
}

// cmdPolicyReplay re-evaluates a receipt's recorded input against the
// bundle that decided it (from data_dir/bundles, kept at activation) or
// --bundle, and says whether the decision matches. The input is rebuilt
// from evidence, which keeps only redacted arguments and no resolved facts:
// see the limits in the report.
func policyReplayCmd() *cobra.Command {
	c, fs, cfgPath := configCmd("replay --config FILE RECEIPT_ID [--bundle DIR|FILE.tar.gz]",
		"re-decide a receipt against its archived bundle; exit 1 on a different decision", exactArgs(1))
	bundlePath := fs.String("bundle", "", "bundle directory or .tar.gz (default: the archived bundle of the receipt's revision)")
	c.RunE = func(c *cobra.Command, pos []string) error {
		ctx, stdout := c.Context(), c.OutOrStdout()
		id, err := uuid.Parse(pos[0])
		if err != nil {
			return usageErrorf("receipt id: %w", err)
		}
		store, cfg, err := openConfiguredStore(ctx, *cfgPath)
		if err != nil {
			return err
		}
		defer store.Close()
		rc, err := store.Receipt(ctx, id)
		if err != nil {
			return fmt.Errorf("policy replay: receipt %s: %w", id, err)
		}
		rep := replayReport{ReceiptID: id.String(), Recorded: replayOutcome{Revision: rc.PolicyRevision, Decision: rc.Decision, Reasons: rc.Reasons}}
		if rc.Decision == wire.DecisionInvalid {
			return fmt.Errorf("policy replay: receipt %s was refused before the policy decided (invalid input)", id)
		}
		engine := policies.NewEngine(policies.Options{Logger: slog.New(slog.DiscardHandler)})
		var info policies.Info
		if *bundlePath != "" {
			fsys, err := bundles.Open(*bundlePath)
			if err != nil {
				return err
			}
			if info, err = engine.Load(ctx, fsys, *bundlePath); err != nil {
				return err
			}
			rep.Bundle = *bundlePath
		} else {
			if rep.Bundle, info, err = archivedBundle(ctx, engine, filepath.Join(cfg.DataDir, "bundles"), rc.PolicyRevision); err != nil {
				return err
			}
		}
		rep.Revision, rep.Digest = info.Revision, info.Digest
		if info.Revision != rc.PolicyRevision {
			rep.Limits = append(rep.Limits, fmt.Sprintf("the bundle is revision %s, the receipt was decided by %s", info.Revision, rc.PolicyRevision))
		}

		// The input: recorded args (normalized, redacted), the principal as
		// configured now, resolved facts recomputed now from those args.
		var callArgs map[string]any
		if len(rc.Args) > 0 && string(rc.Args) != "null" {
			if err := json.Unmarshal(rc.Args, &callArgs); err != nil {
				return fmt.Errorf("policy replay: recorded args: %w", err)
			}
		}
		if strings.Contains(string(rc.Args), "[REDACTED") || strings.Contains(string(rc.Args), "[TRUNCATED") {
			rep.Limits = append(rep.Limits, "the recorded args are redacted: the policy sees the redacted values, not the original ones")
		}
		p := wire.Principal{ID: rc.PrincipalID, Roles: []string{}, Attributes: map[string]any{}}
		found := false
		for _, cp := range cfg.Principals {
			if cp.ID == rc.PrincipalID {
				p.Roles, p.Attributes, found = cp.Roles, cp.Attributes, true
			}
		}
		if found {
			rep.Limits = append(rep.Limits, "principal roles and attributes are today's configuration, not those at the time of the call")
		} else {
			rep.Limits = append(rep.Limits, "the principal is no longer configured: replayed with no roles and no attributes")
		}
		resolved := map[string]any{}
		tools := newTools(cfg, unavailableRunner{}, slog.New(slog.DiscardHandler), nil)
		for _, t := range tools {
			if t.Name() != rc.Tool || callArgs == nil {
				continue
			}
			if call, err := t.Prepare(ctx, rc.Args); err == nil {
				if r := call.Resolved(); r != nil {
					resolved = r
				}
				rep.Limits = append(rep.Limits, "resolved facts are recomputed now from the recorded args (evidence does not keep them): file-system facts may have changed")
			} else {
				rep.Limits = append(rep.Limits, "resolved facts could not be recomputed ("+err.Error()+"): replayed without them")
			}
		}
		if callArgs == nil {
			callArgs = map[string]any{}
		}
		d, err := engine.Decide(ctx, wire.PolicyInput{Principal: p, Tool: rc.Tool, Purpose: wire.PurposeCall, Args: callArgs,
			Resolved: resolved, SessionID: rc.SessionID, CallID: rc.CallID, Time: rc.Time})
		if err != nil {
			return err
		}
		rep.Replayed = replayOutcome{Revision: d.PolicyRevision, Decision: wire.DecisionDeny, Reasons: d.Reasons}
		if d.Allow {
			rep.Replayed.Decision = wire.DecisionAllow
		}
		rep.Match = rep.Replayed.Decision == rep.Recorded.Decision && slices.Equal(sortedCopy(rep.Replayed.Reasons), sortedCopy(rep.Recorded.Reasons))
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
		if !rep.Match {
			return errors.New("policy replay: the replayed decision differs from the recorded one")
		}
		return nil
	}
	return c
}

func sortedCopy(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

// archivedBundle loads the archived bundle (data_dir/bundles/<digest>.tar.gz)
// whose revision is rev; the archive names only the digest, so each is
// loaded and checked. A revision is whatever the bundle's author wrote, so
// two archived bundles may share one: the receipt cannot say which decided
// it, and replay refuses rather than pick one.
func archivedBundle(ctx context.Context, engine *policies.Engine, dir, rev string) (string, policies.Info, error) {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.tar.gz"))
	sort.Strings(paths)
	var found []string
	var fsys fs.FS
	var path string
	for _, p := range paths {
		f, err := bundles.Open(p)
		if err != nil {
			continue
		}
		scratch := policies.NewEngine(policies.Options{Logger: slog.New(slog.DiscardHandler)})
		info, err := scratch.Load(ctx, f, p)
		if err != nil || info.Revision != rev {
			continue
		}
		found = append(found, info.Digest)
		fsys, path = f, p
	}
	switch len(found) {
	case 0:
		return "", policies.Info{}, fmt.Errorf("policy replay: no bundle of revision %s in %s (kept from activation on); pass --bundle", rev, dir)
	case 1:
		info, err := engine.Load(ctx, fsys, path)
		return path, info, err
	default:
		return "", policies.Info{}, fmt.Errorf("policy replay: %d archived bundles in %s carry revision %s (digests %s); the receipt names only the revision, so pass the one that decided it with --bundle",
			len(found), dir, rev, strings.Join(found, ", "))
	}
}

// memoMetrics count the live bundle's decisions answered from its memo
// (policies/memo.go) and those evaluated; both restart at 0 with a new bundle.
func memoMetrics(e *policies.Engine) []prometheus.Collector {
	read := func(hits bool) func() float64 {
		return func() float64 {
			h, m, _ := e.MemoStats()
			if hits {
				return float64(h)
			}
			return float64(m)
		}
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "portcullis_policy_memo_hits",
			Help: "Decisions of the live policy bundle answered from its memo (same bundle, same input fields the policy reads)."}, read(true)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "portcullis_policy_memo_misses",
			Help: "Decisions of the live policy bundle evaluated because its memo had no answer (or the policy is not remembered)."}, read(false)),
	}
}
