package evidence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/wire"
)

// Auditor answers the integrity questions the API exposes (proofs and
// stats) over a Ledger. It holds the verifier key so a proof names the key
// that checks it; the gateway sees it through a small interface of its own.
type Auditor struct {
	l           Ledger
	verifierKey string
}

// NewAuditor returns an Auditor over l whose checkpoints verify with
// verifierKey (note verifier format name+hash+key).
func NewAuditor(l Ledger, verifierKey string) *Auditor {
	return &Auditor{l: l, verifierKey: verifierKey}
}

// ProveReceipt proves the receipt's decision event and, when one was
// recorded, the outcome event the receipt shows (LatestOutcome), both
// against the same latest checkpoint, so the pair is pinned by one signed
// tree head. ErrNotFound: no such receipt. ErrNotCheckpointed: the receipt
// exists but its events are not all under a checkpoint yet. A partial
// proof is never returned: an auditor could mistake it for the receipt.
func (a *Auditor) ProveReceipt(ctx context.Context, id uuid.UUID) (wire.ReceiptProof, error) {
	evs, err := a.l.EventsOfReceipt(ctx, id)
	if err != nil {
		return wire.ReceiptProof{}, err
	}
	var decision *Event
	for i := range evs {
		if evs[i].Kind == KindDecision && evs[i].ID == id {
			decision = &evs[i]
		}
	}
	if decision == nil {
		return wire.ReceiptProof{}, fmt.Errorf("receipt %s: %w", id, ErrNotFound)
	}
	cp, err := a.l.LatestCheckpoint(ctx)
	if errors.Is(err, ErrNotFound) {
		return wire.ReceiptProof{}, fmt.Errorf("receipt %s: no checkpoint has been signed yet: %w", id, ErrNotCheckpointed)
	}
	if err != nil {
		return wire.ReceiptProof{}, err
	}
	prove := func(e *Event) (InclusionProof, error) {
		leaf, err := a.l.LeafOf(ctx, e.ID)
		if errors.Is(err, ErrNotFound) || (err == nil && leaf.Index >= cp.Size) {
			return InclusionProof{}, fmt.Errorf("receipt %s: %s event %s: %w", id, e.Kind, e.ID, ErrNotCheckpointed)
		}
		if err != nil {
			return InclusionProof{}, err
		}
		return proveLeaf(ctx, a.l, e.ID, leaf, cp)
	}
	out := wire.ReceiptProof{ReceiptID: id.String(), VerifierKey: a.verifierKey, Checkpoint: cp.Note, TreeSize: cp.Size}
	if out.Decision, err = prove(decision); err != nil {
		return wire.ReceiptProof{}, err
	}
	if o := LatestOutcome(evs); o != nil {
		p, err := prove(o)
		if err != nil {
			return wire.ReceiptProof{}, err
		}
		out.Outcome = &p
	}
	return out, nil
}

// MaxStatsBuckets bounds one stats answer, so a wide range at hourly
// resolution cannot make the gateway build an unbounded response.
const MaxStatsBuckets = 24 * 366

// DefaultStatsTop and MaxStatsTop bound each stats bucket's by_rule: a
// policy with many rule ids cannot blow up the response.
const (
	DefaultStatsTop = 20
	MaxStatsTop     = 1000
)

// Stats answers GET /v1/evidence/stats from the hourly rollup only (never
// a scan of events). Since is truncated down to the hour (day), Until
// rounded up, so buckets are whole intervals. The rollup counts decisions
// once they are checkpointed, so the newest interval lags by up to one
// checkpoint interval.
func (a *Auditor) Stats(ctx context.Context, q StatsQuery) (wire.EvidenceStats, error) {
	q, err := q.Normalize()
	if err != nil {
		return wire.EvidenceStats{}, err
	}
	buckets, err := a.l.Stats(ctx, q)
	if err != nil {
		return wire.EvidenceStats{}, err
	}
	if buckets == nil {
		buckets = []wire.StatsBucket{}
	}
	return wire.EvidenceStats{Since: q.Since, Until: q.Until, Interval: q.Interval, Top: q.Top, Buckets: buckets}, nil
}

// Normalize defaults the interval to hour and top to DefaultStatsTop,
// bounds top, aligns [Since, Until) to whole intervals in UTC and bounds
// the number of buckets. Errors wrap ErrBadFilter.
func (q StatsQuery) Normalize() (StatsQuery, error) {
	if q.Interval == "" {
		q.Interval = "hour"
	}
	var step time.Duration
	switch q.Interval {
	case "hour":
		step = time.Hour
	case "day":
		step = 24 * time.Hour
	default:
		return q, fmt.Errorf("%w: interval must be hour or day, got %q", ErrBadFilter, q.Interval)
	}
	switch {
	case q.Top == 0:
		q.Top = DefaultStatsTop
	case q.Top < 0 || q.Top > MaxStatsTop:
		return q, fmt.Errorf("%w: top must be 1 to %d, got %d", ErrBadFilter, MaxStatsTop, q.Top)
	}
	if q.Since.IsZero() || q.Until.IsZero() {
		return q, fmt.Errorf("%w: since and until are required", ErrBadFilter)
	}
	q.Since, q.Until = q.Since.UTC().Truncate(step), q.Until.UTC()
	if t := q.Until.Truncate(step); !t.Equal(q.Until) {
		q.Until = t.Add(step)
	}
	if !q.Until.After(q.Since) {
		return q, fmt.Errorf("%w: until must be after since", ErrBadFilter)
	}
	if n := q.Until.Sub(q.Since) / step; n > MaxStatsBuckets {
		return q, fmt.Errorf("%w: %d %s buckets requested, at most %d", ErrBadFilter, n, q.Interval, MaxStatsBuckets)
	}
	return q, nil
}
