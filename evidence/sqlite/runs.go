package sqlite

import (
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
)

// UnansweredRuns (evidence.SQLReads) lists approved parked calls without
// an answer. A SQLite store has one process at a time (its file lock), so
// at a start every one of them lost its runner.
var _ evidence.RunLister = (*Store)(nil)

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
