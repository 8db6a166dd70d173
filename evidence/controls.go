package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/wire"
)

// The human-oversight controls (contract sections 9 and 10) keep their
// state in the evidence store so that every replica sees the same: quota
// counters, and the calls parked for a person's approval. Both are
// mutable state beside the evidence, not evidence: what a person decided
// and what then ran are chained events (KindApproval, decision and
// outcome events) on the call's receipt.

// KindApproval records a step of a parked call's approval (ApprovalBody):
// its ReceiptID is the parked call's receipt, so the approver, time and
// reason are bound to the receipt and covered by the hash chain.
const KindApproval = "approval"

// Approval actions (ApprovalBody.Action).
const (
	ApprovalActionRequested = "requested"
	ApprovalActionApproved  = "approved"
	ApprovalActionRejected  = "rejected"
	ApprovalActionExpired   = "expired"
)

// ApprovalBody is the body of an approval event.
type ApprovalBody struct {
	ApprovalID string `json:"approval_id"`
	Action     string `json:"action"`
	// By is the approver's principal id (empty for requested and expired).
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// ExpiresAt is set on requested.
	ExpiresAt string `json:"expires_at,omitempty"`
	// Approvers is who the policy named (requested).
	Approvers []string `json:"approvers,omitempty"`
	// PolicyRevision is the revision that decided this step.
	PolicyRevision string `json:"policy_revision,omitempty"`
}

// Errors of the controls, mapped once at the edge.
var (
	// ErrApprovalNotFound: no parked call has that id (404 not_found).
	ErrApprovalNotFound = errors.New("evidence: no such approval")
	// ErrApprovalSettled: the parked call was already approved, rejected
	// or expired (409/412 at the edge): it is never run twice.
	ErrApprovalSettled = errors.New("evidence: approval already settled")
)

// QuotaDraw is what ConsumeQuotas took from one counter, so it can be
// given back (RefundQuotas) when the call does not run after all.
type QuotaDraw struct {
	Key         string
	WindowS     int64
	WindowStart int64 // unix seconds
	Cost        int64
}

// QuotaExceeded says which quota refused a call and when its window ends.
type QuotaExceeded struct {
	Quota      wire.Quota
	RetryAfter time.Duration
}

// WindowStart is the start (unix seconds) of the fixed window of
// windowS seconds that holds now.
func WindowStart(now time.Time, windowS int64) int64 {
	s := now.Unix()
	return s - s%windowS
}

// RetryAfter is how long until the window that holds now ends, at least
// one second.
func RetryAfter(now time.Time, windowS int64) time.Duration {
	end := time.Unix(WindowStart(now, windowS)+windowS, 0)
	return max(end.Sub(now).Round(time.Second), time.Second)
}

// SortQuotas orders quotas by key and window so that every replica takes
// counter rows in the same order (no deadlock between two calls drawing
// on the same two quotas).
func SortQuotas(qs []wire.Quota) []wire.Quota {
	out := slices.Clone(qs)
	slices.SortFunc(out, func(a, b wire.Quota) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return int(a.WindowS - b.WindowS)
	})
	return out
}

// QuotaRequest is one call's draw in a QuotaBatch.
type QuotaRequest struct {
	Quotas   []wire.Quota // sorted (SortQuotas), each cost within its limit
	Now      time.Time
	draws    []QuotaDraw
	exceeded *QuotaExceeded
	done     chan struct{}
}

// Settle records the request's result: ok means every quota was drawn.
func (r *QuotaRequest) Settle(ok bool) {
	if !ok {
		r.Refuse(0)
		return
	}
	r.exceeded = nil
	r.draws = make([]QuotaDraw, 0, len(r.Quotas))
	for _, q := range r.Quotas {
		r.draws = append(r.draws, QuotaDraw{Key: q.Key, WindowS: q.WindowS, WindowStart: WindowStart(r.Now, q.WindowS), Cost: q.Cost})
	}
}

// Refuse records that quota i refused the request (nothing drawn).
func (r *QuotaRequest) Refuse(i int) {
	q := r.Quotas[i]
	r.draws, r.exceeded = nil, &QuotaExceeded{Quota: q, RetryAfter: RetryAfter(r.Now, q.WindowS)}
}

// CounterKey names one counter row: a quota key's fixed window.
type CounterKey struct {
	Key         string
	WindowS     int64
	WindowStart int64 // unix seconds
}

