package evidence

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/wire"
)

// WriterOptions configure a Writer. Zero values take the defaults.
type WriterOptions struct {
	// InstanceID names this gateway instance in every event it writes and
	// keys its hash chains. Default: the host name.
	InstanceID string
	// MaxBatch caps the events of one commit (default 500). The events of
	// one Append call are never split, so a larger call commits alone.
	MaxBatch int
	// CommitTimeout bounds one commit, including the chain-head lookup
	// (default 10s). A store slower than this counts as unavailable.
	CommitTimeout time.Duration
	// Logger receives commit failures (never event contents). Default:
	// discard.
	Logger *slog.Logger
	// Now is the clock for events without a time and for chain starts.
	Now func() time.Time
	// Observe, when set, is told of every commit: its events, how long it
	// took and whether it failed (metrics; called on the commit goroutine,
	// so it must not block).
	Observe func(events int, took time.Duration, err error)
}

// Writer makes evidence durable with group commit: one goroutine commits
// whatever queued while the previous commit ran (natural batching, no timer
// window), so many concurrent calls share one transaction and one fsync. It
// also keeps this process's hash chain: Append computes each event's content
// digest in the caller's goroutine, and the commit goroutine, the one serial
// path, only links digests in order (ChainLinkHash). Append returns only
// after COMMIT.
type Writer struct {
	store Store
	opts  WriterOptions

	mu     sync.Mutex
	queue  []*request
	closed bool
	wake   chan struct{}
	done   chan struct{}

	healthy atomic.Bool
	// last is the last committed chain event, for HeadRecorder.
	last atomic.Pointer[chainHead]

	// Chain state, owned by the loop goroutine.
	chainID uuid.UUID
	seq     int64
	head    []byte
	started bool // a chain_start of chainID is committed
	dirty   bool // a commit failed: re-read the head before the next one

	// unhashed skips the content digest and the link hash of every event
	// but chain_start. Only the writer benchmark sets it (export_test.go),
	// to measure what the chains cost; such events do not verify.
	unhashed bool
}

type request struct {
	ctx    context.Context
	events []Event
	// digests[i] is ContentDigest(events[i]), computed by the appending
	// goroutine so the commit loop only links (nil when unhashed).
	digests []Digest
	done    chan error

	// quota, when set, is drawn in the commit that appends events
	// (AppendDrawing); when it is refused, refusal's events are appended
	// instead and exceeded is set before done.
	quota    *QuotaRequest
	refusal  func(*QuotaExceeded) []Event
	exceeded *QuotaExceeded
}

// NewWriter starts the writer's goroutine. Close stops it.
func NewWriter(store Store, opts WriterOptions) *Writer {
	return newWriter(store, opts, false)
}

func newWriter(store Store, opts WriterOptions, unhashed bool) *Writer {
	if opts.InstanceID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "unknown"
		}
		opts.InstanceID = host
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 500
	}
	if opts.CommitTimeout <= 0 {
		opts.CommitTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	w := &Writer{
		store: store,
		opts:  opts,
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),

		unhashed: unhashed,
	}
	w.healthy.Store(true)
	go w.loop()
	return w
}

// InstanceID is the instance name the writer stamps on its events.
func (w *Writer) InstanceID() string { return w.opts.InstanceID }

// Healthy reports whether the last commit succeeded, for /readyz: after a
// failure it stays false until a commit succeeds again.
func (w *Writer) Healthy() bool { return w.healthy.Load() }

// QueueDepth is how many events wait for a commit (not counting the batch
// being committed).
func (w *Writer) QueueDepth() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, r := range w.queue {
		n += len(r.events)
	}
	return n
}

// Append queues events and blocks until they are durably committed, all in
// one transaction. Events without an ID or time get one (set ID yourself to
// know it: events are passed by value). An error means the events must be
// treated as not durable — when ctx ends first, they may still commit
// later, but the caller is never told they did. Errors wrap ErrUnavailable
// when the store is unreachable and ErrInvalidEvent for malformed events.
func (w *Writer) Append(ctx context.Context, events ...Event) error {
	if len(events) == 0 {
		return nil
	}
	prepared, digests, err := w.prepareAll(events)
	if err != nil {
		return err
	}
	return w.enqueue(&request{ctx: ctx, events: prepared, digests: digests, done: make(chan error, 1)})
}

// DrawsQuotas reports whether the writer's store draws quotas in the
// transaction that appends events (AppendDrawing can be used).
func (w *Writer) DrawsQuotas() bool {
	_, ok := w.store.(QuotaAppender)
	return ok
}

