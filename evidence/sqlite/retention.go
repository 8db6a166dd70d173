package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/portcullis/portcullis/evidence"
)

// deleteChunk bounds one retention DELETE transaction. The gateway shares
// the file's single write lock (busy_timeout 10 s), so retention deletes in
// short transactions rather than one long one; every chunk is already
// covered by the committed retention event, so Verify accepts the file
// after any of them.
const deleteChunk = 2000

var _ evidence.RetentionStore = (*Store)(nil)

// PlanRetention lists the months with events that expire at cutoff: months
// that ended at or before cutoff, never the month of now or a later one.
// SQLite has no partitions, so a month is its events' time range.
func (s *Store) PlanRetention(ctx context.Context, cutoff, now time.Time) (evidence.RetentionPlan, error) {
	plan := evidence.RetentionPlan{Cutoff: cutoff.UTC()}
	bound := evidence.MonthStart(cutoff)
	if this := evidence.MonthStart(now); this.Before(bound) {
		bound = this
	}
	rows, err := s.q.QueryContext(ctx, `SELECT strftime('%Y-%m', ts / 1000000, 'unixepoch') AS month, count(*)
		FROM evidence_events WHERE ts < ? GROUP BY month ORDER BY month`, bound.UnixMicro())
	if err != nil {
		return plan, fmt.Errorf("evidence/sqlite: plan retention: %w", classify(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			name string
			n    int64
		)
		if err := rows.Scan(&name, &n); err != nil {
			return plan, fmt.Errorf("evidence/sqlite: plan retention: %w", classify(err))
		}
		from, err := time.Parse("2006-01", name)
		if err != nil {
			return plan, fmt.Errorf("evidence/sqlite: plan retention: month %q: %w", name, err)
		}
		to := from.AddDate(0, 1, 0)
		plan.Months = append(plan.Months, evidence.RetentionMonth{Name: name, From: from, To: to, Rows: n})
		plan.Before = to
	}
	if err := rows.Err(); err != nil {
		return plan, fmt.Errorf("evidence/sqlite: plan retention: %w", classify(err))
	}
	return plan, nil
}

// Unsealed counts the month's events that are not leaves of the tree.
func (s *Store) Unsealed(ctx context.Context, m evidence.RetentionMonth) (int64, error) {
	var n int64
	err := s.q.QueryRowContext(ctx, `SELECT count(*) FROM evidence_events e WHERE e.ts >= ? AND e.ts < ?
		AND NOT EXISTS (SELECT 1 FROM evidence_tree t WHERE t.event_id = e.id)`,
		m.From.UnixMicro(), m.To.UnixMicro()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("evidence/sqlite: unsealed events of %s: %w", m.Name, classify(err))
	}
	return n, nil
}

// DropMonth deletes the month's events, oldest rows first, in transactions
// of at most deleteChunk rows. The append-only trigger (migration 00003)
// lets a row go only when it is a leaf of the tree and older than a
// recorded retention event's bound, so DropMonth cannot delete more than
// Verify accepts, whoever calls it.
func (s *Store) DropMonth(ctx context.Context, m evidence.RetentionMonth) error {
	from, to := m.From.UnixMicro(), m.To.UnixMicro()
	var after int64 // rowid: insertion order, so old rows come first
	for {
		n, last, err := s.deleteChunk(ctx, from, to, after)
		if err != nil {
			return fmt.Errorf("evidence/sqlite: drop %s: %w", m.Name, err)
		}
		if n == 0 {
			return nil
		}
		after = last
	}
}

func (s *Store) deleteChunk(ctx context.Context, from, to, after int64) (n, last int64, err error) {
	if s.ro != nil {
		return 0, 0, errReadOnly
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, classify(err)
	}
	defer func() { _ = tx.Rollback() }()
	err = tx.QueryRowContext(ctx, `SELECT count(*), coalesce(max(rowid), 0) FROM (SELECT rowid FROM evidence_events
		WHERE rowid > ? AND ts >= ? AND ts < ? ORDER BY rowid LIMIT ?)`, after, from, to, deleteChunk).Scan(&n, &last)
	if err != nil || n == 0 {
		return 0, 0, classify(err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM evidence_events WHERE rowid > ? AND rowid <= ? AND ts >= ? AND ts < ?`,
		after, last, from, to)
	if err != nil {
		return 0, 0, classify(err)
	}
	if got, err := res.RowsAffected(); err != nil || got != n {
		return 0, 0, fmt.Errorf("deleted %d of %d rows (%v)", got, n, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, classify(err)
	}
	return n, last, nil
}

// Retain expires evidence older than the retention period, a whole month
// at a time, after a chained retention event (evidence.Retain).
func (s *Store) Retain(ctx context.Context, opts evidence.RetainOptions) (evidence.RetentionPlan, error) {
	return evidence.Retain(ctx, s, opts)
}
