package bundles

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing/fstest"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portcullis/portcullis/policies"
)

// Activation is one bundle going live, as recorded in evidence.
type Activation struct {
	Revision         string    `json:"revision"`
	Digest           string    `json:"digest"`
	Source           string    `json:"source"`
	KeyID            string    `json:"key_id,omitempty"`
	Algorithm        string    `json:"algorithm,omitempty"`
	Verified         bool      `json:"verified"`
	TestsRun         bool      `json:"tests_run"`
	PreviousRevision string    `json:"previous_revision,omitempty"`
	PreviousDigest   string    `json:"previous_digest,omitempty"`
	Trigger          string    `json:"trigger"`
	Files            int       `json:"files"`
	LoadedAt         time.Time `json:"loaded_at"`
}

// Recorder makes activations durable (as evidence). An activation whose
// record fails stays live (the policy is already enforced), but the failure
// is logged and counted.
type Recorder interface {
	PolicyActivated(ctx context.Context, a Activation) error
}

// Triggers of a reload, recorded with each activation.
const (
	TriggerStart  = "start"
	TriggerPoll   = "poll"
	TriggerSignal = "signal"
	TriggerAPI    = "api"
)

// Result outcomes.
const (
	ResultActivated = "activated"
	ResultUnchanged = "unchanged"
	ResultRefused   = "refused"
)

// Result is what one reload did.
type Result struct {
	Status string        `json:"status"`
	Reason string        `json:"reason,omitempty"`
	Error  string        `json:"error,omitempty"`
	Policy policies.Info `json:"policy"`
	At     time.Time     `json:"at"`
}

// Options configure a Manager.
type Options struct {
	Engine *policies.Engine
	Source Source
	// Load are the checks every candidate must pass (verification key,
	// tests, schemas).
	Load policies.LoadOptions
	// Recorder records activations; nil logs them only.
	Recorder Recorder
	// PollInterval is how often Run polls the source; 0 disables polling.
	PollInterval time.Duration
	// MaxBackoff bounds the retry delay after failures (default 5 min).
	MaxBackoff time.Duration
	// StartRetry is the first delay before retrying a start that left no
	// policy live (default 1 s); see Run.
	StartRetry time.Duration
	Logger     *slog.Logger
	Metrics    *Metrics
	Now        func() time.Time
	// ArchiveDir, when set, keeps a copy of every activated bundle as
	// ArchiveDir/<digest>.tar.gz, so `gateway policy replay` can find the
	// bundle a receipt was decided by. A failed copy is logged only.
	ArchiveDir string
}

// Manager owns the live policy's lifecycle: fetch, verify, compile, test,
// swap, record. Reloads are serialized; the engine's atomic swap keeps
// in-flight calls on the bundle they started with.
type Manager struct {
	opts        Options
	mu          sync.Mutex // serializes reloads
	statusMu    sync.Mutex
	activations int
	last        Result
}

// New returns a manager; call Reload once to load the first bundle.
func New(opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Minute
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	return &Manager{opts: opts}
}

// Status is the live policy and the lifecycle counters, for GET /v1/policy.
type Status struct {
	Live        policies.Info `json:"live"`
	Loaded      bool          `json:"loaded"`
	Source      string        `json:"source"`
	Verified    bool          `json:"verified"`
	Activations int           `json:"activations"`
	LastResult  Result        `json:"last_result"`
}

// Status reports the live bundle.
func (m *Manager) Status() Status {
	info, ok := m.opts.Engine.Info()
	m.statusMu.Lock()
	defer m.statusMu.Unlock()
	return Status{Live: info, Loaded: ok, Source: m.opts.Source.String(),
		Verified: ok && info.Signature != nil, Activations: m.activations, LastResult: m.last}
}

// Reload fetches the source and activates its bundle if it differs from the
// live one and passes every check. A refused bundle never goes live; the
// previous one stays. The returned error is non-nil exactly when Status is
// refused.
func (m *Manager) Reload(ctx context.Context, trigger string) (Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	res, err := m.reload(ctx, trigger)
	res.At = m.opts.Now().UTC()
	m.statusMu.Lock()
	if res.Status == ResultActivated {
		m.activations++
	}
	m.last = res
	m.statusMu.Unlock()
	return res, err
}

