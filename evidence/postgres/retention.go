package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis/portcullis/evidence"
)

// Partition is one monthly partition of evidence_events: [From, To).
type Partition = evidence.RetentionMonth

// RetentionPlan lists the partitions Retain drops.
type RetentionPlan = evidence.RetentionPlan

// RetainOptions configure Retain.
type RetainOptions = evidence.RetainOptions

var _ evidence.RetentionStore = (*Store)(nil)

// PlanRetention lists the partitions Retain would drop, with their row
// counts: whole monthly partitions whose month ended at or before cutoff,
// never the DEFAULT partition and never the current or next month.
func (s *Store) PlanRetention(ctx context.Context, cutoff, now time.Time) (RetentionPlan, error) {
	plan := RetentionPlan{Cutoff: cutoff.UTC()}
	thisMonth := evidence.MonthStart(now)
	names, err := collect(ctx, s.q, pgx.RowTo[string], `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'evidence_events'::regclass ORDER BY c.relname`)
	if err != nil {
		return plan, fmt.Errorf("evidence/postgres: list partitions: %w", err)
	}
	for _, name := range names {
		month, ok := strings.CutPrefix(name, "evidence_events_")
		if !ok || month == "default" {
			continue
		}
		from, err := time.Parse("2006_01", month)
		if err != nil {
			continue
		}
		to := from.AddDate(0, 1, 0)
		if to.After(plan.Cutoff) || to.After(thisMonth) {
			continue
		}
		p := Partition{Name: name, From: from, To: to}
		if err := s.q.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{name}.Sanitize()).Scan(&p.Rows); err != nil {
			return plan, fmt.Errorf("evidence/postgres: count %s: %w", name, classify(err))
		}
		plan.Months = append(plan.Months, p)
		if to.After(plan.Before) {
			plan.Before = to
		}
	}
	return plan, nil
}

// Unsealed counts the partition's events that are not leaves of the tree.
func (s *Store) Unsealed(ctx context.Context, p Partition) (int64, error) {
	var n int64
	err := s.q.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{p.Name}.Sanitize()+
		" e WHERE NOT EXISTS (SELECT 1 FROM evidence_tree t WHERE t.event_id = e.id)").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("evidence/postgres: unsealed events of %s: %w", p.Name, classify(err))
	}
	return n, nil
}

// DropMonth detaches and drops the partition in one transaction. It needs
// the table's owner (a maintenance role), never the gateway's app role.
func (s *Store) DropMonth(ctx context.Context, p Partition) error {
	if s.ro != nil {
		return errReadOnly
	}
	id := pgx.Identifier{p.Name}.Sanitize()
	if err := s.RawExec(ctx, "BEGIN; ALTER TABLE evidence_events DETACH PARTITION "+id+"; DROP TABLE "+id+"; COMMIT"); err != nil {
		return fmt.Errorf("evidence/postgres: drop %s: %w", p.Name, classify(err))
	}
	return nil
}

// Retain expires evidence older than the retention period by dropping
// whole monthly partitions after a chained retention event
// (evidence.Retain).
func (s *Store) Retain(ctx context.Context, opts RetainOptions) (RetentionPlan, error) {
	return evidence.Retain(ctx, s, opts)
}
