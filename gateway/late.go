package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// Late outcomes. An allowed call writes two events: its decision before it
// runs and its outcome after. When the store fails between them, or a
// commit's result is lost with its connection, a receipt is left pending
// although the gateway knows how the call ended:
//
//   - the call ran but its outcome write failed (answered with
//     metadata.evidence_outcome "unrecorded"): the outcome is known, and
//     is retried until the store takes it;
//   - the call was refused evidence_unavailable because its decision write
//     failed, yet the decision may have committed after all (a COMMIT the
//     server carried out after the gateway gave up on it): the call did not
//     run. Almost always the decision never committed (an outage refuses
//     every call), so such a "did not run" outcome is checked once, after
//     the write's own deadline has passed and the store has answered again
//     for lateSettle, and written only if its decision is there, pending.
//
// The two kinds wait in separate bounded queues, so a flood of refusals
// during an outage never pushes out an outcome the gateway knows. An
// outcome keeps its event id across attempts, so one that did commit after
// all is never written twice (event ids are unique in both stores). The
// queues live in memory: what is lost with the process (or with an
// overflow) is marked interrupted by the next start's recovery, as before.
const (
	lateMax      = 10000
	lateBatch    = 256
	lateInterval = time.Second
	lateSettle   = 3 * time.Second
	lateAttempts = 3 // tries of an outcome the store refuses (not: cannot be reached)
)

type lateItem struct {
	event    evidence.Event // the outcome, KindOutcome, for event.ReceiptID
	notRun   bool           // the decision's own write failed: it may not exist
	queued   time.Time
	attempts int // writes the store refused
}

// lateQueue is a bounded FIFO of late outcomes.
type lateQueue struct {
	mu    sync.Mutex
	items []lateItem
}

// add queues it; when the queue is full the oldest item gives way and
// false is returned.
func (q *lateQueue) add(it lateItem) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	ok := true
	if len(q.items) >= lateMax {
		q.items = q.items[1:]
		ok = false
	}
	q.items = append(q.items, it)
	return ok
}

// take removes up to n items, oldest first, that ready accepts.
func (q *lateQueue) take(n int, ready func(lateItem) bool) []lateItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []lateItem
	keep := q.items[:0]
	for _, it := range q.items {
		if len(out) < n && ready(it) {
			out = append(out, it)
		} else {
			keep = append(keep, it)
		}
	}
	clear(q.items[len(keep):])
	q.items = keep
	return out
}

// putBack returns items to the front of the queue, within its bound.
func (q *lateQueue) putBack(items []lateItem) {
	if len(items) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	room := max(0, lateMax-len(q.items))
	if len(items) > room {
		items = items[len(items)-room:]
	}
	q.items = append(append(make([]lateItem, 0, len(items)+len(q.items)), items...), q.items...)
}

func (q *lateQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// lateOutcomes holds both kinds, and when the store last failed.
type lateOutcomes struct {
	known, maybe lateQueue

	mu              sync.Mutex
	lastFailure     time.Time // the store was last seen failing
	lastOverflowLog time.Time
}

func (l *lateOutcomes) len() int { return l.known.len() + l.maybe.len() }

// queueLate keeps an outcome the store did not take, to record it later.
func (s *Server) queueLate(ev evidence.Event, notRun bool) {
	s.lateFailed()
	q := &s.late.known
	if notRun {
		q = &s.late.maybe
	}
	now := s.opts.Now()
	if !q.add(lateItem{event: ev, notRun: notRun, queued: now}) {
		s.metrics.lateOutcomes.WithLabelValues("overflow").Inc()
		s.late.mu.Lock()
		quiet := now.Sub(s.late.lastOverflowLog) < time.Minute // an outage overflows once per refused call
		if !quiet {
			s.late.lastOverflowLog = now
		}
		s.late.mu.Unlock()
		if !quiet {
			s.log.Error("late outcome queue full: the oldest give way and stay pending until the next start marks them interrupted (logged at most once a minute; see portcullis_evidence_late_outcomes_total{result=\"overflow\"})",
				"max", lateMax, "did_not_run", notRun)
		}
	}
}

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
// outcomes once the store commits again. serve runs it beside the HTTP
// server; a Server whose Run is not called keeps them queued (bounded).
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(lateInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.FlushLate(ctx)
		}
	}
}

