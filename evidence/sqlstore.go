package evidence

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/wire"
)

// What the two SQL stores (evidence/postgres, evidence/sqlite) share: the
// statements they run alike, written once with SQLite's numbered
// placeholders (?1, ?2, ...) and rebound for PostgreSQL ($1, $2, ...) by
// SQLDialect.SQL once, when a store's package starts (never per call: the
// drivers keep each statement prepared by its text); the arguments of
// those statements in the types each driver takes (SQLDialect's
// conversions); and the logic around them that does not depend on the
// database (settling a parked call, paging receipts, drawing quotas in
// an append). What stays in each store is what really differs: the
// drivers, locking, JSON and array operators, and how a row is scanned.

// SQLDialect is what differs between the stores in the statements they
// share.
type SQLDialect struct {
	// Dollar: placeholders are $N (PostgreSQL), not ?N (SQLite).
	Dollar bool
	// UUID, Time and JSON convert a value to what the driver stores in a
	// uuid, timestamp and JSON column; NullJSON maps empty JSON to NULL
	// as the store always has.
	UUID     func(uuid.UUID) any
	Time     func(time.Time) any
	JSON     func([]byte) any
	NullJSON func(json.RawMessage) any

	// What the receipt filters (SQLEventReads.Receipts) spell each
	// store's way. JSONField is the text of key in the JSON column col;
	// HasRule the condition that an event's rule_ids name the rule bound
	// at placeholder ph; Contains that the text of column col holds the
	// one bound at ph (lower-cased both). UUIDArray, when set, is ids
	// as one array argument (matched with = ANY); without it a list of
	// ids is matched with IN and one argument each (inUUIDs).
	JSONField func(col, key string) string
	HasRule   func(ph string) string
	Contains  func(col, ph string) string
	UUIDArray func(ids []uuid.UUID) any
}

// inUUIDs is the condition, from the first placeholder, that a column is
// one of ids ("= ANY($1)" or "IN (?1, ?2, ...)"), and its arguments.
func (d SQLDialect) inUUIDs(ids []uuid.UUID) (string, []any) {
	if d.UUIDArray != nil {
		return "= ANY(" + d.Placeholder(1) + ")", []any{d.UUIDArray(ids)}
	}
	ph := make([]string, len(ids))
	args := make([]any, len(ids))
	for i, id := range ids {
		ph[i], args[i] = d.Placeholder(i+1), d.UUID(id)
	}
	return "IN (" + strings.Join(ph, ", ") + ")", args
}

// SQL is q, written with ?N placeholders, in the dialect's placeholders.
// q is always one of this package's constant statements, never built from
// request data (every value is a bound argument). Only a ? followed by a
// digit outside string literals ('...', a doubled quote inside), quoted
// identifiers ("...") and comments (-- to the line's end, /* ... */) is a
// placeholder: a ? elsewhere is text, or an operator (jsonb's ?|).
func (d SQLDialect) SQL(q string) string {
	if !d.Dollar {
		return q
	}
	var b strings.Builder
	b.Grow(len(q))
	for i := 0; i < len(q); i++ {
		c := q[i]
		// What opens and what closes the literal, identifier or comment
		// starting at i.
		var open, end string
		switch {
		case c == '\'':
			open, end = "'", "'"
		case c == '"':
			open, end = `"`, `"`
		case strings.HasPrefix(q[i:], "--"):
			open, end = "--", "\n"
		case strings.HasPrefix(q[i:], "/*"):
			open, end = "/*", "*/"
		case c == '?' && i+1 < len(q) && q[i+1] >= '0' && q[i+1] <= '9':
			b.WriteByte('$')
			continue
		default:
			b.WriteByte(c)
			continue
		}
		// Copy through the closing text ('' inside a literal closes and
		// reopens it, which copying twice does too); unclosed runs to the
		// end.
		j := strings.Index(q[i+len(open):], end)
		if j < 0 {
			b.WriteString(q[i:])
			break
		}
		stop := i + len(open) + j + len(end)
		b.WriteString(q[i:stop])
		i = stop - 1
	}
	return b.String()
}

