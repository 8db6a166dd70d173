package evidence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

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
//     for LateSettle, and written only if its decision is there, pending.
//
// The two kinds wait in separate bounded queues, so a flood of refusals
// during an outage never pushes out an outcome the gateway knows. Both are
// spooled to a local file (spool.go) before Queue returns, so an outcome
// survives the gateway dying before the store is back: the next start
// replays the spool (RecoverStart) before it marks the instance's calls
// left pending interrupted. An outcome keeps its event id across attempts
// and restarts, and is written only while its receipt is still pending, so
// one that committed after all is never written twice.
const (
	// LateMax bounds each queue.
	LateMax   = 10000
	lateBatch = 256
	// LateInterval is how often Run tries again.
	LateInterval = time.Second
	// LateSettle is how long the store must have answered before queued
	// outcomes are tried.
	LateSettle   = 3 * time.Second
	lateAttempts = 3 // tries of an outcome the store refuses (not: cannot be reached)
)

// Results counted by LateOutcomes.Counts (metric
// portcullis_evidence_late_outcomes_total{result}).
const (
	LateRecorded        = "recorded"         // written late
	LateAlreadyRecorded = "already_recorded" // its receipt had an outcome by then
	LateNoDecision      = "no_decision"      // a refused call's decision never committed
	LateRefused         = "refused"          // the store refused it lateAttempts times
	LateOverflow        = "overflow"         // its queue was full: the oldest gave way
	LateReplayed        = "replayed"         // loaded from the spool at start
	LateSpoolError      = "spool_error"      // could not be spooled: kept in memory only
	LateSpoolOverflow   = "spool_overflow"   // the spool was full: kept in memory only
)

// LateResults lists every result, for metrics.
var LateResults = []string{LateRecorded, LateAlreadyRecorded, LateNoDecision, LateRefused, LateOverflow,
	LateReplayed, LateSpoolError, LateSpoolOverflow}

// LateOptions configure LateOutcomes.
type LateOptions struct {
	// Writer makes outcomes durable (the evidence Writer). Required.
	Writer interface {
		Append(ctx context.Context, events ...Event) error
	}
	// Receipts tells whether a receipt exists and has an outcome. Required.
	Receipts interface {
		Receipt(ctx context.Context, id uuid.UUID) (wire.Receipt, error)
	}
	// Healthy reports the store's health (Writer.Healthy); nil: healthy.
	Healthy func() bool
	// WriteTimeout bounds one write, and is how long a "did not run"
	// outcome waits before it is checked (its decision's write ended by
	// then). Default 15s.
	WriteTimeout time.Duration
	// Spool is the file that keeps queued outcomes across a crash; empty
	// keeps them in memory only.
	Spool string
	// SpoolMaxBytes bounds the spool (default DefaultSpoolMaxBytes).
	SpoolMaxBytes int64
	Logger        *slog.Logger
	Now           func() time.Time
}

type lateItem struct {
	event    Event // the outcome, KindOutcome, for event.ReceiptID
	notRun   bool  // the decision's own write failed: it may not exist
	queued   time.Time
	attempts int // writes the store refused
}

// lateQueue is a bounded FIFO of late outcomes.
type lateQueue struct {
	mu    sync.Mutex
	items []lateItem
}

// add queues it; when the queue is full the oldest item gives way and is
// returned.
func (q *lateQueue) add(it lateItem) (dropped *lateItem) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) >= LateMax {
		d := q.items[0]
		dropped = &d
		q.items = q.items[1:]
	}
	q.items = append(q.items, it)
	return dropped
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
	room := max(0, LateMax-len(q.items))
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

func (q *lateQueue) snapshot() []lateItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.items)
}

func (q *lateQueue) has(receipt uuid.UUID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, it := range q.items {
		if it.event.ReceiptID == receipt {
			return true
		}
	}
	return false
}

// NotRunOutcome is the outcome of an allowed call that was refused because
// its decision could not be made durable: it never ran (status error,
// evidence_unavailable, backend none). Queue it with notRun true: it is
// written only if the decision did commit after all.
func NotRunOutcome(receipt uuid.UUID, instanceID string, at time.Time) Event {
	code := string(wire.CodeEvidenceUnavailable)
	return Event{
		ID: uuid.Must(uuid.NewV7()), ReceiptID: receipt, Kind: KindOutcome, Time: at.UTC(),
		InstanceID: instanceID,
		Outcome:    &wire.Outcome{Status: wire.StatusError, ErrorCode: &code, Backend: "none"},
	}
}

