package evidence

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/portcullis/portcullis/wire"
	"golang.org/x/mod/sumdb/tlog"
)

// Leaf is one event's place in the Merkle tree.
type Leaf struct {
	Index     int64
	EventID   uuid.UUID
	EventTime time.Time
	ChainID   uuid.UUID
	ChainSeq  int64
}

// ChainInfo is one hash chain as the store holds it.
type ChainInfo struct {
	ChainID uuid.UUID
	// MaxSeq is the highest sequence number stored.
	MaxSeq int64
}

// StoredCheckpoint is a checkpoint row: the signed note and its tree head.
type StoredCheckpoint struct {
	Size      int64
	Root      tlog.Hash
	Note      string
	CreatedAt time.Time
}

// RollupKey is one cell of the hourly decision counts.
type RollupKey struct {
	Hour        time.Time
	PrincipalID string
	Tool        string
	Decision    string
}

// RuleRollupKey is one cell of the hourly rule id counts.
type RuleRollupKey struct {
	Hour   time.Time
	RuleID string
}

// TreeAppend is what one checkpointer pass adds, in one transaction: the
// new leaves, the tlog stored hashes they create, the signed checkpoint of
// the new size, and the decision and rule id counts of the new leaves.
type TreeAppend struct {
	Leaves     []Leaf
	Hashes     map[int64]tlog.Hash
	Checkpoint StoredCheckpoint
	Rollup     map[RollupKey]int64
	RuleRollup map[RuleRollupKey]int64
}

// StatsQuery selects GET /v1/evidence/stats: [Since, Until), bucketed by
// Interval ("hour" or "day", UTC), each bucket's by_rule cut to the Top
// most frequent rule ids.
type StatsQuery struct {
	Since, Until time.Time
	Interval     string
	// Top bounds each bucket's by_rule (the rest is summed under
	// wire.StatsOtherRules); 0 means DefaultStatsTop.
	Top int
}

// StatsBucket is one interval's decision counts (the wire type).
type StatsBucket = wire.StatsBucket

// Ledger is the integrity side of a store: the Merkle tree over its events,
// the signed checkpoints and the rollups the checkpointer maintains. Both
// stores implement it; gateway and CLI find it by type assertion on the
// Store.
type Ledger interface {
	Store
	// Chains lists every chain with events (a full scan: for verify).
	Chains(ctx context.Context) ([]ChainInfo, error)
	// ActiveChains lists the chains opened by a chain_start event with
	// their highest sequence, from indexes only (for the checkpointer).
	ActiveChains(ctx context.Context) ([]ChainInfo, error)
	// ChainEventsFrom returns up to limit events of a chain with
	// chain_seq >= from, in sequence order.
	ChainEventsFrom(ctx context.Context, chainID uuid.UUID, from int64, limit int) ([]Event, error)
	// TreeHeads returns the tree size and each chain's highest sequence in
	// the tree.
	TreeHeads(ctx context.Context) (size int64, heads map[uuid.UUID]int64, err error)
	// ReadHashes returns tlog stored hashes by index (tlog.HashReader).
	ReadHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error)
	// AppendTree commits one pass's additions, all or nothing. It fails
	// when another checkpointer appended the same indexes first.
	AppendTree(ctx context.Context, a TreeAppend) error
	// Checkpoints lists stored checkpoints by size, ascending.
	Checkpoints(ctx context.Context) ([]StoredCheckpoint, error)
	// LatestCheckpoint returns the largest checkpoint, or ErrNotFound.
	LatestCheckpoint(ctx context.Context) (StoredCheckpoint, error)
	// LeafOf returns the leaf of an event, or ErrNotFound.
	LeafOf(ctx context.Context, eventID uuid.UUID) (Leaf, error)
	// Leaves returns up to limit leaves from index from, ascending.
	Leaves(ctx context.Context, from int64, limit int) ([]Leaf, error)
	// EventsOfReceipt returns every event whose receipt_id is id.
	EventsOfReceipt(ctx context.Context, id uuid.UUID) ([]Event, error)
	// Stats answers GET /v1/evidence/stats from the hourly rollups
	// (decisions and rule ids), through Bucket.
	Stats(ctx context.Context, q StatsQuery) ([]StatsBucket, error)
	// TryLead tries to become the single checkpointer. ok false means
	// another process leads; release gives leadership up.
	TryLead(ctx context.Context) (release func(), ok bool, err error)
}