// Placeholder is the dialect's n-th placeholder.
func (d SQLDialect) Placeholder(n int) string {
	if d.Dollar {
		return "$" + strconv.Itoa(n)
	}
	return "?" + strconv.Itoa(n)
}

// The statements both stores run alike, in ?N form (SQLDialect.SQL).
const (
	// SQLPendingDecisions lists an instance's allow decisions without
	// an outcome: ?1 the instance.
	SQLPendingDecisions = `SELECT d.id FROM evidence_events d
		WHERE d.kind = 'decision' AND d.decision = 'allow' AND d.instance_id = ?1
		AND NOT EXISTS (SELECT 1 FROM evidence_events o WHERE o.receipt_id = d.id AND o.kind = 'outcome')
		ORDER BY d.ts, d.id`
	// SQLChainHead is the newest chain's last event of an instance (?1):
	// chain_id, chain_seq, hash.
	SQLChainHead = `SELECT chain_id, chain_seq, hash FROM evidence_events
		WHERE instance_id = ?1 ORDER BY chain_id DESC, chain_seq DESC LIMIT 1`

	// SQLQuotaUsage lists the windows of key ?1, newest first, at most ?2.
	SQLQuotaUsage = `SELECT key, window_s, window_start, used, quota_limit FROM portcullis_quota_counters
		WHERE key = ?1 ORDER BY window_start DESC, window_s LIMIT ?2`

	// ParkedColumns are the columns of a parked call, in the order the
	// stores scan them.
	ParkedColumns = `id, receipt_id, status, principal, tool, call_id, session_id, input, args_sha256, args,
	policy_revision, reason, approvers, created_at, expires_at, decided_by, decided_at, decision_reason, response`
	// SQLParkCall inserts a pending parked call (ParkCallArgs).
	SQLParkCall = `INSERT INTO portcullis_approvals (id, receipt_id, status, principal, principal_id, tool, call_id,
		session_id, input, args_sha256, args, policy_revision, reason, approvers, created_at, expires_at)
		VALUES (?1, ?2, 'pending', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)`
	// SQLParkedByID, SQLParkedByReceipt and SQLParkedList select parked
	// calls: by id ?1, by receipt ?1, and with status ?1 (all when
	// empty), oldest first, at most ?2.
	SQLParkedByID      = "SELECT " + ParkedColumns + " FROM portcullis_approvals WHERE id = ?1"
	SQLParkedByReceipt = "SELECT " + ParkedColumns + " FROM portcullis_approvals WHERE receipt_id = ?1"
	SQLParkedList      = "SELECT " + ParkedColumns + " FROM portcullis_approvals WHERE (?1 = '' OR status = ?1) ORDER BY created_at, id LIMIT ?2"
	// SQLSettleParked writes a settled parked call (SettleArgs).
	SQLSettleParked = `UPDATE portcullis_approvals SET status = ?2, decided_by = ?3, decided_at = ?4, decision_reason = ?5,
		input = CASE WHEN ?7 THEN input END, response = coalesce(?6, response) WHERE id = ?1`
	// SQLUnansweredRuns lists approved parked calls without an answer,
	// oldest approval first, at most ?1.
	SQLUnansweredRuns = "SELECT id FROM portcullis_approvals WHERE status = 'approved' AND response IS NULL ORDER BY decided_at, id LIMIT ?1"
	// SQLPruneQuotas deletes the counters of windows that ended at or
	// before ?1 (unix seconds).
	SQLPruneQuotas = "DELETE FROM portcullis_quota_counters WHERE window_start + window_s <= ?1"
	// SQLPendingParked counts principal ?1's pending calls, up to ?2.
	SQLPendingParked = "SELECT count(*) FROM (SELECT 1 FROM portcullis_approvals WHERE status = 'pending' AND principal_id = ?1 LIMIT ?2) AS p"
	// SQLExpiredParked lists pending calls expired at ?1, at most ?2.
	SQLExpiredParked = "SELECT id FROM portcullis_approvals WHERE status = 'pending' AND expires_at <= ?1 ORDER BY expires_at LIMIT ?2"
)