// FlushLate records what is queued and ready, and returns how many
// outcomes remain queued (serve calls it once more at shutdown).
func (s *Server) FlushLate(ctx context.Context) int {
	for s.late.len() > 0 && ctx.Err() == nil && s.recordLate(ctx) {
	}
	return s.late.len()
}

// recordLate makes one pass over up to lateBatch ready outcomes and
// reports whether it took any (so the caller may go on at once).
func (s *Server) recordLate(ctx context.Context) bool {
	now := s.opts.Now()
	s.late.mu.Lock()
	if h, ok := s.opts.Evidence.(interface{ Healthy() bool }); ok && !h.Healthy() {
		s.late.lastFailure = now
	}
	settled := now.Sub(s.late.lastFailure) >= lateSettle
	s.late.mu.Unlock()
	if !settled {
		return false // the store failed lately; live calls will tell when it is back
	}
	items := s.late.known.take(lateBatch, func(lateItem) bool { return true })
	if len(items) < lateBatch {
		// A decision write ends by the call's evidence deadline; one that
		// committed late is in the store by now.
		items = append(items, s.late.maybe.take(lateBatch-len(items), func(it lateItem) bool {
			return now.Sub(it.queued) >= s.opts.EvidenceTimeout
		})...)
	}
	if len(items) == 0 {
		return false
	}
	var write []lateItem
	for i, it := range items {
		rc, err := s.opts.Receipts.Receipt(ctx, it.event.ReceiptID)
		switch {
		case errors.Is(err, evidence.ErrNotFound):
			// A "did not run" outcome whose decision never committed:
			// nothing to record. (A known outcome always has its decision.)
			s.metrics.lateOutcomes.WithLabelValues("no_decision").Inc()
		case err != nil:
			s.lateFailed()
			s.putBackLate(append(write, items[i:]...))
			return false
		case rc.Outcome != nil && rc.Outcome.Status != wire.StatusPending:
			s.metrics.lateOutcomes.WithLabelValues("already_recorded").Inc()
		default:
			write = append(write, it)
		}
	}
	if len(write) == 0 {
		return true
	}
	events := make([]evidence.Event, len(write))
	for i, it := range write {
		events[i] = it.event
	}
	err := s.appendEvents(ctx, events...)
	switch {
	case err == nil:
		s.metrics.lateOutcomes.WithLabelValues("recorded").Add(float64(len(write)))
		s.log.Info("late outcomes recorded", "outcomes", len(write))
	case errors.Is(err, evidence.ErrUnavailable):
		s.log.Warn("late outcomes not recorded yet", "outcomes", len(events), "err", err)
		s.lateFailed()
		s.putBackLate(write)
		return false
	default:
		// Refused, not unreachable (an id that committed meanwhile, a
		// malformed event): each alone, so one cannot hold back the rest.
		for _, it := range write {
			switch err := s.appendEvents(ctx, it.event); {
			case err == nil:
				s.metrics.lateOutcomes.WithLabelValues("recorded").Inc()
			case errors.Is(err, evidence.ErrUnavailable) || it.attempts < lateAttempts:
				it.attempts++
				s.putBackLate([]lateItem{it})
			default:
				s.metrics.lateOutcomes.WithLabelValues("refused").Inc()
				s.log.Error("late outcome refused by the store; its receipt stays pending until the next start marks it interrupted",
					"receipt_id", it.event.ReceiptID, "err", err)
			}
		}
	}
	return true
}

// lateFailed notes that the store just failed: late outcomes wait
// lateSettle again.
func (s *Server) lateFailed() {
	s.late.mu.Lock()
	s.late.lastFailure = s.opts.Now()
	s.late.mu.Unlock()
}

// putBackLate returns items to their queues.
func (s *Server) putBackLate(items []lateItem) {
	var known, maybe []lateItem
	for _, it := range items {
		if it.notRun {
			maybe = append(maybe, it)
		} else {
			known = append(known, it)
		}
	}
	s.late.known.putBack(known)
	s.late.maybe.putBack(maybe)
}
