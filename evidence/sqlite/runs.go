package sqlite

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
)

var _ evidence.RunLister = (*Store)(nil)

// UnansweredRuns lists approved parked calls without an answer, oldest
// approval first. A SQLite store has one process at a time (its file
// lock), so at a start every one of them lost its runner.
func (s *Store) UnansweredRuns(ctx context.Context, limit int) ([]uuid.UUID, error) {
	rows, err := s.q.QueryContext(ctx, "SELECT id FROM portcullis_approvals WHERE status = 'approved' AND response IS NULL ORDER BY decided_at, id LIMIT ?", limit)
	if err != nil {
		return nil, fmt.Errorf("evidence/sqlite: unanswered runs: %w", classify(err))
	}
	defer rows.Close()
	var out []uuid.UUID
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, classify(err)
		}
		u, err := uuid.Parse(id)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, classify(rows.Err())
}
