package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/internal/rowcodec"
	"github.com/portcullis/portcullis/wire"
)

var (
	_ evidence.ControlStore  = (*Store)(nil)
	_ evidence.QuotaAppender = (*Store)(nil)
)

// ConsumeQuotas draws on every quota, all or none, group-committed: the
// draws that queue while one transaction commits go in the next (one
// commit per batch, not per call; a hot counter row is locked once per
// batch; see commitQuotas for why the limit holds exactly across
// replicas).
func (s *Store) ConsumeQuotas(ctx context.Context, qs []wire.Quota, now time.Time) ([]evidence.QuotaDraw, *evidence.QuotaExceeded, error) {
	if s.ro != nil {
		return nil, nil, errReadOnly
	}
	return s.quotas.Consume(ctx, qs, now, s.commitQuotas)
}

// commitQuotas applies a batch in one transaction of its own (the
// approval path; an admitted call's draw rides in its decision's commit,
// AppendDrawing).
func (s *Store) commitQuotas(ctx context.Context, batch []*evidence.QuotaRequest) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return evidence.DrawAndAppend(ctx, drawTx{tx}, batch, nil)
	})
	if err != nil {
		return fmt.Errorf("evidence/postgres: consume quotas: %w", classify(err))
	}
	return nil
}

// AppendDrawing draws an admitted batch's quotas and appends its events in
// one transaction (evidence.QuotaAppender, evidence.DrawAndAppend): the
// counter rows are locked and the requests settled first, then the events,
// which name the refused requests' refusals, are copied in and the
// counters updated, and one commit makes both durable. The row locks are
// held to the commit, so the limit holds exactly across replicas.
func (s *Store) AppendDrawing(ctx context.Context, batch []*evidence.QuotaRequest, events func() ([]evidence.Event, error)) error {
	if s.ro != nil {
		return errReadOnly
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return evidence.DrawAndAppend(ctx, drawTx{tx}, batch, events)
	})
	switch {
	case errors.Is(err, evidence.ErrInvalidEvent):
		return fmt.Errorf("evidence/postgres: append drawing quotas: %w", err)
	case err != nil:
		return fmt.Errorf("evidence/postgres: append drawing quotas: %w", classify(err))
	}
	return nil
}

// drawTx is evidence.DrawTx in a PostgreSQL transaction.
type drawTx struct{ tx pgx.Tx }

// LockCounters creates every counter row if missing and locks it (SELECT
// ... FOR UPDATE, in key order, pipelined in one round trip). The row
// locks make the check and the increments one step, so the limit holds
// exactly across replicas; a hot counter costs three statements per
// batch, not per call.
func (d drawTx) LockCounters(ctx context.Context, keys []evidence.CounterKey) (map[evidence.CounterKey]int64, error) {
	lock := &pgx.Batch{}
	for _, k := range keys {
		lock.Queue(`INSERT INTO portcullis_quota_counters (key, window_s, window_start, used, quota_limit)
			VALUES ($1, $2, $3, 0, 0) ON CONFLICT (key, window_s, window_start) DO NOTHING`, k.Key, k.WindowS, k.WindowStart)
		lock.Queue(`SELECT used FROM portcullis_quota_counters WHERE key = $1 AND window_s = $2 AND window_start = $3 FOR UPDATE`,
			k.Key, k.WindowS, k.WindowStart)
	}
	res := d.tx.SendBatch(ctx, lock)
	used := make(map[evidence.CounterKey]int64, len(keys))
	for _, k := range keys {
		if _, err := res.Exec(); err != nil {
			_ = res.Close()
			return nil, err
		}
		var u int64
		if err := res.QueryRow().Scan(&u); err != nil {
			_ = res.Close()
			return nil, err
		}
		used[k] = u
	}
	return used, res.Close()
}