// Counters are the counter rows a batch touches, in the order every
// store locks them (by key, then window), so no two batches deadlock.
func Counters(batch []*QuotaRequest) []CounterKey {
	seen := map[CounterKey]bool{}
	var out []CounterKey
	for _, r := range batch {
		for _, q := range r.Quotas {
			k := CounterKey{q.Key, q.WindowS, WindowStart(r.Now, q.WindowS)}
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	slices.SortFunc(out, func(a, b CounterKey) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		if a.WindowS != b.WindowS {
			return int(a.WindowS - b.WindowS)
		}
		return int(a.WindowStart - b.WindowStart)
	})
	return out
}

// Decide settles every request of a batch in order against the counters'
// used values (read under lock): a request is admitted when each of its
// quotas fits its own limit (all or none), and what it draws counts for
// the requests after it. It returns what to add to each counter and the
// last limit seen for it.
func Decide(batch []*QuotaRequest, used map[CounterKey]int64) (add map[CounterKey]int64, limit map[CounterKey]int64) {
	add, limit = map[CounterKey]int64{}, map[CounterKey]int64{}
	for _, r := range batch {
		refused := -1
		// own is what this request draws on each counter so far: a
		// decision that names one key twice draws on it twice.
		own := map[CounterKey]int64{}
		for i, q := range r.Quotas {
			k := CounterKey{q.Key, q.WindowS, WindowStart(r.Now, q.WindowS)}
			taken := satAdd(satAdd(used[k], add[k]), own[k])
			// taken > Limit-Cost, not taken+Cost > Limit: the sum may pass
			// the largest int64 and wrap round to a count that fits.
			if q.Cost < 0 || q.Limit < 0 || taken < 0 || q.Cost > q.Limit || taken > q.Limit-q.Cost {
				refused = i
				break
			}
			own[k] += q.Cost
		}
		if refused >= 0 {
			r.Refuse(refused)
			continue
		}
		for _, q := range r.Quotas {
			k := CounterKey{q.Key, q.WindowS, WindowStart(r.Now, q.WindowS)}
			add[k] += q.Cost
			limit[k] = q.Limit
		}
		r.Settle(true)
	}
	return add, limit
}

// satAdd is a+b for counts (never negative), the largest int64 when the
// sum would pass it.
func satAdd(a, b int64) int64 {
	if a > 0 && b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

// QuotaAppender is a store that draws quotas in the transaction that
// appends events, so that a call's draw and its decision receipt are one
// commit (Writer.AppendDrawing).
type QuotaAppender interface {
	// AppendDrawing runs one transaction: it locks the counters of batch
	// (Counters order), settles the requests in order against them
	// (Decide), then appends the events that events builds (which may
	// depend on which requests were refused), adds the draws to the
	// counters and commits. On any error nothing is drawn nor appended.
	AppendDrawing(ctx context.Context, batch []*QuotaRequest, events func() ([]Event, error)) error
}

// QuotaBatch group-commits quota draws for a store: the requests that
// queue while one batch commits go in the next, so a busy gateway pays
// one commit per batch, not per call, and a hot counter row is taken once
// per batch. Every draw is durable before Consume returns.
type QuotaBatch struct {
	mu      sync.Mutex
	queue   []*QuotaRequest
	running bool
}

// Consume queues a request for qs and waits for the batch holding it:
// commit applies a batch in one transaction, calling Settle or Refuse on
// each request; an error fails the whole batch (nothing drawn).
func (b *QuotaBatch) Consume(ctx context.Context, qs []wire.Quota, now time.Time, commit func(context.Context, []*QuotaRequest) error) ([]QuotaDraw, *QuotaExceeded, error) {
	qs = SortQuotas(qs)
	for _, q := range qs {
		if q.Cost > q.Limit {
			return nil, &QuotaExceeded{Quota: q, RetryAfter: RetryAfter(now, q.WindowS)}, nil
		}
	}
	r := &QuotaRequest{Quotas: qs, Now: now, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, r)
	lead := !b.running
	b.running = true
	b.mu.Unlock()
	var err error
	if lead {
		err = b.drain(context.WithoutCancel(ctx), r, commit)
	}
	<-r.done
	if err != nil || (r.draws == nil && r.exceeded == nil) {
		if err == nil {
			err = errBatchFailed
		}
		return nil, nil, err
	}
	return r.draws, r.exceeded, nil
}

var errBatchFailed = errors.New("evidence: quota batch failed")

// drain commits batches until the queue is empty; it returns the error
// of the batch that held own.
func (b *QuotaBatch) drain(ctx context.Context, own *QuotaRequest, commit func(context.Context, []*QuotaRequest) error) error {
	var ownErr error
	for {
		b.mu.Lock()
		batch := b.queue
		b.queue = nil
		if len(batch) == 0 {
			b.running = false
			b.mu.Unlock()
			return ownErr
		}
		b.mu.Unlock()
		err := commit(ctx, batch)
		for _, r := range batch {
			if err != nil {
				r.draws, r.exceeded = nil, nil
				if r == own {
					ownErr = err
				}
			}
			close(r.done)
		}
	}
}

// ParkedCall is a call waiting for a person (contract section 9): the
// exact call as it was parked, so that approval runs that call and no
// other. Input is the call's exact input (it may hold values the
// receipt's args redact); stores clear it once the call is settled.
type ParkedCall struct {
	ID             uuid.UUID
	ReceiptID      uuid.UUID
	Status         string // wire.Approval*
	Principal      wire.Principal
	Tool           string
	CallID         string
	SessionID      string
	Input          json.RawMessage
	ArgsSHA256     string
	Args           json.RawMessage // the receipt's redacted copy
	PolicyRevision string
	Reason         string
	Approvers      []string
	CreatedAt      time.Time
	ExpiresAt      time.Time
	DecidedBy      string
	DecidedAt      time.Time
	DecisionReason string
	// Response is the call's final answer (wire.ToolCallResponse JSON)
	// once it is settled, for GET /v1/tool-calls/{receipt_id}.
	Response json.RawMessage
}

// Settle is a change of a parked call's status: From is the status it
// must have (pending, or approved when a run's end is recorded), To the
// new one. Approve also requires ExpiresAt to lie after At.
type Settle struct {
	ID     uuid.UUID
	From   string
	To     string
	By     string
	Reason string
	At     time.Time
	// Response, when set, is stored as the final answer.
	Response json.RawMessage
}

// KeepInput reports whether the parked input survives this change: only
// while an approved call is about to run.
func (s Settle) KeepInput() bool {
	return s.From == wire.ApprovalPending && s.To == wire.ApprovalApproved
}

// ControlStore is what quotas and approvals need of a store. Both stores
// implement it.
type ControlStore interface {
	// ConsumeQuotas draws each quota's cost from its counter for the
	// window holding now, all or none, atomically across every process
	// sharing the store: a quota whose used+cost would pass its limit
	// refuses the call (exceeded set, nothing drawn).
	ConsumeQuotas(ctx context.Context, qs []wire.Quota, now time.Time) ([]QuotaDraw, *QuotaExceeded, error)
	// RefundQuotas gives draws back (a call that was drawn for but not
	// run).
	RefundQuotas(ctx context.Context, draws []QuotaDraw) error
	// QuotaUsage lists the windows counted under key, newest first.
	QuotaUsage(ctx context.Context, key string, limit int) ([]wire.QuotaUsage, error)

	// ParkCall stores a parked call (status pending).
	ParkCall(ctx context.Context, p ParkedCall) error
	// ParkedCall returns one parked call; ErrApprovalNotFound if none.
	ParkedCall(ctx context.Context, id uuid.UUID) (ParkedCall, error)
	// ParkedCallByReceipt returns the parked call of a receipt.
	ParkedCallByReceipt(ctx context.Context, receiptID uuid.UUID) (ParkedCall, error)
	// ParkedCalls lists parked calls with status (all when empty),
	// oldest first.
	ParkedCalls(ctx context.Context, status string, limit int) ([]ParkedCall, error)
	// SettleParked moves a parked call from s.From to s.To exactly once
	// across every process sharing the store: the one caller that wins
	// gets the call as it was (with its Input); every other gets
	// ErrApprovalSettled. Leaving pending clears the stored input unless
	// To is approved (the winner runs it; the run's end clears it).
	SettleParked(ctx context.Context, s Settle) (ParkedCall, error)
	// ExpiredParked lists pending calls whose expiry is before now.
	ExpiredParked(ctx context.Context, now time.Time, limit int) ([]uuid.UUID, error)
	// PendingParked counts the principal's pending calls, up to limit.
	PendingParked(ctx context.Context, principalID string, limit int) (int, error)
	// PruneQuotas deletes the counters of windows that ended at or
	// before endedBy and says how many.
	PruneQuotas(ctx context.Context, endedBy time.Time) (int64, error)
}
