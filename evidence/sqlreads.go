package evidence

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/wire"
)

// SQLRowLoops are a store's row loops: each runs a statement of its
// dialect with its arguments, scans the rows (evidence_events rows in
// the store's column order, portcullis_approvals rows in ParkedColumns
// order, or one uuid column) and classifies its own errors.
type SQLRowLoops struct {
	Events func(ctx context.Context, q string, args ...any) ([]Event, error)
	Parked func(ctx context.Context, q string, args ...any) ([]ParkedCall, error)
	IDs    func(ctx context.Context, q string, args ...any) ([]uuid.UUID, error)
	// The ledger's: chain_id and max(chain_seq) rows; evidence_checkpoints
	// rows (tree_size, root_hash, note, created_at); evidence_tree rows
	// (leaf_index, event_id, event_ts, chain_id, chain_seq); and one
	// integer of one row.
	Chains      func(ctx context.Context, q string, args ...any) ([]ChainInfo, error)
	Checkpoints func(ctx context.Context, q string, args ...any) ([]StoredCheckpoint, error)
	Leaves      func(ctx context.Context, q string, args ...any) ([]Leaf, error)
	Int64       func(ctx context.Context, q string, args ...any) (int64, error)
}

// SQLReads are the reads both SQL stores make alike: the same statements
// in the store's dialect (rebound once, by NewSQLReads), run by the
// store's row loops. A store embeds them, so they are its Receipt,
// Receipts, ChainEvents, ChainEventsFrom, EventsOfReceipt, HoldEvents,
// PendingDecisions, ParkedCall, ParkedCallByReceipt, ParkedCalls,
// ExpiredParked, UnansweredRuns, Chains, TreeHeads, Checkpoints,
// LatestCheckpoint, LeafOf and Leaves.
type SQLReads struct {
	name string
	d    SQLDialect
	rows SQLRowLoops
	// selectFrom is "SELECT <columns> FROM evidence_events WHERE ";
	// outcome the start of the outcomes of a page of receipts; the
	// others are the dialect's statements.
	selectFrom, outcome                                              string
	byReceipt, chain, chainFrom, ofReceipt, holds, pending           string
	parkedByID, parkedByReceipt, parkedList, expiredParked, unanswer string
	leafOf, leaves                                                   string
}

// NewSQLReads are the reads of the store name ("evidence/postgres", the
// prefix of its errors) in dialect d: columns is the store's
// evidence_events column list, in the order rows.Events scans it.
func NewSQLReads(name string, d SQLDialect, columns string, rows SQLRowLoops) SQLReads {
	from := "SELECT " + columns + " FROM evidence_events WHERE "
	return SQLReads{
		name: name, d: d, rows: rows, selectFrom: from,
		outcome:         from + "kind = 'outcome' AND receipt_id ",
		byReceipt:       d.SQL(from + "receipt_id = ?1"),
		chain:           d.SQL(from + "chain_id = ?1 ORDER BY chain_seq, id"),
		chainFrom:       d.SQL(from + "chain_id = ?1 AND chain_seq >= ?2 ORDER BY chain_seq, id LIMIT ?3"),
		ofReceipt:       d.SQL(from + "receipt_id = ?1 ORDER BY ts, id"),
		holds:           d.SQL(from + "kind IN (?1, ?2) ORDER BY ts, id"),
		pending:         d.SQL(SQLPendingDecisions),
		parkedByID:      d.SQL(SQLParkedByID),
		parkedByReceipt: d.SQL(SQLParkedByReceipt),
		parkedList:      d.SQL(SQLParkedList),
		expiredParked:   d.SQL(SQLExpiredParked),
		unanswer:        d.SQL(SQLUnansweredRuns),
		leafOf:          d.SQL(sqlLeaves + "WHERE event_id = ?1"),
		leaves:          d.SQL(sqlLeaves + "WHERE leaf_index >= ?1 ORDER BY leaf_index LIMIT ?2"),
	}
}

