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
//     metadata.evidence_outcome "unrecorded"): the outcome is known;
//   - the call was refused evidence_unavailable because its decision write
//     failed, yet the decision committed after all (a COMMIT the server
//     carried out after the gateway gave up on it): the call did not run.
//
// Such outcomes wait here and are recorded once the store commits again.
// An outcome keeps its event id across attempts, so one that did commit
// after all is never written twice (event ids are unique in both stores).
// A "did not run" outcome is written only once its decision is found
// pending; if none shows up within lateGiveUp, the decision never
// committed and there is nothing to record. The queue is bounded and lives
// in memory: what is lost with the process (or with an overflow) is marked
// interrupted by the next start's recovery, as before.
const (
	lateMax      = 10000
	lateBatch    = 256
	lateInterval = time.Second
	lateGiveUp   = 2 * time.Minute
)

type lateItem struct {
	event  evidence.Event // the outcome, KindOutcome, for event.ReceiptID
	notRun bool           // the decision's own write failed: it may not exist
	queued time.Time
}

type lateOutcomes struct {
	mu    sync.Mutex
	items []lateItem
}

// add queues it; when the queue is full the oldest item gives way and
// false is returned.
func (l *lateOutcomes) add(it lateItem) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok := true
	if len(l.items) >= lateMax {
		l.items = l.items[1:]
		ok = false
	}
	l.items = append(l.items, it)
	return ok
}

// take removes up to n items, oldest first.
func (l *lateOutcomes) take(n int) []lateItem {
	l.mu.Lock()
	defer l.mu.Unlock()
	n = min(n, len(l.items))
	out := append([]lateItem(nil), l.items[:n]...)
	l.items = append(l.items[:0], l.items[n:]...)
	return out
}

// putBack returns items to the front of the queue, within its bound.
func (l *lateOutcomes) putBack(items []lateItem) {
	if len(items) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	room := max(0, lateMax-len(l.items))
	if len(items) > room {
		items = items[len(items)-room:]
	}
	l.items = append(append(make([]lateItem, 0, len(items)+len(l.items)), items...), l.items...)
}

func (l *lateOutcomes) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.items)
}

// queueLate keeps an outcome the store did not take, to record it later.
func (s *Server) queueLate(ev evidence.Event, notRun bool) {
	if !s.late.add(lateItem{event: ev, notRun: notRun, queued: s.opts.Now()}) {
		s.metrics.lateOutcomes.WithLabelValues("overflow").Inc()
		s.log.Error("late outcome queue full: the oldest gives way and stays pending until the next start marks it interrupted", "max", lateMax)
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

// FlushLate tries once more to record what is queued, for a clean
// shutdown, and returns how many outcomes remain unrecorded.
func (s *Server) FlushLate(ctx context.Context) int {
	for s.late.len() > 0 && ctx.Err() == nil && s.recordLate(ctx) {
	}
	return s.late.len()
}

// recordLate makes one pass over up to lateBatch queued outcomes and
// reports whether it made progress (so the caller may go on at once).
func (s *Server) recordLate(ctx context.Context) bool {
	if h, ok := s.opts.Evidence.(interface{ Healthy() bool }); ok && !h.Healthy() {
		return false // the store is still failing; live calls will tell when it is back
	}
	items := s.late.take(lateBatch)
	if len(items) == 0 {
		return false
	}
	var write, keep []lateItem
	now := s.opts.Now()
	for i, it := range items {
		rc, err := s.opts.Receipts.Receipt(ctx, it.event.ReceiptID)
		switch {
		case errors.Is(err, evidence.ErrNotFound):
			if it.notRun && now.Sub(it.queued) < lateGiveUp {
				keep = append(keep, it) // its decision may still commit
			} else {
				s.metrics.lateOutcomes.WithLabelValues("no_decision").Inc()
			}
		case err != nil:
			s.late.putBack(append(append(keep, write...), items[i:]...))
			return false
		case rc.Outcome != nil && rc.Outcome.Status != wire.StatusPending:
			s.metrics.lateOutcomes.WithLabelValues("already_recorded").Inc()
		default:
			write = append(write, it)
		}
	}
	if len(write) > 0 {
		events := make([]evidence.Event, len(write))
		for i, it := range write {
			events[i] = it.event
		}
		if err := s.appendEvents(ctx, events...); err != nil {
			s.log.Warn("late outcomes not recorded yet", "outcomes", len(events), "err", err)
			s.late.putBack(append(keep, write...))
			return false
		}
		s.metrics.lateOutcomes.WithLabelValues("recorded").Add(float64(len(write)))
		s.log.Info("late outcomes recorded", "outcomes", len(write))
	}
	s.late.putBack(keep)
	return len(write) > 0 || len(keep) < len(items)
}