// ParkCallArgs are SQLParkCall's arguments for p.
func (d SQLDialect) ParkCallArgs(p ParkedCall) ([]any, error) {
	principal, err := json.Marshal(p.Principal)
	if err != nil {
		return nil, fmt.Errorf("encode principal: %w", err)
	}
	approvers := p.Approvers
	if approvers == nil {
		approvers = []string{}
	}
	ab, err := json.Marshal(approvers)
	if err != nil {
		return nil, fmt.Errorf("encode approvers: %w", err)
	}
	return []any{d.UUID(p.ID), d.UUID(p.ReceiptID), d.JSON(principal), p.Principal.ID, p.Tool, p.CallID, p.SessionID,
		[]byte(p.Input), p.ArgsSHA256, d.NullJSON(p.Args), p.PolicyRevision, p.Reason, d.JSON(ab),
		d.Time(p.CreatedAt), d.Time(p.ExpiresAt)}, nil
}

// Apply settles p, the parked call as read under the store's lock, with
// st: ErrApprovalSettled (and p unchanged) when p is not in st.From or an
// approval comes at or after its expiry; else p as settled, which the
// store writes (SettleArgs). The stored input is returned as it was.
func (st Settle) Apply(p ParkedCall) (ParkedCall, error) {
	if p.Status != st.From || (st.To == wire.ApprovalApproved && !st.At.Before(p.ExpiresAt)) {
		return p, ErrApprovalSettled
	}
	if st.From == wire.ApprovalPending {
		p.DecidedBy, p.DecidedAt, p.DecisionReason = st.By, st.At, st.Reason
	}
	p.Status = st.To
	if st.Response != nil {
		p.Response = st.Response
	}
	return p, nil
}

// SettleArgs are SQLSettleParked's arguments: settled is what st.Apply
// returned.
func (d SQLDialect) SettleArgs(st Settle, settled ParkedCall) []any {
	var decidedAt any
	if !settled.DecidedAt.IsZero() {
		decidedAt = d.Time(settled.DecidedAt)
	}
	return []any{d.UUID(st.ID), st.To, settled.DecidedBy, decidedAt, settled.DecisionReason, d.NullJSON(st.Response), st.KeepInput()}
}

// PageReceipts completes a page of receipts: decisions is the query's
// answer, newest first, with one row more than limit when there is a next
// page; outcomes returns every outcome event of the given receipts.
func PageReceipts(decisions []Event, limit int, outcomes func([]uuid.UUID) ([]Event, error)) (wire.ReceiptList, error) {
	list := wire.ReceiptList{Receipts: []wire.Receipt{}}
	if len(decisions) > limit {
		decisions = decisions[:limit]
		last := decisions[len(decisions)-1]
		list.NextCursor = EncodeCursor(last.Time, last.ID)
	}
	if len(decisions) == 0 {
		return list, nil
	}
	ids := make([]uuid.UUID, len(decisions))
	for i, d := range decisions {
		ids[i] = d.ID
	}
	outs, err := outcomes(ids)
	if err != nil {
		return wire.ReceiptList{}, fmt.Errorf("list outcomes: %w", err)
	}
	byReceipt := make(map[uuid.UUID][]Event, len(outs))
	for _, o := range outs {
		byReceipt[o.ReceiptID] = append(byReceipt[o.ReceiptID], o)
	}
	for _, d := range decisions {
		list.Receipts = append(list.Receipts, BuildReceipt(d, LatestOutcome(byReceipt[d.ID])))
	}
	return list, nil
}

// DrawTx is one store transaction that draws quotas and appends events
// (DrawAndAppend).
type DrawTx interface {
	// LockCounters creates each counter of keys if missing, locks it
	// for the rest of the transaction and returns its used value.
	LockCounters(ctx context.Context, keys []CounterKey) (map[CounterKey]int64, error)
	// AddCounters adds add[k] to each counter with a draw, recording
	// limit[k] as its limit.
	AddCounters(ctx context.Context, keys []CounterKey, add, limit map[CounterKey]int64) error
	// Append inserts events.
	Append(ctx context.Context, events []Event) error
}