func (m *Manager) reload(ctx context.Context, trigger string) (Result, error) {
	log := m.opts.Logger
	src := m.opts.Source
	prev, hadPrev := m.opts.Engine.Info()
	fsys, err := src.Fetch(ctx)
	if errors.Is(err, ErrNotModified) {
		m.opts.Metrics.fetches.WithLabelValues("not_modified").Inc()
		return Result{Status: ResultUnchanged, Policy: prev}, nil
	}
	if err != nil {
		m.opts.Metrics.fetches.WithLabelValues("error").Inc()
		return m.refuse(ctx, prev, "fetch", err)
	}
	m.opts.Metrics.fetches.WithLabelValues("fetched").Inc()
	m.opts.Metrics.compiles.Inc()
	// One read of the candidate: the scratch check, the live load and the
	// archive all see these bytes, so a directory rewritten mid-reload
	// cannot make them differ.
	if fsys, err = snapshot(fsys); err != nil {
		return m.refuse(ctx, prev, "read", err)
	}
	// Check the candidate on a scratch engine first: only a bundle that
	// passes everything reaches the live engine, and an unchanged one does
	// not count as an activation.
	scratch := policies.NewEngine(policies.Options{Now: m.opts.Now})
	cand, err := scratch.LoadWith(ctx, fsys, src.String(), m.opts.Load)
	if err != nil {
		return m.refuse(ctx, prev, reasonOf(err), err)
	}
	if hadPrev && cand.Digest == prev.Digest && sameSigner(cand, prev) {
		if c, ok := src.(committer); ok {
			c.Commit()
		}
		return Result{Status: ResultUnchanged, Policy: prev}, nil
	}
	info, err := m.opts.Engine.LoadWith(ctx, fsys, src.String(), m.opts.Load)
	if err != nil {
		return m.refuse(ctx, prev, reasonOf(err), err)
	}
	if c, ok := src.(committer); ok {
		c.Commit()
	}
	m.opts.Metrics.activations.Inc()
	m.opts.Metrics.lastActivation.Set(float64(info.LoadedAt.Unix()))
	if m.opts.ArchiveDir != "" {
		if err := archiveBundle(m.opts.ArchiveDir, fsys, info.Digest); err != nil {
			log.WarnContext(ctx, "keeping a copy of the activated bundle failed; policy replay will need --bundle", "digest", info.Digest, "err", err)
		}
	}
	a := Activation{Revision: info.Revision, Digest: info.Digest, Source: info.Source, Verified: info.Signature != nil,
		TestsRun: m.opts.Load.RunTests, Trigger: trigger, Files: len(info.Files), LoadedAt: info.LoadedAt}
	if info.Signature != nil {
		a.KeyID, a.Algorithm = info.Signature.KeyID, info.Signature.Algorithm
	}
	if hadPrev {
		a.PreviousRevision, a.PreviousDigest = prev.Revision, prev.Digest
	}
	log.InfoContext(ctx, "policy activated", "revision", a.Revision, "digest", a.Digest, "source", a.Source,
		"key_id", a.KeyID, "verified", a.Verified, "previous_revision", a.PreviousRevision, "trigger", trigger)
	if m.opts.Recorder != nil {
		if err := m.opts.Recorder.PolicyActivated(ctx, a); err != nil {
			m.opts.Metrics.recordFailures.Inc()
			log.ErrorContext(ctx, "recording the policy activation in evidence failed", "revision", a.Revision, "err", err)
		}
	}
	return Result{Status: ResultActivated, Policy: info}, nil
}

func (m *Manager) refuse(ctx context.Context, prev policies.Info, reason string, err error) (Result, error) {
	m.opts.Metrics.refused.WithLabelValues(reason).Inc()
	m.opts.Logger.ErrorContext(ctx, "policy bundle refused; the previous policy stays live",
		"reason", reason, "source", m.opts.Source.String(), "live_revision", prev.Revision, "err", err)
	return Result{Status: ResultRefused, Reason: reason, Error: err.Error(), Policy: prev}, fmt.Errorf("policy bundle refused (%s): %w", reason, err)
}

// reasonOf maps a load error to the refusal metric's reason label.
func reasonOf(err error) string {
	switch policies.StageOf(err) {
	case policies.StageSignature:
		return "signature"
	case policies.StageTests:
		return "tests"
	case policies.StageRead:
		return "read"
	default:
		return "compile"
	}
}

func sameSigner(a, b policies.Info) bool {
	if a.Signature == nil || b.Signature == nil {
		return a.Signature == b.Signature
	}
	return *a.Signature == *b.Signature
}

