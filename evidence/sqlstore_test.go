package evidence_test

import (
	"testing"

	"github.com/portcullis/portcullis/evidence"
)

// TestSQLDialectRebindsOnlyPlaceholders: ?N becomes $N for PostgreSQL, and
// nothing else changes: a ? inside a string literal, a quoted identifier or
// a comment is text, and a ? not followed by a digit (jsonb's ?| and ?&)
// is an operator.
func TestSQLDialectRebindsOnlyPlaceholders(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"SELECT a FROM t WHERE b = ?1 AND c = ?12", "SELECT a FROM t WHERE b = $1 AND c = $12"},
		{"SELECT '?1' FROM t WHERE b = ?1", "SELECT '?1' FROM t WHERE b = $1"},
		{"SELECT 'it''s ?2' FROM t WHERE b = ?2", "SELECT 'it''s ?2' FROM t WHERE b = $2"},
		{`SELECT "col?1" FROM t WHERE b = ?1`, `SELECT "col?1" FROM t WHERE b = $1`},
		{"SELECT a FROM t -- ?1 is the key\nWHERE b = ?1", "SELECT a FROM t -- ?1 is the key\nWHERE b = $1"},
		{"SELECT a FROM t /* ?3 */ WHERE b ?| ?1", "SELECT a FROM t /* ?3 */ WHERE b ?| $1"},
		{"SELECT a FROM t WHERE b = ?", "SELECT a FROM t WHERE b = ?"},
		{"SELECT a /*/ ?1 */ FROM t", "SELECT a /*/ ?1 */ FROM t"},
		{"SELECT '?1", "SELECT '?1"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			if got := (evidence.SQLDialect{Dollar: true}).SQL(tc.in); got != tc.want {
				t.Errorf("PostgreSQL: %q, want %q", got, tc.want)
			}
			if got := (evidence.SQLDialect{}).SQL(tc.in); got != tc.in {
				t.Errorf("SQLite: %q, want it unchanged", got)
			}
		})
	}
}