// Unavailable is a writer and receipt reader that always answers
// ErrUnavailable: the store of a process built without one (tests that
// never call a tool), so that LateOutcomes keeps what it is given queued
// in memory, bounded.
type Unavailable struct{}

// Append is always ErrUnavailable.
func (Unavailable) Append(context.Context, ...Event) error { return ErrUnavailable }

// Receipt is always ErrUnavailable.
func (Unavailable) Receipt(context.Context, uuid.UUID) (wire.Receipt, error) {
	return wire.Receipt{}, ErrUnavailable
}

// LateOutcomes keeps outcomes the store did not take and records them once
// it commits again.
type LateOutcomes struct {
	opts         LateOptions
	known, maybe lateQueue
	spool        *spool
	// inflight counts items taken out of the queues by a pass and not yet
	// settled, so compaction never forgets them.
	inflight sync.Map // event id -> lateItem

	mu              sync.Mutex
	lastFailure     time.Time // the store was last seen failing
	lastOverflowLog time.Time
	lastSpoolLog    time.Time

	counts sync.Map // result -> *atomic.Uint64
	flush  sync.Mutex
}

// OpenLateOutcomes opens the spool (when configured), takes its lock and
// queues what it holds. Call RecoverStart before serving.
func OpenLateOutcomes(opts LateOptions) (*LateOutcomes, error) {
	if opts.Writer == nil || opts.Receipts == nil {
		return nil, errors.New("evidence: late outcomes need a writer and a receipt reader")
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 15 * time.Second
	}
	if opts.SpoolMaxBytes <= 0 {
		opts.SpoolMaxBytes = DefaultSpoolMaxBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := &LateOutcomes{opts: opts}
	for _, r := range LateResults {
		l.counts.Store(r, new(atomic.Uint64))
	}
	if opts.Spool == "" {
		return l, nil
	}
	s, items, note, err := openSpool(opts.Spool, opts.SpoolMaxBytes)
	if err != nil {
		return nil, err
	}
	l.spool = s
	if note != "" {
		opts.Logger.Error("late outcome spool: part of it was unreadable and was cut (a torn last record after a crash is expected; anything else is corruption)",
			"spool", opts.Spool, "detail", note)
	}
	for _, it := range items {
		q := &l.known
		if it.notRun {
			q = &l.maybe
		}
		q.mu.Lock()
		q.items = append(q.items, it)
		q.mu.Unlock()
	}
	if len(items) > 0 {
		l.count(LateReplayed, len(items))
		opts.Logger.Warn("late outcomes from a previous run loaded from the spool; they are recorded before serving",
			"spool", opts.Spool, "outcomes", len(items))
	}
	return l, nil
}

func (l *LateOutcomes) count(result string, n int) {
	if v, ok := l.counts.Load(result); ok {
		v.(*atomic.Uint64).Add(uint64(n))
	}
}

// Counts returns how many outcomes ended each way (LateResults).
func (l *LateOutcomes) Counts() map[string]uint64 {
	out := map[string]uint64{}
	l.counts.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
}

// Len returns how many outcomes are queued.
func (l *LateOutcomes) Len() int { return l.known.len() + l.maybe.len() }

// Pending returns how many of each kind are queued: outcomes of calls that
// ran (known) and "did not run" candidates (maybe).
func (l *LateOutcomes) Pending() (known, maybe int) { return l.known.len(), l.maybe.len() }

// Queue keeps an outcome the store did not take, to record it later. With
// a spool it returns once the outcome is on disk (fsynced); when the spool
// cannot take it, it is kept in memory only, logged and counted.
func (l *LateOutcomes) Queue(ev Event, notRun bool) {
	l.Failed()
	now := l.opts.Now()
	it := lateItem{event: ev, notRun: notRun, queued: now}
	q := &l.known
	if notRun {
		q = &l.maybe
	}
	dropped := q.add(it)
	if dropped != nil {
		l.count(LateOverflow, 1)
		if l.rateLimited(&l.lastOverflowLog, now) {
			l.opts.Logger.Error("late outcome queue full: the oldest give way and stay pending until the next start marks them interrupted (logged at most once a minute; see portcullis_evidence_late_outcomes_total{result=\"overflow\"})",
				"max", LateMax, "did_not_run", notRun)
		}
	}
	if l.spool == nil {
		return
	}
	recs := []spoolRecord{addRecord(it)}
	if dropped != nil {
		recs = append(recs, spoolRecord{Op: "done", ID: dropped.event.ID})
	}
	err := l.spool.append(recs, true)
	if errors.Is(err, errSpoolFull) {
		// Settled records may be what fills it: rewrite it with what is
		// live (this outcome included, when it fits).
		if written, cerr := l.compact(); cerr != nil {
			err = cerr
		} else if written[ev.ID] {
			err = nil
		}
	}
	if err != nil {
		result := LateSpoolError
		if errors.Is(err, errSpoolFull) {
			result = LateSpoolOverflow
		}
		l.count(result, 1)
		if l.rateLimited(&l.lastSpoolLog, now) {
			l.opts.Logger.Error("late outcome not spooled: it is kept in memory only and is lost if the gateway stops before the store is back (logged at most once a minute; see portcullis_evidence_late_outcomes_total{result=\"spool_error\"|\"spool_overflow\"})",
				"spool", l.opts.Spool, "err", err.Error())
		}
	}
}

func (l *LateOutcomes) rateLimited(last *time.Time, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(*last) < time.Minute {
		return false
	}
	*last = now
	return true
}

// Failed notes that the store just failed: queued outcomes wait
// LateSettle again.
func (l *LateOutcomes) Failed() {
	l.mu.Lock()
	l.lastFailure = l.opts.Now()
	l.mu.Unlock()
}

// Run records queued outcomes every LateInterval until ctx ends.
func (l *LateOutcomes) Run(ctx context.Context) {
	Every(ctx, LateInterval, func() { l.Flush(ctx) })
}

// Every calls f every d until ctx ends: the loop of the evidence side's
// background work (late outcomes, chain head copies, result sweeps).
func Every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// Flush records what is queued and ready and returns how many outcomes
// remain queued.
func (l *LateOutcomes) Flush(ctx context.Context) int {
	l.flush.Lock()
	defer l.flush.Unlock()
	took := false
	for l.Len() > 0 && ctx.Err() == nil {
		settled, ok := l.pass(ctx)
		if len(settled) > 0 {
			took = true
			l.settle(settled)
		}
		if !ok {
			break
		}
	}
	if took && l.spool != nil {
		l.maybeCompact()
	}
	return l.Len()
}

// settle writes "done" records for items that left the queues for good.
func (l *LateOutcomes) settle(items []lateItem) {
	for _, it := range items {
		l.inflight.Delete(it.event.ID)
	}
	if l.spool == nil {
		return
	}
	recs := make([]spoolRecord, len(items))
	for i, it := range items {
		recs[i] = spoolRecord{Op: "done", ID: it.event.ID}
	}
	if err := l.spool.append(recs, false); err != nil {
		// Harmless: the next start checks their receipts again.
		l.opts.Logger.Warn("late outcome spool: could not mark outcomes settled", "err", err.Error())
	}
}

// maybeCompact cuts the spool back when nothing is queued, or rewrites it
// when settled records outweigh live ones.
func (l *LateOutcomes) maybeCompact() {
	live := l.Len()
	size := l.spool.bytes()
	if live == 0 || size > 1<<20 && size > int64(live)*4*512 {
		if _, err := l.compact(); err != nil {
			l.opts.Logger.Warn("late outcome spool: compaction failed", "err", err.Error())
		}
	}
}

// compact rewrites the spool with what is live (both queues and what a
// pass holds), as much as fits, and returns the ids written.
func (l *LateOutcomes) compact() (map[uuid.UUID]bool, error) {
	live := append(l.known.snapshot(), l.maybe.snapshot()...)
	l.inflight.Range(func(_, v any) bool {
		live = append(live, v.(lateItem))
		return true
	})
	return l.spool.rewrite(live)
}

// pass makes one pass over up to lateBatch ready outcomes. It returns the
// items that left the queues for good (recorded, found recorded, without a
// decision, refused) and whether the caller may go on at once.
func (l *LateOutcomes) pass(ctx context.Context) (settled []lateItem, more bool) {
	now := l.opts.Now()
	l.mu.Lock()
	if l.opts.Healthy != nil && !l.opts.Healthy() {
		l.lastFailure = now
	}
	ready := now.Sub(l.lastFailure) >= LateSettle
	l.mu.Unlock()
	if !ready {
		return nil, false // the store failed lately; live calls will tell when it is back
	}
	items := l.known.take(lateBatch, func(lateItem) bool { return true })
	if len(items) < lateBatch {
		// A decision write ends by the call's evidence deadline; one that
		// committed late is in the store by now.
		items = append(items, l.maybe.take(lateBatch-len(items), func(it lateItem) bool {
			return now.Sub(it.queued) >= l.opts.WriteTimeout
		})...)
	}
	if len(items) == 0 {
		return nil, false
	}
	for _, it := range items {
		l.inflight.Store(it.event.ID, it)
	}
	var write []lateItem
	for i, it := range items {
		rctx, cancel := context.WithTimeout(ctx, l.opts.WriteTimeout)
		rc, err := l.opts.Receipts.Receipt(rctx, it.event.ReceiptID)
		cancel()
		switch {
		case errors.Is(err, ErrNotFound):
			// A "did not run" outcome whose decision never committed:
			// nothing to record. (A known outcome always has its decision.)
			l.count(LateNoDecision, 1)
			settled = append(settled, it)
		case err != nil:
			l.Failed()
			l.putBack(append(write, items[i:]...))
			return settled, false
		case rc.Outcome != nil && rc.Outcome.Status != wire.StatusPending:
			l.count(LateAlreadyRecorded, 1)
			settled = append(settled, it)
		default:
			write = append(write, it)
		}
	}
	if len(write) == 0 {
		return settled, true
	}
	events := make([]Event, len(write))
	for i, it := range write {
		events[i] = it.event
	}
	err := l.append(ctx, events...)
	switch {
	case err == nil:
		l.count(LateRecorded, len(write))
		l.opts.Logger.Info("late outcomes recorded", "outcomes", len(write))
		settled = append(settled, write...)
	case errors.Is(err, ErrUnavailable):
		l.opts.Logger.Warn("late outcomes not recorded yet", "outcomes", len(events), "err", err)
		l.Failed()
		l.putBack(write)
		return settled, false
	default:
		// Refused, not unreachable (an id that committed meanwhile, a
		// malformed event): each alone, so one cannot hold back the rest.
		for _, it := range write {
			switch err := l.append(ctx, it.event); {
			case err == nil:
				l.count(LateRecorded, 1)
				settled = append(settled, it)
			case errors.Is(err, ErrUnavailable) || it.attempts < lateAttempts:
				it.attempts++
				l.putBack([]lateItem{it})
			default:
				l.count(LateRefused, 1)
				l.opts.Logger.Error("late outcome refused by the store; its receipt stays pending until the next start marks it interrupted",
					"receipt_id", it.event.ReceiptID, "err", err)
				settled = append(settled, it)
			}
		}
	}
	return settled, true
}

func (l *LateOutcomes) append(ctx context.Context, events ...Event) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.WriteTimeout)
	defer cancel()
	return l.opts.Writer.Append(ctx, events...)
}

