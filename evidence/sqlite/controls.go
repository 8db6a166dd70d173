package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/pressly/goose/v3"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

var (
	_ evidence.ControlStore  = (*Store)(nil)
	_ evidence.QuotaAppender = (*Store)(nil)
)

// Migration 8 adds the event kind 'approval' (issue 15): SQLite rebuilds
// evidence_events to change its CHECK constraint (rebuildEvents, as
// migration 5 does). Migration 7 (SQL) creates the control tables.
const approvalKindVersion = 8

const approvalKinds = `'checkpoint', 'retention', 'legal_hold', 'legal_hold_release', 'approval')`

func approvalKindMigration() *goose.Migration {
	return kindsMigration(approvalKindVersion, newKinds, approvalKinds, deleteTrigger, deleteTrigger)
}

// ConsumeQuotas draws on every quota, all or none, group-committed on
// the single writer connection (evidence.QuotaBatch): one synchronous
// commit per batch.
func (s *Store) ConsumeQuotas(ctx context.Context, qs []wire.Quota, now time.Time) ([]evidence.QuotaDraw, *evidence.QuotaExceeded, error) {
	if s.ro != nil {
		return nil, nil, errReadOnly
	}
	return s.quotas.Consume(ctx, qs, now, s.commitQuotas)
}

// commitQuotas settles a batch in one IMMEDIATE transaction of its own
// (the approval path; an admitted call's draw rides in its decision's
// commit, AppendDrawing).
func (s *Store) commitQuotas(ctx context.Context, batch []*evidence.QuotaRequest) error {
	if err := s.drawing(ctx, batch, nil); err != nil {
		return fmt.Errorf("evidence/sqlite: consume quotas: %w", err)
	}
	return nil
}

// AppendDrawing draws an admitted batch's quotas and appends its events in
// one IMMEDIATE transaction on the writer connection
// (evidence.QuotaAppender, evidence.DrawAndAppend): the requests are
// settled first, then the events, which name the refused requests'
// refusals, are inserted and the counters updated, and one synchronous
// commit makes both durable.
func (s *Store) AppendDrawing(ctx context.Context, batch []*evidence.QuotaRequest, events func() ([]evidence.Event, error)) error {
	if s.ro != nil {
		return errReadOnly
	}
	if err := s.drawing(ctx, batch, events); err != nil {
		return fmt.Errorf("evidence/sqlite: append drawing quotas: %w", err)
	}
	return nil
}

// drawing runs evidence.DrawAndAppend in one IMMEDIATE transaction (the
// write lock is held from BEGIN, so the counters read are the counters
// written).
func (s *Store) drawing(ctx context.Context, batch []*evidence.QuotaRequest, events func() ([]evidence.Event, error)) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return classify(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := evidence.DrawAndAppend(ctx, drawTx{s, tx}, batch, events); err != nil {
		return classify(err)
	}
	return classify(tx.Commit())
}

// drawTx is evidence.DrawTx in a SQLite transaction.
type drawTx struct {
	s  *Store
	tx *sql.Tx
}

// LockCounters creates and reads each counter (the transaction holds the
// write lock).
func (d drawTx) LockCounters(ctx context.Context, keys []evidence.CounterKey) (map[evidence.CounterKey]int64, error) {
	used := make(map[evidence.CounterKey]int64, len(keys))
	for _, k := range keys {
		var u int64
		err := d.tx.QueryRowContext(ctx, `INSERT INTO portcullis_quota_counters (key, window_s, window_start, used, quota_limit)
			VALUES (?1, ?2, ?3, 0, 0) ON CONFLICT (key, window_s, window_start) DO UPDATE SET used = used RETURNING used`,
			k.Key, k.WindowS, k.WindowStart).Scan(&u)
		if err != nil {
			return nil, err
		}
		used[k] = u
	}
	return used, nil
}

// AddCounters writes what a settled batch drew: one UPDATE per counter.
func (d drawTx) AddCounters(ctx context.Context, keys []evidence.CounterKey, add, limit map[evidence.CounterKey]int64) error {
	for _, k := range keys {
		if add[k] == 0 {
			continue
		}
		if _, err := d.tx.ExecContext(ctx, `UPDATE portcullis_quota_counters SET used = used + ?4, quota_limit = ?5
			WHERE key = ?1 AND window_s = ?2 AND window_start = ?3`, k.Key, k.WindowS, k.WindowStart, add[k], limit[k]); err != nil {
			return err
		}
	}
	return nil
}

// Append inserts events with the prepared insert.
func (d drawTx) Append(ctx context.Context, events []evidence.Event) error {
	return d.s.insertEvents(ctx, d.tx, events)
}

// RefundQuotas gives draws back, never below zero.
func (s *Store) RefundQuotas(ctx context.Context, draws []evidence.QuotaDraw) error {
	for _, d := range draws {
		if _, err := s.writer.ExecContext(ctx, `UPDATE portcullis_quota_counters SET used = max(used - ?4, 0)
			WHERE key = ?1 AND window_s = ?2 AND window_start = ?3`, d.Key, d.WindowS, d.WindowStart, d.Cost); err != nil {
			return fmt.Errorf("evidence/sqlite: refund quotas: %w", classify(err))
		}
	}
	return nil
}

// QuotaUsage lists key's windows, newest first.
func (s *Store) QuotaUsage(ctx context.Context, key string, limit int) ([]wire.QuotaUsage, error) {
	rows, err := s.q.QueryContext(ctx, evidence.SQLQuotaUsage, key, limit)
	if err != nil {
		return nil, fmt.Errorf("evidence/sqlite: quota usage: %w", classify(err))
	}
	defer rows.Close()
	out := []wire.QuotaUsage{}
	for rows.Next() {
		var u wire.QuotaUsage
		var start int64
		if err := rows.Scan(&u.Key, &u.WindowS, &start, &u.Used, &u.Limit); err != nil {
			return nil, fmt.Errorf("evidence/sqlite: quota usage: %w", classify(err))
		}
		u.WindowStart = time.Unix(start, 0).UTC()
		out = append(out, u)
	}
	return out, classify(rows.Err())
}