// AddCounters writes what a settled batch drew: one UPDATE per counter,
// pipelined.
func (d drawTx) AddCounters(ctx context.Context, keys []evidence.CounterKey, add, limit map[evidence.CounterKey]int64) error {
	upd := &pgx.Batch{}
	for _, k := range keys {
		if add[k] > 0 {
			upd.Queue(`UPDATE portcullis_quota_counters SET used = used + $4, quota_limit = $5, updated_at = now()
				WHERE key = $1 AND window_s = $2 AND window_start = $3`, k.Key, k.WindowS, k.WindowStart, add[k], limit[k])
		}
	}
	if upd.Len() == 0 {
		return nil
	}
	return d.tx.SendBatch(ctx, upd).Close()
}

// Append copies events in.
func (d drawTx) Append(ctx context.Context, events []evidence.Event) error {
	rows, err := eventRows(events)
	if err != nil {
		return err
	}
	_, err = d.tx.CopyFrom(ctx, pgx.Identifier{"evidence_events"}, rowcodec.Columns, pgx.CopyFromRows(rows))
	return err
}

// RefundQuotas gives draws back, never below zero.
func (s *Store) RefundQuotas(ctx context.Context, draws []evidence.QuotaDraw) error {
	for _, d := range draws {
		if _, err := s.pool.Exec(ctx, `UPDATE portcullis_quota_counters SET used = greatest(used - $4, 0), updated_at = now()
			WHERE key = $1 AND window_s = $2 AND window_start = $3`, d.Key, d.WindowS, d.WindowStart, d.Cost); err != nil {
			return fmt.Errorf("evidence/postgres: refund quotas: %w", classify(err))
		}
	}
	return nil
}

// QuotaUsage lists key's windows, newest first.
func (s *Store) QuotaUsage(ctx context.Context, key string, limit int) ([]wire.QuotaUsage, error) {
	out, err := collect(ctx, s.q, func(r pgx.CollectableRow) (wire.QuotaUsage, error) {
		var u wire.QuotaUsage
		var start int64
		err := r.Scan(&u.Key, &u.WindowS, &start, &u.Used, &u.Limit)
		u.WindowStart = time.Unix(start, 0).UTC()
		return u, err
	}, sqlQuotaUsage, key, limit)
	if err != nil {
		return nil, fmt.Errorf("evidence/postgres: quota usage: %w", err)
	}
	return out, nil
}

// dialect is how the statements both stores share are written here.
var dialect = evidence.SQLDialect{
	Dollar:    true,
	UUID:      func(id uuid.UUID) any { return pgUUID(id) },
	Time:      func(t time.Time) any { return t },
	JSON:      func(b []byte) any { return b },
	NullJSON:  func(b json.RawMessage) any { return jsonOrNil(b) },
	JSONField: func(col, key string) string { return col + "->>'" + key + "'" },
	// Served by the GIN index on rule_ids (migration 00004).
	HasRule: func(ph string) string { return "rule_ids @> ARRAY[" + ph + "]::text[]" },
	Contains: func(col, ph string) string {
		return "strpos(lower(coalesce(" + col + "::text, '')), lower(" + ph + "::text)) > 0"
	},
	UUIDArray: func(ids []uuid.UUID) any {
		pg := make([]pgtype.UUID, len(ids))
		for i, id := range ids {
			pg[i] = pgUUID(id)
		}
		return pg
	},
}

// The shared statements, rebound once.
var (
	sqlQuotaUsage      = dialect.SQL(evidence.SQLQuotaUsage)
	sqlParkCall        = dialect.SQL(evidence.SQLParkCall)
	sqlParkedByID      = dialect.SQL(evidence.SQLParkedByID)
	sqlParkedForUpdate = sqlParkedByID + " FOR UPDATE"
	sqlSettleParked    = dialect.SQL(evidence.SQLSettleParked)
	sqlChainHead       = dialect.SQL(evidence.SQLChainHead)
	sqlPendingParked   = dialect.SQL(evidence.SQLPendingParked)
	sqlPruneQuotas     = dialect.SQL(evidence.SQLPruneQuotas)
)