// DrawAndAppend is the body of QuotaAppender.AppendDrawing in tx: it
// locks the batch's counters (Counters order), settles the requests in
// order (Decide), appends the events that events builds and adds the
// draws. The store begins tx before and commits it after.
func DrawAndAppend(ctx context.Context, tx DrawTx, batch []*QuotaRequest, events func() ([]Event, error)) error {
	keys, add, limit, err := LockAndDecide(ctx, tx, batch)
	if err != nil {
		return err
	}
	if events != nil {
		evs, err := events()
		if err != nil {
			return err
		}
		if err := tx.Append(ctx, evs); err != nil {
			return err
		}
	}
	return tx.AddCounters(ctx, keys, add, limit)
}

// LockAndDecide locks the batch's counters and settles its requests.
func LockAndDecide(ctx context.Context, tx DrawTx, batch []*QuotaRequest) (keys []CounterKey, add, limit map[CounterKey]int64, err error) {
	keys = Counters(batch)
	used, err := tx.LockCounters(ctx, keys)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("lock quota counters: %w", err)
	}
	add, limit = Decide(batch, used)
	return keys, add, limit, nil
}

// ScannedRow completes an event scanned from an evidence_events row: its
// body kept, and empty hashes as nil, as the Writer wrote them.
func ScannedRow(e *Event, body []byte) {
	if len(body) > 0 {
		e.Body = json.RawMessage(body)
	}
	if len(e.PrevHash) == 0 {
		e.PrevHash = nil
	}
	if len(e.Hash) == 0 {
		e.Hash = nil
	}
}

// ReceiptFrom is receipt id built from the events stored under it, or
// ErrNotFound when its decision is not among them.
func ReceiptFrom(id uuid.UUID, evs []Event) (wire.Receipt, error) {
	for _, e := range evs {
		if e.Kind == KindDecision && e.ID == id {
			return BuildReceipt(e, LatestOutcome(evs)), nil
		}
	}
	return wire.Receipt{}, fmt.Errorf("receipt %s: %w", id, ErrNotFound)
}

// CheckSchema compares the migrations a store records (applied: version
// to whether it is applied) with the versions this binary has: a newer
// schema, or one that lacks a migration, is ErrSchemaMismatch naming what
// (the database, or its file) and what to do. A read-only store never
// migrates, so it checks this before reading.
func CheckSchema(what string, applied map[int64]bool, versions []int64) error {
	var missing []string
	latest, current := int64(0), int64(0)
	for _, v := range versions {
		latest = max(latest, v)
		if !applied[v] {
			missing = append(missing, fmt.Sprint(v))
		}
	}
	for v, ok := range applied {
		if ok {
			current = max(current, v)
		}
	}
	switch {
	case current > latest:
		return fmt.Errorf("%w: %s has schema version %d, newer than this binary's %d: verify with the gateway that wrote it",
			ErrSchemaMismatch, what, current, latest)
	case len(missing) > 0:
		return fmt.Errorf("%w: %s lacks migration(s) %s of this binary (schema %d, want %d): run `gateway migrate` first; verify never migrates",
			ErrSchemaMismatch, what, strings.Join(missing, ", "), current, latest)
	}
	return nil
}

// SQLRows is what both drivers' result rows (pgx.Rows, *sql.Rows) offer
// a row loop; the caller closes them.
type SQLRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// SQLVersions selects goose's bookkeeping rows from its version table
// (always the store's constant name) for AppliedVersions.
func SQLVersions(table string) string {
	return "SELECT version_id, is_applied FROM " + table + " ORDER BY id"
}

// AppliedVersions reads the rows of SQLVersions: version to whether it is
// applied, the last row of a version winning, as goose records them.
// CheckSchema takes the map.
func AppliedVersions(rows SQLRows) (map[int64]bool, error) {
	applied := map[int64]bool{}
	for rows.Next() {
		var (
			v  int64
			ok bool
		)
		if err := rows.Scan(&v, &ok); err != nil {
			return nil, err
		}
		applied[v] = ok
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return applied, nil
}
