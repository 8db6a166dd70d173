package bundles

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/portcullis/portcullis/policies"
	"github.com/portcullis/portcullis/wire"
)

// ShadowDiff is one call on which the shadow bundle decided differently
// from the live one, as recorded in evidence (kind shadow_diff).
type ShadowDiff struct {
	LiveRevision   string        `json:"live_revision"`
	ShadowRevision string        `json:"shadow_revision"`
	PrincipalID    string        `json:"principal_id"`
	Tool           string        `json:"tool"`
	Purpose        string        `json:"purpose"`
	SessionID      string        `json:"session_id,omitempty"`
	CallID         string        `json:"call_id,omitempty"`
	Fields         []string      `json:"fields"` // allow, reasons, grants
	Live           wire.Decision `json:"live"`
	Shadow         wire.Decision `json:"shadow"`
}

// ShadowRecorder makes shadow differences durable.
type ShadowRecorder interface {
	ShadowDiff(ctx context.Context, d ShadowDiff) error
}

// Decider is the policy interface of the gateway's pipeline.
type Decider interface {
	Decide(ctx context.Context, in wire.PolicyInput) (wire.Decision, error)
	Ready() bool
}

type shadowJob struct {
	in   wire.PolicyInput
	live wire.Decision
}

// Shadow evaluates a candidate bundle beside the live one. The live
// decision is returned first and unchanged; the candidate runs afterwards
// on a bounded queue drained by one worker, and a full queue drops (and
// counts) the job rather than slow a call down. Shadow never enforces.
type Shadow struct {
	engine  *policies.Engine
	rec     ShadowRecorder
	metrics *Metrics
	log     *slog.Logger
	queue   chan shadowJob
	done    chan struct{}
	once    sync.Once
}

// NewShadow starts the shadow worker; Close stops it.
func NewShadow(engine *policies.Engine, rec ShadowRecorder, metrics *Metrics, log *slog.Logger, queue int) *Shadow {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if metrics == nil {
		metrics = NewMetrics()
	}
	if queue <= 0 {
		queue = 1024
	}
	s := &Shadow{engine: engine, rec: rec, metrics: metrics, log: log, queue: make(chan shadowJob, queue), done: make(chan struct{})}
	go s.work()
	return s
}

// Wrap returns a Decider that decides with live and then hands the input
// and decision to the shadow.
func (s *Shadow) Wrap(live Decider) Decider { return shadowDecider{live: live, s: s} }

// Close stops the worker after the queued jobs; safe to call twice.
func (s *Shadow) Close() {
	s.once.Do(func() { close(s.queue) })
	<-s.done
}

type shadowDecider struct {
	live Decider
	s    *Shadow
}

func (d shadowDecider) Ready() bool { return d.live.Ready() }

func (d shadowDecider) Decide(ctx context.Context, in wire.PolicyInput) (wire.Decision, error) {
	dec, err := d.live.Decide(ctx, in)
	if err == nil && in.Purpose != wire.PurposeList {
		d.s.observe(in, dec)
	}
	return dec, err
}

// observe enqueues without ever blocking the caller.
func (s *Shadow) observe(in wire.PolicyInput, live wire.Decision) {
	defer func() {
		// A send after Close panics; shadowing is best effort, never fatal.
		if recover() != nil {
			s.metrics.shadowDropped.Inc()
		}
	}()
	select {
	case s.queue <- shadowJob{in: in, live: live}:
	default:
		s.metrics.shadowDropped.Inc()
	}
}

func (s *Shadow) work() {
	defer close(s.done)
	for job := range s.queue {
		s.compare(job)
	}
}

func (s *Shadow) compare(job shadowJob) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sh, err := s.engine.Decide(ctx, job.in)
	if err != nil {
		s.metrics.shadowErrors.Inc()
		s.log.Warn("shadow policy evaluation failed", "err", err)
		return
	}
	fields := Differences(job.live, sh)
	if len(fields) == 0 {
		return
	}
	for _, f := range fields {
		s.metrics.shadowDiffs.WithLabelValues(f).Inc()
	}
	d := ShadowDiff{LiveRevision: job.live.PolicyRevision, ShadowRevision: sh.PolicyRevision,
		PrincipalID: job.in.Principal.ID, Tool: job.in.Tool, Purpose: job.in.Purpose,
		SessionID: job.in.SessionID, CallID: job.in.CallID, Fields: fields, Live: job.live, Shadow: sh}
	s.log.Info("shadow policy decided differently", "tool", d.Tool, "principal", d.PrincipalID, "fields", fields,
		"live_allow", job.live.Allow, "shadow_allow", sh.Allow)
	if s.rec != nil {
		if err := s.rec.ShadowDiff(ctx, d); err != nil {
			s.metrics.shadowErrors.Inc()
			s.log.Error("recording a shadow difference failed", "err", err)
		}
	}
}

// Differences names what differs between two decisions: "allow",
// "reasons" (as sets) and "grants" (fs, network, env, limits).
func Differences(live, shadow wire.Decision) []string {
	var out []string
	if live.Allow != shadow.Allow {
		out = append(out, "allow")
	}
	a, b := slices.Clone(live.Reasons), slices.Clone(shadow.Reasons)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(slices.Compact(a), slices.Compact(b)) {
		out = append(out, "reasons")
	}
	if !reflect.DeepEqual(live.FSGrants, shadow.FSGrants) || !reflect.DeepEqual(live.Network, shadow.Network) ||
		!reflect.DeepEqual(live.Env, shadow.Env) || !reflect.DeepEqual(live.Limits, shadow.Limits) {
		out = append(out, "grants")
	}
	return out
}