// AppendDrawing is Append for an admitted call's decision whose quotas
// (contract section 10) must be drawn first: the draw of qs in the window
// holding now, all or none, rides in the same transaction as the events
// (one commit for both, group-committed with every other append). A
// request whose draw would pass a limit draws nothing and appends
// refusal's events instead (its receipt records the refusal); exceeded
// says which quota refused it. An error means nothing was drawn or
// recorded as far as the caller knows (as for Append). The store must be
// a QuotaAppender (DrawsQuotas).
func (w *Writer) AppendDrawing(ctx context.Context, qs []wire.Quota, now time.Time, refusal func(*QuotaExceeded) []Event, events ...Event) (*QuotaExceeded, error) {
	if !w.DrawsQuotas() || refusal == nil {
		return nil, fmt.Errorf("evidence: this writer's store cannot draw quotas with its events")
	}
	qs = SortQuotas(qs)
	for _, q := range qs {
		if q.Cost > q.Limit { // never fits: refused without touching the counters
			ex := &QuotaExceeded{Quota: q, RetryAfter: RetryAfter(now, q.WindowS)}
			return ex, w.Append(ctx, refusal(ex)...)
		}
	}
	prepared, digests, err := w.prepareAll(events)
	if err != nil {
		return nil, err
	}
	r := &request{ctx: ctx, events: prepared, digests: digests, done: make(chan error, 1),
		quota: &QuotaRequest{Quotas: qs, Now: now}, refusal: refusal}
	if err := w.enqueue(r); err != nil {
		return nil, err
	}
	return r.exceeded, nil
}

// prepareAll prepares events and, unless unhashed, their content digests.
func (w *Writer) prepareAll(events []Event) ([]Event, []Digest, error) {
	prepared := make([]Event, len(events))
	var digests []Digest
	if !w.unhashed {
		digests = make([]Digest, len(events))
	}
	for i, e := range events {
		p, err := w.prepare(e)
		if err != nil {
			return nil, nil, err
		}
		prepared[i] = p
		if digests != nil {
			// The expensive part of the chain hash (canonical encoding and
			// SHA-256 of the whole content) runs here, in the caller's
			// goroutine, in parallel with other appends and with the
			// commit in progress.
			if digests[i], err = ContentDigest(p); err != nil {
				return nil, nil, fmt.Errorf("%w: %v", ErrInvalidEvent, err)
			}
		}
	}
	return prepared, digests, nil
}

// enqueue queues r and waits for its commit.
func (w *Writer) enqueue(r *request) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.queue = append(w.queue, r)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	select {
	case err := <-r.done:
		return err
	case <-r.ctx.Done():
		return fmt.Errorf("evidence: append abandoned before commit was confirmed: %w", r.ctx.Err())
	}
}

// Close commits what is queued and stops the writer. Appends after Close
// fail with ErrClosed.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("evidence: close writer: %w", ctx.Err())
	}
}

// prepare checks one event and normalizes it into the exact form a store
// round trip gives back, so its hash recomputes from stored rows.
func (w *Writer) prepare(e Event) (Event, error) {
	if err := checkKind(&e); err != nil {
		return Event{}, err
	}
	if e.Time.IsZero() {
		e.Time = w.opts.Now()
	}
	e.Time = NormalizeTime(e.Time)
	e.InstanceID = w.opts.InstanceID
	e.PrincipalID = cleanText(e.PrincipalID)
	e.SessionID = cleanText(e.SessionID)
	e.CallID = cleanText(e.CallID)
	e.Tool = cleanText(e.Tool)
	e.PolicyRevision = cleanText(e.PolicyRevision)
	e.ArgsSHA256 = cleanText(e.ArgsSHA256)
	e.TraceID = cleanText(e.TraceID)
	e.ErrorCode = cleanText(e.ErrorCode)
	if err := checkRuleIDs(&e); err != nil {
		return Event{}, err
	}
	if e.Reasons != nil {
		rs := make([]string, len(e.Reasons))
		for i, r := range e.Reasons {
			rs[i] = cleanText(r)
		}
		e.Reasons = rs
	}
	var err error
	if e.Args, err = ownJSON(e.Args, e.ID, "args are"); err != nil {
		return Event{}, err
	}
	if e.Body, err = ownJSON(e.Body, e.ID, "body is"); err != nil {
		return Event{}, err
	}
	if e.Scope != nil {
		e.Scope = copyScope(e.Scope)
	}
	if e.Outcome != nil {
		o, err := copyOutcome(e.Outcome)
		if err != nil {
			return Event{}, fmt.Errorf("%w: event %s outcome: %v", ErrInvalidEvent, e.ID, err)
		}
		e.Outcome = o
	}
	if e.ParentReceiptID != nil {
		p := *e.ParentReceiptID
		e.ParentReceiptID = &p
	}
	e.ChainID, e.ChainSeq, e.PrevHash, e.Hash = uuid.Nil, 0, nil, nil
	return e, nil
}