// ParkCall stores a pending parked call.
func (s *Store) ParkCall(ctx context.Context, p evidence.ParkedCall) error {
	if s.ro != nil {
		return errReadOnly
	}
	args, err := dialect.ParkCallArgs(p)
	if err != nil {
		return fmt.Errorf("evidence/postgres: park call: %w", err)
	}
	if _, err = s.pool.Exec(ctx, sqlParkCall, args...); err != nil {
		return fmt.Errorf("evidence/postgres: park call: %w", classify(err))
	}
	return nil
}

func jsonOrNil(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

func scanParked(r pgx.CollectableRow) (evidence.ParkedCall, error) {
	var (
		p                    evidence.ParkedCall
		id, rid              pgtype.UUID
		principal, approvers []byte
		args, response       []byte
		decidedAt            pgtype.Timestamptz
		createdAt, expiresAt time.Time
		input                []byte
	)
	err := r.Scan(&id, &rid, &p.Status, &principal, &p.Tool, &p.CallID, &p.SessionID, &input, &p.ArgsSHA256, &args,
		&p.PolicyRevision, &p.Reason, &approvers, &createdAt, &expiresAt, &p.DecidedBy, &decidedAt, &p.DecisionReason, &response)
	if err != nil {
		return p, err
	}
	p.ID, p.ReceiptID = id.Bytes, rid.Bytes
	p.CreatedAt, p.ExpiresAt = createdAt.UTC(), expiresAt.UTC()
	if decidedAt.Valid {
		p.DecidedAt = decidedAt.Time.UTC()
	}
	p.Input, p.Args, p.Response = input, args, response
	if err := json.Unmarshal(principal, &p.Principal); err != nil {
		return p, err
	}
	return p, json.Unmarshal(approvers, &p.Approvers)
}

func (s *Store) parked(ctx context.Context, q string, args ...any) ([]evidence.ParkedCall, error) {
	return collect(ctx, s.q, scanParked, q, args...)
}

// SettleParked moves a parked call from one status to another exactly
// once: the row is locked (FOR UPDATE) and the update re-checks the
// status, so of two replicas settling it at once one wins and the other
// finds it settled. The input is returned from before the update, which
// clears it unless the call was just approved.
func (s *Store) SettleParked(ctx context.Context, st evidence.Settle) (evidence.ParkedCall, error) {
	if s.ro != nil {
		return evidence.ParkedCall{}, errReadOnly
	}
	var p, settled evidence.ParkedCall
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlParkedForUpdate, pgUUID(st.ID))
		if err != nil {
			return err
		}
		list, err := pgx.CollectRows(rows, scanParked)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			return evidence.ErrApprovalNotFound
		}
		p = list[0]
		if settled, err = st.Apply(p); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, sqlSettleParked, dialect.SettleArgs(st, settled)...)
		return err
	})
	switch {
	case errors.Is(err, evidence.ErrApprovalNotFound), errors.Is(err, evidence.ErrApprovalSettled):
		return p, err
	case err != nil:
		return p, fmt.Errorf("evidence/postgres: settle approval: %w", classify(err))
	}
	return settled, nil
}

// PruneQuotas deletes the counters of windows that ended by endedBy.
func (s *Store) PruneQuotas(ctx context.Context, endedBy time.Time) (int64, error) {
	if s.ro != nil {
		return 0, errReadOnly
	}
	tag, err := s.pool.Exec(ctx, sqlPruneQuotas, endedBy.Unix())
	if err != nil {
		return 0, fmt.Errorf("evidence/postgres: prune quotas: %w", classify(err))
	}
	return tag.RowsAffected(), nil
}

// PendingParked counts the principal's pending calls, up to limit.
func (s *Store) PendingParked(ctx context.Context, principalID string, limit int) (int, error) {
	var n int
	if err := s.q.QueryRow(ctx, sqlPendingParked, principalID, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("evidence/postgres: pending approvals: %w", classify(err))
	}
	return n, nil
}