// Receipt returns the receipt with that id, or ErrNotFound.
func (r SQLReads) Receipt(ctx context.Context, id uuid.UUID) (wire.Receipt, error) {
	evs, err := r.rows.Events(ctx, r.byReceipt, r.d.UUID(id))
	if err != nil {
		return wire.Receipt{}, fmt.Errorf("%s: receipt %s: %w", r.name, id, err)
	}
	return ReceiptFrom(id, evs)
}

// Receipts lists receipts newest first with keyset pagination over
// (ts, id): pages stay stable while new receipts arrive.
func (r SQLReads) Receipts(ctx context.Context, f Filter) (wire.ReceiptList, error) {
	p, err := f.Normalize()
	if err != nil {
		return wire.ReceiptList{}, err
	}
	where, args := r.d.receiptsWhere(p)
	q := r.selectFrom + where + " ORDER BY ts DESC, id DESC LIMIT " + r.d.Placeholder(len(args)+1)
	decisions, err := r.rows.Events(ctx, q, append(args, p.Limit+1)...)
	if err != nil {
		return wire.ReceiptList{}, fmt.Errorf("%s: list receipts: %w", r.name, err)
	}
	list, err := PageReceipts(decisions, p.Limit, func(ids []uuid.UUID) ([]Event, error) {
		in, inArgs := r.d.inUUIDs(ids)
		return r.rows.Events(ctx, r.outcome+in, inArgs...)
	})
	if err != nil {
		return wire.ReceiptList{}, fmt.Errorf("%s: %w", r.name, err)
	}
	return list, nil
}

// receiptsWhere is the WHERE condition of a page of receipts (without its
// keyset LIMIT) in the dialect, and its arguments.
func (d SQLDialect) receiptsWhere(p Page) (string, []any) {
	var (
		where = []string{"kind = 'decision'"}
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return d.Placeholder(len(args))
	}
	for _, c := range []struct{ col, v string }{
		{"principal_id", p.Principal}, {"tool", p.Tool}, {"decision", p.Decision}, {"session_id", p.SessionID},
	} {
		if c.v != "" {
			where = append(where, c.col+" = "+arg(c.v))
		}
	}
	// Outcome filters look at the latest outcome, exactly the one
	// BuildReceipt shows (LatestOutcome: newest by ts, then id), through
	// the receipt_id index.
	latest := func(key string) string {
		return "(SELECT " + d.JSONField("o.outcome", key) + " FROM evidence_events o WHERE o.receipt_id = evidence_events.id" +
			" AND o.kind = 'outcome' ORDER BY o.ts DESC, o.id DESC LIMIT 1)"
	}
	switch p.Status {
	case "":
	case wire.StatusPending:
		where = append(where, "NOT EXISTS (SELECT 1 FROM evidence_events o WHERE o.receipt_id = evidence_events.id AND o.kind = 'outcome')")
	default:
		where = append(where, latest("status")+" = "+arg(p.Status))
	}
	if p.ErrorCode != "" {
		where = append(where, latest("error_code")+" = "+arg(p.ErrorCode))
	}
	if p.Rule != "" {
		where = append(where, d.HasRule(arg(p.Rule)))
	}
	if p.Needle != "" {
		// A bound parameter, matched as a substring (no LIKE wildcards
		// to escape).
		n := arg(p.Needle)
		where = append(where, "("+d.Contains("args", n)+" OR "+d.Contains("reasons", n)+")")
	}
	if !p.Since.IsZero() {
		where = append(where, "ts >= "+arg(d.Time(NormalizeTime(p.Since))))
	}
	if !p.Until.IsZero() {
		where = append(where, "ts < "+arg(d.Time(NormalizeTime(p.Until))))
	}
	if p.After {
		where = append(where, "(ts, id) < ("+arg(d.Time(p.AfterTime))+", "+arg(d.UUID(p.AfterID))+")")
	}
	return strings.Join(where, " AND "), args
}