// checkKind holds e to what its kind requires (a decision is its own
// receipt and says allow, deny or invalid; an outcome names its receipt
// and has a status; the other kinds carry a body and nothing of a call),
// giving it an id (and receipt id) where it has none.
func checkKind(e *Event) error {
	switch e.Kind {
	case KindDecision, KindOutcome, KindPolicyActivated, KindShadowDiff, KindCheckpoint, KindRetention, KindLegalHold, KindLegalHoldRelease, KindApproval:
		if e.ID == uuid.Nil {
			id, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("evidence: new event id: %w", err)
			}
			e.ID = id
		}
	case KindChainStart:
		return fmt.Errorf("%w: chain_start events are written by the Writer only", ErrInvalidEvent)
	default:
		return fmt.Errorf("%w: unknown kind %q", ErrInvalidEvent, e.Kind)
	}
	switch e.Kind {
	case KindDecision:
		if e.ReceiptID == uuid.Nil {
			e.ReceiptID = e.ID
		}
		if e.ReceiptID != e.ID {
			return fmt.Errorf("%w: decision %s must be its own receipt, got receipt_id %s", ErrInvalidEvent, e.ID, e.ReceiptID)
		}
		switch e.Decision {
		case wire.DecisionAllow, wire.DecisionDeny, wire.DecisionInvalid:
		default:
			return fmt.Errorf("%w: decision %s: decision must be allow, deny or invalid, got %q", ErrInvalidEvent, e.ID, e.Decision)
		}
	case KindOutcome:
		if e.ReceiptID == uuid.Nil {
			return fmt.Errorf("%w: outcome %s names no receipt", ErrInvalidEvent, e.ID)
		}
		if e.Outcome == nil || e.Outcome.Status == "" {
			return fmt.Errorf("%w: outcome %s has no status", ErrInvalidEvent, e.ID)
		}
	default:
		if e.ReceiptID == uuid.Nil {
			e.ReceiptID = e.ID
		}
		if len(e.Body) == 0 {
			return fmt.Errorf("%w: %s event %s has no body", ErrInvalidEvent, e.Kind, e.ID)
		}
		if e.Decision != "" || e.Outcome != nil || e.Scope != nil {
			return fmt.Errorf("%w: %s event %s carries decision or outcome fields", ErrInvalidEvent, e.Kind, e.ID)
		}
	}
	return nil
}

// checkRuleIDs allows rule ids on decisions only, each a valid id and at
// most wire.MaxRuleIDs of them, and gives e its own copy.
func checkRuleIDs(e *Event) error {
	if len(e.RuleIDs) == 0 {
		e.RuleIDs = nil
		return nil
	}
	if e.Kind != KindDecision {
		return fmt.Errorf("%w: %s event %s carries rule ids", ErrInvalidEvent, e.Kind, e.ID)
	}
	if len(e.RuleIDs) > wire.MaxRuleIDs {
		return fmt.Errorf("%w: decision %s has %d rule ids, more than %d", ErrInvalidEvent, e.ID, len(e.RuleIDs), wire.MaxRuleIDs)
	}
	for _, r := range e.RuleIDs {
		if !wire.ValidRuleID(r) {
			return fmt.Errorf("%w: decision %s: rule id %q is not one", ErrInvalidEvent, e.ID, r)
		}
	}
	e.RuleIDs = append([]string(nil), e.RuleIDs...)
	return nil
}

// ownJSON is a copy of raw (nil when empty), which must be valid UTF-8
// JSON; what names the field in the error ("args are", "body is").
func ownJSON(raw json.RawMessage, id uuid.UUID, what string) (json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if !utf8.Valid(raw) || !json.Valid(raw) {
		return nil, fmt.Errorf("%w: event %s: %s not valid UTF-8 JSON", ErrInvalidEvent, id, what)
	}
	return append(json.RawMessage(nil), raw...), nil
}

