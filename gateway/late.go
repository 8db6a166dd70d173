package gateway

import (
	"context"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// Late outcomes (outcomes the store did not take when the call ended) are
// kept and recorded by evidence.LateOutcomes, spooled to disk when serve
// gives it a spool (Options.Late). This file is the pipeline's side.

// queueLate keeps an outcome the store did not take, to record it later.
func (s *Server) queueLate(ev evidence.Event, notRun bool) { s.late.Queue(ev, notRun) }

// notRunOutcome is the outcome of an allowed call that was refused because
// its decision could not be made durable: it never ran.
func (s *Server) notRunOutcome(rec *record) evidence.Event {
	return evidence.Event{
		ID: uuid.Must(uuid.NewV7()), ReceiptID: rec.id, Kind: evidence.KindOutcome, Time: s.opts.Now().UTC(),
		InstanceID: s.opts.InstanceID,
		Outcome:    &wire.Outcome{Status: wire.StatusError, ErrorCode: ptr(string(wire.CodeEvidenceUnavailable)), Backend: "none"},
	}
}

// Run does the server's background work until ctx ends: it records late
// outcomes once the store commits again, and sweeps expired results.
// serve runs it beside the HTTP server; a Server whose Run is not called
// keeps late outcomes queued (bounded).
func (s *Server) Run(ctx context.Context) {
	if s.opts.Results != nil {
		go s.opts.Results.Run(ctx)
	}
	s.late.Run(ctx)
}

// FlushLate records what is queued and ready, and returns how many
// outcomes remain queued (serve calls it once more at shutdown).
func (s *Server) FlushLate(ctx context.Context) int { return s.late.Flush(ctx) }

// newLate is the memory-only LateOutcomes of a Server built without one.
func newLate(opts Options) *evidence.LateOutcomes {
	var healthy func() bool
	if h, ok := opts.Evidence.(interface{ Healthy() bool }); ok {
		healthy = h.Healthy
	}
	var w EvidenceWriter = noStore{}
	if opts.Evidence != nil {
		w = opts.Evidence
	}
	var r interface {
		Receipt(context.Context, uuid.UUID) (wire.Receipt, error)
	} = noStore{}
	if opts.Receipts != nil {
		r = opts.Receipts
	}
	l, err := evidence.OpenLateOutcomes(evidence.LateOptions{
		Writer: w, Receipts: r, Healthy: healthy,
		WriteTimeout: opts.EvidenceTimeout, Logger: opts.Logger, Now: opts.Now,
	})
	if err != nil {
		panic(err) // only a missing writer or reader, which noStore stands in for
	}
	return l
}

// noStore stands in for a Server built without a store (tests that never
// call a tool): every write and read is unavailable.
type noStore struct{}

func (noStore) Append(context.Context, ...evidence.Event) error { return evidence.ErrUnavailable }
func (noStore) Receipt(context.Context, uuid.UUID) (wire.Receipt, error) {
	return wire.Receipt{}, evidence.ErrUnavailable
}

// lateCollector exposes LateOutcomes.Counts as
// portcullis_evidence_late_outcomes_total{result}.
type lateCollector struct {
	l    *evidence.LateOutcomes
	desc *prometheus.Desc
}

func newLateCollector(l *evidence.LateOutcomes) *lateCollector {
	return &lateCollector{l: l, desc: prometheus.NewDesc("portcullis_evidence_late_outcomes_total",
		"Outcomes recorded after their first write failed, by result: recorded, already_recorded, no_decision (the refused call's decision never committed), refused (the store refused it 3 times), overflow (queue full: left to the next start), replayed (loaded from the spool at start), spool_error and spool_overflow (could not be spooled: kept in memory only).",
		[]string{"result"}, nil)}
}

func (c *lateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *lateCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.l.Counts()
	for _, r := range evidence.LateResults {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(counts[r]), r)
	}
}
