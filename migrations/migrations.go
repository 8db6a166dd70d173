// Package migrations holds the SQL schema of every evidence store, embedded
// into the binary so that `gateway migrate`, `gateway serve` and the tests
// apply exactly the same, reviewed files with goose v3 — no migration files
// to ship or lose beside the binary.
package migrations

import "embed"

// FS holds postgres/*.sql and sqlite/*.sql in goose format. Stores take the
// sub-tree of their dialect with fs.Sub so one embed serves both.
//
//go:embed postgres/*.sql sqlite/*.sql
var FS embed.FS

// Directories inside FS, one per store dialect.
const (
	PostgresDir = "postgres"
	SQLiteDir   = "sqlite"
)