// hashReader adapts a Ledger to tlog.HashReader, with an overlay of hashes
// computed in this pass and not yet stored.
type hashReader struct {
	ctx     context.Context
	l       Ledger
	overlay map[int64]tlog.Hash
}

func (r hashReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	var missing []int64
	var at []int
	for i, x := range indexes {
		if h, ok := r.overlay[x]; ok {
			out[i] = h
			continue
		}
		missing = append(missing, x)
		at = append(at, i)
	}
	if len(missing) > 0 {
		hs, err := r.l.ReadHashes(r.ctx, missing)
		if err != nil {
			return nil, err
		}
		for j, h := range hs {
			out[at[j]] = h
		}
	}
	return out, nil
}

// HashReader returns a tlog.HashReader over the ledger's stored hashes.
func HashReader(ctx context.Context, l Ledger) tlog.HashReader {
	return hashReader{ctx: ctx, l: l}
}

// RollupCell is one stored hourly count.
type RollupCell struct {
	RollupKey
	N int64
}

// RuleRollupCell is one stored hourly rule id count.
type RuleRollupCell struct {
	RuleRollupKey
	N int64
}

// Bucket sums hourly cells into the query's intervals (hour or day, UTC)
// and cuts each bucket's by_rule to the q.Top most frequent ids (ties by
// id), summing the rest under wire.StatsOtherRules. Buckets come out in
// time order; a bucket exists when it has decisions or rule counts.
func Bucket(cells []RollupCell, rules []RuleRollupCell, q StatsQuery) []StatsBucket {
	var out []StatsBucket
	idx := map[time.Time]int{}
	bucket := func(hour time.Time) *StatsBucket {
		start := hour.UTC()
		if q.Interval == "day" {
			start = time.Date(start.Year(), start.Month(), start.Day(), 0, 0, 0, 0, time.UTC)
		}
		i, ok := idx[start]
		if !ok {
			i = len(out)
			idx[start] = i
			out = append(out, StatsBucket{Start: start, ByDecision: map[string]int64{}, ByTool: map[string]int64{},
				ByPrincipal: map[string]int64{}, ByToolDecision: map[string]map[string]int64{}, ByRule: map[string]int64{}})
		}
		return &out[i]
	}
	for _, c := range cells {
		b := bucket(c.Hour)
		b.Total += c.N
		b.ByDecision[c.Decision] += c.N
		b.ByTool[c.Tool] += c.N
		b.ByPrincipal[c.PrincipalID] += c.N
		td := b.ByToolDecision[c.Tool]
		if td == nil {
			td = map[string]int64{}
			b.ByToolDecision[c.Tool] = td
		}
		td[c.Decision] += c.N
	}
	for _, c := range rules {
		b := bucket(c.Hour)
		b.ByRule[c.RuleID] += c.N
	}
	top := q.Top
	if top <= 0 {
		top = DefaultStatsTop
	}
	for i := range out {
		out[i].ByRule = topRules(out[i].ByRule, top)
	}
	slices.SortFunc(out, func(a, b StatsBucket) int { return a.Start.Compare(b.Start) })
	return out
}

// topRules keeps the top most frequent rule ids of m (ties by id) and sums
// the others under wire.StatsOtherRules.
func topRules(m map[string]int64, top int) map[string]int64 {
	if len(m) <= top {
		return m
	}
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	out := make(map[string]int64, top+1)
	for k, id := range ids {
		if k < top {
			out[id] = m[id]
		} else {
			out[wire.StatsOtherRules] += m[id]
		}
	}
	return out
}