// NormalizeTime is the form every store keeps: UTC, microsecond precision
// (PostgreSQL's), so a stored event hashes like the one written.
func NormalizeTime(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}

// cleanText makes a string storable in every store: valid UTF-8, no NUL.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

func (w *Writer) loop() {
	defer close(w.done)
	for {
		batch, closed := w.take()
		if len(batch) > 0 {
			w.flush(batch)
			continue
		}
		if closed {
			return
		}
		<-w.wake
	}
}

// take removes the next batch from the queue: whole requests, up to
// MaxBatch events (a single larger request goes alone).
func (w *Writer) take() ([]*request, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, total := 0, 0
	for n < len(w.queue) {
		k := len(w.queue[n].events)
		if n > 0 && total+k > w.opts.MaxBatch {
			break
		}
		total += k
		n++
	}
	batch := make([]*request, n)
	copy(batch, w.queue[:n])
	rest := copy(w.queue, w.queue[n:])
	clear(w.queue[rest:])
	w.queue = w.queue[:rest]
	return batch, w.closed
}

func (w *Writer) flush(batch []*request) {
	live := batch[:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- fmt.Errorf("evidence: append abandoned before commit: %w", err)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	err := w.commit(live)
	if err != nil && !errors.Is(err, ErrUnavailable) && len(live) > 1 {
		// Not a connectivity failure: one request may be poison. Commit
		// each alone so it fails only its own caller.
		for _, r := range live {
			r.done <- w.commit([]*request{r})
		}
		return
	}
	for _, r := range live {
		r.done <- err
	}
}

// commit chains the batch's events and appends them in one transaction. On
// failure the chain state falls back to the last committed head and is
// re-read from the store before the next commit, so the chain never has a
// hole nor a repeated sequence number even after an unknown commit result.
func (w *Writer) commit(batch []*request) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.opts.CommitTimeout)
	defer cancel()
	n := 0
	for _, r := range batch {
		n += len(r.events)
	}
	start := time.Now()
	err := w.commitEvents(ctx, batch, n)
	if w.opts.Observe != nil {
		w.opts.Observe(n, time.Since(start), err)
	}
	if err != nil {
		w.healthy.Store(false)
		w.dirty = true
		w.opts.Logger.Error("evidence commit failed", "events", n, "requests", len(batch), "error", err.Error())
		return fmt.Errorf("evidence: commit of %d events: %w", n, err)
	}
	w.healthy.Store(true)
	return nil
}

func (w *Writer) commitEvents(ctx context.Context, batch []*request, n int) error {
	if w.dirty && w.started {
		chainID, seq, hash, err := w.store.ChainHead(ctx, w.opts.InstanceID)
		if err != nil {
			return fmt.Errorf("re-read chain head: %w", err)
		}
		if chainID == w.chainID {
			w.seq, w.head = seq, hash
		} else {
			w.started = false
		}
	}
	w.dirty = false
	var start *Event
	if !w.started {
		e, err := w.chainStart(ctx)
		if err != nil {
			return err
		}
		start = &e
	}
	var quotas []*QuotaRequest
	for _, r := range batch {
		r.exceeded = nil
		if r.quota != nil {
			quotas = append(quotas, r.quota)
		}
	}
	var (
		chainID, seq, head = w.chainID, w.seq, w.head
		events             []Event
	)
	link := func() ([]Event, error) {
		var err error
		chainID, seq, head, events, err = w.link(batch, n, start)
		return events, err
	}
	if len(quotas) > 0 {
		qa, ok := w.store.(QuotaAppender)
		if !ok {
			return fmt.Errorf("the store cannot draw quotas with its events")
		}
		if err := qa.AppendDrawing(ctx, quotas, link); err != nil {
			return err
		}
	} else {
		if _, err := link(); err != nil {
			return err
		}
		if err := w.store.Append(ctx, events); err != nil {
			return err
		}
	}
	for _, r := range batch {
		if r.quota != nil {
			r.exceeded = r.quota.exceeded
		}
	}
	w.chainID, w.seq, w.head, w.started = chainID, seq, head, true
	w.last.Store(&chainHead{chainID: chainID, seq: seq, hash: head})
	return nil
}