// putBack returns items to their queues.
func (l *LateOutcomes) putBack(items []lateItem) {
	var known, maybe []lateItem
	for _, it := range items {
		l.inflight.Delete(it.event.ID)
		if it.notRun {
			maybe = append(maybe, it)
		} else {
			known = append(known, it)
		}
	}
	l.known.putBack(known)
	l.maybe.putBack(maybe)
}

// Close flushes the spool and releases its lock; what is queued stays in
// it for the next start.
func (l *LateOutcomes) Close() error {
	if l.spool == nil {
		return nil
	}
	return l.spool.close()
}

// RecoverStart runs at start, before the instance serves: it records the
// outcomes a previous run spooled (ready at once: that process is gone,
// and so are its writes), then marks every allow decision of instanceID
// still without an outcome interrupted (RecoverInterrupted), except those
// whose outcome is still queued. It fails, marking nothing, when a spooled
// outcome of a call that ran cannot be recorded: marking that call
// interrupted would lose how it really ended.
func RecoverStart(ctx context.Context, store Store, w *Writer, late *LateOutcomes, instanceID string) (recorded, interrupted int, err error) {
	if late != nil {
		before := late.Counts()[LateRecorded]
		late.mu.Lock()
		late.lastFailure = time.Time{}
		late.mu.Unlock()
		// Outcomes the previous process queued were waiting on its own
		// writes, which ended with it.
		late.maybe.mu.Lock()
		for i := range late.maybe.items {
			late.maybe.items[i].queued = time.Time{}
		}
		late.maybe.mu.Unlock()
		left := late.Flush(ctx)
		recorded = int(late.Counts()[LateRecorded] - before)
		if known, _ := late.Pending(); known > 0 {
			return recorded, 0, fmt.Errorf("evidence: %d spooled outcomes of calls that ran could not be recorded (the store refuses or fails); not marking calls interrupted", known)
		}
		_ = left
	}
	pending, err := store.PendingDecisions(ctx, instanceID)
	if err != nil {
		return recorded, 0, fmt.Errorf("evidence: list pending decisions of %q: %w", instanceID, err)
	}
	if late != nil {
		pending = slices.DeleteFunc(pending, late.maybe.has)
	}
	n, err := recoverPending(ctx, w, pending)
	return recorded, n, err
}