// ChainEvents returns one chain's events in sequence order.
func (r SQLReads) ChainEvents(ctx context.Context, chainID uuid.UUID) ([]Event, error) {
	evs, err := r.rows.Events(ctx, r.chain, r.d.UUID(chainID))
	if err != nil {
		return nil, fmt.Errorf("%s: chain %s: %w", r.name, chainID, err)
	}
	return evs, nil
}

// ChainEventsFrom returns up to limit events of a chain from sequence from.
func (r SQLReads) ChainEventsFrom(ctx context.Context, chainID uuid.UUID, from int64, limit int) ([]Event, error) {
	evs, err := r.rows.Events(ctx, r.chainFrom, r.d.UUID(chainID), from, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: chain %s from %d: %w", r.name, chainID, from, err)
	}
	return evs, nil
}

// EventsOfReceipt returns the events of one receipt.
func (r SQLReads) EventsOfReceipt(ctx context.Context, id uuid.UUID) ([]Event, error) {
	evs, err := r.rows.Events(ctx, r.ofReceipt, r.d.UUID(id))
	if err != nil {
		return nil, fmt.Errorf("%s: events of receipt %s: %w", r.name, id, err)
	}
	return evs, nil
}

// HoldEvents returns every stored legal_hold and legal_hold_release event,
// oldest first, from the (kind, ts) index of the non-receipt kinds.
func (r SQLReads) HoldEvents(ctx context.Context) ([]Event, error) {
	evs, err := r.rows.Events(ctx, r.holds, KindLegalHold, KindLegalHoldRelease)
	if err != nil {
		return nil, fmt.Errorf("%s: legal hold events: %w", r.name, err)
	}
	return evs, nil
}

// PendingDecisions lists the instance's allow decisions without outcome.
func (r SQLReads) PendingDecisions(ctx context.Context, instanceID string) ([]uuid.UUID, error) {
	ids, err := r.rows.IDs(ctx, r.pending, instanceID)
	if err != nil {
		return nil, fmt.Errorf("%s: pending decisions: %w", r.name, err)
	}
	return ids, nil
}

// ParkedCall returns one parked call.
func (r SQLReads) ParkedCall(ctx context.Context, id uuid.UUID) (ParkedCall, error) {
	return r.oneParked(ctx, r.parkedByID, r.d.UUID(id))
}

// ParkedCallByReceipt returns the parked call of a receipt.
func (r SQLReads) ParkedCallByReceipt(ctx context.Context, receiptID uuid.UUID) (ParkedCall, error) {
	return r.oneParked(ctx, r.parkedByReceipt, r.d.UUID(receiptID))
}

func (r SQLReads) oneParked(ctx context.Context, q string, arg any) (ParkedCall, error) {
	list, err := r.rows.Parked(ctx, q, arg)
	if err != nil {
		return ParkedCall{}, fmt.Errorf("%s: approval: %w", r.name, err)
	}
	if len(list) == 0 {
		return ParkedCall{}, ErrApprovalNotFound
	}
	return list[0], nil
}

// ParkedCalls lists parked calls, oldest first.
func (r SQLReads) ParkedCalls(ctx context.Context, status string, limit int) ([]ParkedCall, error) {
	list, err := r.rows.Parked(ctx, r.parkedList, status, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: approvals: %w", r.name, err)
	}
	return list, nil
}

// ExpiredParked lists pending calls whose expiry has passed.
func (r SQLReads) ExpiredParked(ctx context.Context, now time.Time, limit int) ([]uuid.UUID, error) {
	ids, err := r.rows.IDs(ctx, r.expiredParked, r.d.Time(now), limit)
	if err != nil {
		return nil, fmt.Errorf("%s: expired approvals: %w", r.name, err)
	}
	return ids, nil
}

