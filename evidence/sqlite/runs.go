package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
)

var _ evidence.RunLister = (*Store)(nil)

// UnansweredRuns lists approved parked calls without an answer, oldest
// approval first. A SQLite store has one process at a time (its file
// lock), so at a start every one of them lost its runner.
func (s *Store) UnansweredRuns(ctx context.Context, limit int) ([]uuid.UUID, error) {
	ids, err := queryAll(ctx, s.q, "SELECT id FROM portcullis_approvals WHERE status = 'approved' AND response IS NULL ORDER BY decided_at, id LIMIT ?", []any{limit}, scanID)
	if err != nil {
		return nil, fmt.Errorf("evidence/sqlite: unanswered runs: %w", err)
	}
	return ids, nil
}

// scanID scans a row whose one column is a stored uuid: the row scan of
// the id listings, for queryAll.
func scanID(rows *sql.Rows) (uuid.UUID, error) {
	var id string
	if err := rows.Scan(&id); err != nil {
		return uuid.UUID{}, classify(err)
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return uuid.UUID{}, fmt.Errorf("stored id %q: %w", id, err)
	}
	return u, nil
}