// dialect is how the statements both stores share are written here.
var dialect = evidence.SQLDialect{
	UUID:      func(id uuid.UUID) any { return id.String() },
	Time:      func(t time.Time) any { return t.UnixMicro() },
	JSON:      func(b []byte) any { return string(b) },
	NullJSON:  func(b json.RawMessage) any { return nullable(b) },
	JSONField: func(col, key string) string { return "json_extract(" + col + ", '$." + key + "')" },
	// evidence_rule_ids is the index of rule_ids (migration 00004).
	HasRule: func(ph string) string {
		return "id IN (SELECT event_id FROM evidence_rule_ids WHERE rule_id = " + ph + ")"
	},
	// lower() folds ASCII letters only.
	Contains: func(col, ph string) string { return "instr(lower(coalesce(" + col + ", '')), lower(" + ph + ")) > 0" },
}

// ParkCall stores a pending parked call.
func (s *Store) ParkCall(ctx context.Context, p evidence.ParkedCall) error {
	if s.ro != nil {
		return errReadOnly
	}
	args, err := dialect.ParkCallArgs(p)
	if err != nil {
		return fmt.Errorf("evidence/sqlite: park call: %w", err)
	}
	if _, err = s.writer.ExecContext(ctx, evidence.SQLParkCall, args...); err != nil {
		return fmt.Errorf("evidence/sqlite: park call: %w", classify(err))
	}
	return nil
}

type scanner interface{ Scan(...any) error }

func scanParked(r scanner) (evidence.ParkedCall, error) {
	var (
		p                             evidence.ParkedCall
		id, rid, principal, approvers string
		args, response                sql.NullString
		input                         []byte
		createdAt, expiresAt          int64
		decidedAt                     sql.NullInt64
	)
	err := r.Scan(&id, &rid, &p.Status, &principal, &p.Tool, &p.CallID, &p.SessionID, &input, &p.ArgsSHA256, &args,
		&p.PolicyRevision, &p.Reason, &approvers, &createdAt, &expiresAt, &p.DecidedBy, &decidedAt, &p.DecisionReason, &response)
	if err != nil {
		return p, err
	}
	if p.ID, err = uuid.Parse(id); err != nil {
		return p, err
	}
	if p.ReceiptID, err = uuid.Parse(rid); err != nil {
		return p, err
	}
	p.CreatedAt, p.ExpiresAt = time.UnixMicro(createdAt).UTC(), time.UnixMicro(expiresAt).UTC()
	if decidedAt.Valid {
		p.DecidedAt = time.UnixMicro(decidedAt.Int64).UTC()
	}
	p.Input = input
	if args.Valid {
		p.Args = json.RawMessage(args.String)
	}
	if response.Valid {
		p.Response = json.RawMessage(response.String)
	}
	if err := json.Unmarshal([]byte(principal), &p.Principal); err != nil {
		return p, err
	}
	return p, json.Unmarshal([]byte(approvers), &p.Approvers)
}

func parkedRows(rows *sql.Rows, err error) ([]evidence.ParkedCall, error) {
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []evidence.ParkedCall
	for rows.Next() {
		p, err := scanParked(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, classify(rows.Err())
}

// SettleParked moves a parked call from one status to another exactly
// once: on the single writer connection, inside an IMMEDIATE transaction
// (the write lock is taken at BEGIN), so the status read and its update
// cannot interleave with another process's.
func (s *Store) SettleParked(ctx context.Context, st evidence.Settle) (evidence.ParkedCall, error) {
	if s.ro != nil {
		return evidence.ParkedCall{}, errReadOnly
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return evidence.ParkedCall{}, fmt.Errorf("evidence/sqlite: settle approval: %w", classify(err))
	}
	defer func() { _ = tx.Rollback() }()
	list, err := parkedRows(tx.QueryContext(ctx, evidence.SQLParkedByID, st.ID.String()))
	if err != nil {
		return evidence.ParkedCall{}, fmt.Errorf("evidence/sqlite: settle approval: %w", err)
	}
	if len(list) == 0 {
		return evidence.ParkedCall{}, evidence.ErrApprovalNotFound
	}
	p, err := st.Apply(list[0])
	if err != nil {
		return p, err
	}
	if _, err := tx.ExecContext(ctx, evidence.SQLSettleParked, dialect.SettleArgs(st, p)...); err != nil {
		return p, fmt.Errorf("evidence/sqlite: settle approval: %w", classify(err))
	}
	if err := tx.Commit(); err != nil {
		return p, fmt.Errorf("evidence/sqlite: settle approval: %w", classify(err))
	}
	return p, nil
}

// PruneQuotas deletes the counters of windows that ended by endedBy.
func (s *Store) PruneQuotas(ctx context.Context, endedBy time.Time) (int64, error) {
	if s.ro != nil {
		return 0, errReadOnly
	}
	res, err := s.writer.ExecContext(ctx, evidence.SQLPruneQuotas, endedBy.Unix())
	if err != nil {
		return 0, fmt.Errorf("evidence/sqlite: prune quotas: %w", classify(err))
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// PendingParked counts the principal's pending calls, up to limit.
func (s *Store) PendingParked(ctx context.Context, principalID string, limit int) (int, error) {
	var n int
	if err := s.q.QueryRowContext(ctx, evidence.SQLPendingParked, principalID, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("evidence/sqlite: pending approvals: %w", classify(err))
	}
	return n, nil
}