// UnansweredRuns lists approved parked calls without an answer, oldest
// approval first.
func (r SQLReads) UnansweredRuns(ctx context.Context, limit int) ([]uuid.UUID, error) {
	ids, err := r.rows.IDs(ctx, r.unanswer, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: unanswered runs: %w", r.name, err)
	}
	return ids, nil
}

// The ledger statements without arguments, alike in both dialects.
const (
	sqlChains           = "SELECT chain_id, max(chain_seq) FROM evidence_events GROUP BY chain_id ORDER BY chain_id"
	sqlTreeSize         = "SELECT coalesce(max(leaf_index) + 1, 0) FROM evidence_tree"
	sqlTreeHeads        = "SELECT chain_id, max(chain_seq) FROM evidence_tree GROUP BY chain_id"
	sqlCheckpoints      = "SELECT tree_size, root_hash, note, created_at FROM evidence_checkpoints ORDER BY tree_size"
	sqlLatestCheckpoint = sqlCheckpoints + " DESC LIMIT 1"
	// sqlLeaves starts the selects of leaves.
	sqlLeaves = "SELECT leaf_index, event_id, event_ts, chain_id, chain_seq FROM evidence_tree "
)

// Chains lists every chain in the events (a full scan; for verify).
func (r SQLReads) Chains(ctx context.Context) ([]ChainInfo, error) {
	cs, err := r.rows.Chains(ctx, sqlChains)
	if err != nil {
		return nil, fmt.Errorf("%s: chains: %w", r.name, err)
	}
	return cs, nil
}

// TreeHeads returns the tree size and each chain's last sequence in it.
func (r SQLReads) TreeHeads(ctx context.Context) (int64, map[uuid.UUID]int64, error) {
	size, err := r.rows.Int64(ctx, sqlTreeSize)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: tree size: %w", r.name, err)
	}
	cs, err := r.rows.Chains(ctx, sqlTreeHeads)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: tree heads: %w", r.name, err)
	}
	heads := make(map[uuid.UUID]int64, len(cs))
	for _, c := range cs {
		heads[c.ChainID] = c.MaxSeq
	}
	return size, heads, nil
}

// Checkpoints lists stored checkpoints, smallest first.
func (r SQLReads) Checkpoints(ctx context.Context) ([]StoredCheckpoint, error) {
	cps, err := r.rows.Checkpoints(ctx, sqlCheckpoints)
	if err != nil {
		return nil, fmt.Errorf("%s: checkpoints: %w", r.name, err)
	}
	return cps, nil
}

// LatestCheckpoint returns the largest checkpoint or ErrNotFound.
func (r SQLReads) LatestCheckpoint(ctx context.Context) (StoredCheckpoint, error) {
	cps, err := r.rows.Checkpoints(ctx, sqlLatestCheckpoint)
	if err != nil {
		return StoredCheckpoint{}, fmt.Errorf("%s: latest checkpoint: %w", r.name, err)
	}
	if len(cps) == 0 {
		return StoredCheckpoint{}, fmt.Errorf("no checkpoint yet: %w", ErrNotFound)
	}
	return cps[0], nil
}

// LeafOf returns the leaf of an event or ErrNotFound.
func (r SQLReads) LeafOf(ctx context.Context, eventID uuid.UUID) (Leaf, error) {
	ls, err := r.rows.Leaves(ctx, r.leafOf, r.d.UUID(eventID))
	if err != nil {
		return Leaf{}, fmt.Errorf("%s: leaf of %s: %w", r.name, eventID, err)
	}
	if len(ls) == 0 {
		return Leaf{}, fmt.Errorf("event %s is not in the tree yet: %w", eventID, ErrNotFound)
	}
	return ls[0], nil
}

// Leaves returns up to limit leaves from index from.
func (r SQLReads) Leaves(ctx context.Context, from int64, limit int) ([]Leaf, error) {
	ls, err := r.rows.Leaves(ctx, r.leaves, from, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: leaves: %w", r.name, err)
	}
	return ls, nil
}