// link chains the batch's events after the committed head (or after
// start, a new chain's first event). A request refused its quota draw
// (settled by the store just before) contributes its refusal's events,
// prepared here, instead of its own.
func (w *Writer) link(batch []*request, n int, start *Event) (chainID uuid.UUID, seq int64, head []byte, events []Event, err error) {
	events = make([]Event, 0, n+1)
	chainID, seq, head = w.chainID, w.seq, w.head
	if start != nil {
		chainID, seq, head = start.ChainID, 1, start.Hash
		events = append(events, *start)
	}
	// One allocation holds every hash of the batch; linking is one SHA-256
	// of 88 bytes per event.
	var hashes []byte
	if !w.unhashed {
		if len(head) != HashSize {
			return chainID, seq, head, nil, fmt.Errorf("chain %s head at seq %d has a %d-byte hash, want %d", chainID, seq, len(head), HashSize)
		}
		hashes = make([]byte, 0, n*HashSize)
	}
	for _, r := range batch {
		evs, digests := r.events, r.digests
		if r.quota != nil && r.quota.exceeded != nil {
			if evs, digests, err = w.prepareAll(r.refusal(r.quota.exceeded)); err != nil {
				return chainID, seq, head, nil, fmt.Errorf("refusal of a quota draw: %w", err)
			}
		}
		for i, e := range evs {
			seq++
			e.ChainID, e.ChainSeq, e.PrevHash = chainID, seq, head
			if !w.unhashed {
				hashes = linkHash(hashes, head, chainID, seq, digests[i])
				e.Hash = hashes[len(hashes)-HashSize : len(hashes) : len(hashes)]
				head = e.Hash
			}
			events = append(events, e)
		}
	}
	return chainID, seq, head, events, nil
}

// Head returns the last chain event this writer committed (ok false
// before its first commit): what a HeadRecorder copies outside the
// database.
func (w *Writer) Head() (chainID uuid.UUID, seq int64, hash []byte, ok bool) {
	h := w.last.Load()
	if h == nil {
		return uuid.Nil, 0, nil, false
	}
	return h.chainID, h.seq, h.hash, true
}

// chainStart builds the first event of a new chain, linked to the head of
// the instance's previous chain.
func (w *Writer) chainStart(ctx context.Context) (Event, error) {
	prevChain, prevSeq, prevHash, err := w.store.ChainHead(ctx, w.opts.InstanceID)
	if err != nil {
		return Event{}, fmt.Errorf("read chain head: %w", err)
	}
	link := ChainLink{PrevChainSeq: prevSeq}
	if prevChain != uuid.Nil {
		link.PrevChainID = prevChain.String()
	}
	if len(prevHash) != HashSize {
		prevHash = make([]byte, HashSize)
	}
	link.PrevHash = hex.EncodeToString(prevHash)
	body, err := json.Marshal(link)
	if err != nil {
		return Event{}, fmt.Errorf("encode chain link: %w", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Event{}, fmt.Errorf("new chain id: %w", err)
	}
	e := Event{
		ID:         id,
		ReceiptID:  id,
		Kind:       KindChainStart,
		Time:       NormalizeTime(w.opts.Now()),
		InstanceID: w.opts.InstanceID,
		Args:       body,
		ChainID:    id,
		ChainSeq:   1,
		PrevHash:   prevHash,
	}
	h, err := ChainHash(prevHash, e)
	if err != nil {
		return Event{}, err
	}
	e.Hash = h
	return e, nil
}

// RecoverInterrupted runs at start, before the instance serves: every allow
// decision of instanceID still without an outcome belongs to a call that was
// in flight when the previous process died, so it gets an outcome event
// with status "interrupted". It returns how many were recovered.
func RecoverInterrupted(ctx context.Context, store Store, w *Writer, instanceID string) (int, error) {
	pending, err := store.PendingDecisions(ctx, instanceID)
	if err != nil {
		return 0, fmt.Errorf("evidence: list pending decisions of %q: %w", instanceID, err)
	}
	return recoverPending(ctx, w, pending)
}

// recoverPending gives each receipt the outcome "interrupted".
func recoverPending(ctx context.Context, w *Writer, pending []uuid.UUID) (int, error) {
	done := 0
	const chunk = 500
	for len(pending) > 0 {
		k := min(chunk, len(pending))
		events := make([]Event, k)
		for i, id := range pending[:k] {
			events[i] = Event{
				Kind:      KindOutcome,
				ReceiptID: id,
				Outcome:   &wire.Outcome{Status: wire.StatusInterrupted},
			}
		}
		if err := w.Append(ctx, events...); err != nil {
			return done, fmt.Errorf("evidence: record interrupted outcomes: %w", err)
		}
		done += k
		pending = pending[k:]
	}
	return done, nil
}