// Run polls the source every PollInterval until ctx ends. After a failed
// fetch or a refused bundle it retries with exponential backoff and jitter
// (up to MaxBackoff), so a flapping bundle service is not hammered by a
// fleet of gateways in lockstep.
//
// While no policy is live yet (the bundle service was down or served a
// refused bundle at start), Run first retries until one activates, polling
// or not: from StartRetry, doubling, up to the poll interval or 30 s,
// whichever is shorter, so a gateway that started before its bundle service
// becomes ready soon after the service does.
func (m *Manager) Run(ctx context.Context) {
	if !m.untilLive(ctx) {
		return
	}
	if m.opts.PollInterval <= 0 {
		return
	}
	p := m.opts.PollInterval
	steady, failing := expBackOff(p, p), expBackOff(2*p, m.opts.MaxBackoff)
	failed := false
	for {
		delay := steady.NextBackOff()
		if failed {
			delay = failing.NextBackOff()
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if _, err := m.Reload(ctx, TriggerPoll); err != nil {
			failed = true
		} else {
			failed = false
			failing.Reset()
		}
	}
}

// untilLive retries the start reload until a policy is live; false when ctx
// ended first.
func (m *Manager) untilLive(ctx context.Context) bool {
	base, ceiling := m.opts.StartRetry, 30*time.Second
	if p := m.opts.PollInterval; p > 0 && p < ceiling {
		ceiling = p
	}
	if base <= 0 {
		base = time.Second
	}
	b := expBackOff(base, ceiling)
	for !m.opts.Engine.Ready() {
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		_, _ = m.Reload(ctx, TriggerStart) // a refusal is logged and counted by Reload
	}
	return true
}

// expBackOff is the retry schedule: from first, doubling per failure up
// to ceiling, each delay spread by ±20% so that a fleet of gateways does
// not retry in lockstep (github.com/cenkalti/backoff). With first equal to
// ceiling it is a steady, jittered interval.
func expBackOff(first, ceiling time.Duration) *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{InitialInterval: min(first, ceiling), RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: ceiling}
	b.Reset()
	return b
}

// Metrics are the lifecycle's Prometheus series.
type Metrics struct {
	refused        *prometheus.CounterVec
	activations    prometheus.Counter
	lastActivation prometheus.Gauge
	recordFailures prometheus.Counter
	shadowDiffs    *prometheus.CounterVec
	shadowDropped  prometheus.Counter
	shadowErrors   prometheus.Counter
	fetches        *prometheus.CounterVec
	compiles       prometheus.Counter
}

// NewMetrics returns unregistered metrics; Register adds them to a registry.
func NewMetrics() *Metrics {
	return &Metrics{
		refused: counterVec("portcullis_policy_bundle_refused_total",
			"Candidate policy bundles refused, by reason (fetch, read, signature, compile, tests); the previous bundle stayed live.", "reason"),
		activations: counter("portcullis_policy_activations_total",
			"Policy bundles activated."),
		lastActivation: prometheus.NewGauge(prometheus.GaugeOpts{Name: "portcullis_policy_last_activation_timestamp_seconds",
			Help: "Unix time of the last policy activation."}),
		recordFailures: counter("portcullis_policy_activation_record_failures_total",
			"Policy activations that could not be recorded as evidence."),
		shadowDiffs: counterVec("portcullis_policy_shadow_diffs_total",
			"Calls where the shadow bundle decided differently from the live one, by what differed (allow, reasons, grants).", "field"),
		shadowDropped: counter("portcullis_policy_shadow_dropped_total",
			"Shadow evaluations dropped because the queue was full."),
		shadowErrors: counter("portcullis_policy_shadow_errors_total",
			"Shadow evaluations that failed."),
		fetches: counterVec("portcullis_policy_bundle_fetches_total",
			"Bundle fetches by result: fetched (a bundle was read), not_modified (HTTP 304, nothing compiled), error (the source failed; the live bundle stays).", "result"),
		compiles: counter("portcullis_policy_bundle_compiles_total",
			"Candidate bundles compiled (and checked); a 304 from the bundle service compiles nothing."),
	}
}

// counter is a counter named name, described by help.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// counterVec is a counter named name, described by help, with one label.
func counterVec(name, help, label string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
}

// Register adds the metrics to reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.refused, m.activations, m.lastActivation, m.recordFailures, m.shadowDiffs, m.shadowDropped, m.shadowErrors, m.fetches, m.compiles} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register policy metrics: %w", err)
		}
	}
	return nil
}

// archiveBundle writes fsys as dir/<digest>.tar.gz unless it is there.
func archiveBundle(dir string, fsys fs.FS, digest string) error {
	path := filepath.Join(dir, digest+".tar.gz")
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	files, err := Files(fsys)
	if err != nil {
		return err
	}
	b, err := writeArchive(files)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".bundle-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// snapshot reads fsys once (as the engine reads a bundle) into memory.
func snapshot(fsys fs.FS) (fs.FS, error) {
	files, err := Files(fsys)
	if err != nil {
		return nil, err
	}
	m := make(fstest.MapFS, len(files))
	for _, f := range files {
		m[f.Path] = &fstest.MapFile{Data: f.Data, Mode: 0o444}
	}
	return m, nil
}
