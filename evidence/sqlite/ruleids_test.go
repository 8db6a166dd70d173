package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/evidence/sqlite"
)

// TestRuleFilterUsesIndex: the rule filter of Receipts is a lookup in the
// primary key of evidence_rule_ids (migration 00004), not a json_each over
// every decision.
func TestRuleFilterUsesIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "evidence.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The shape of the query Store.Receipts builds for Filter{Rule: ...}.
	rows, err := db.QueryContext(ctx, `EXPLAIN QUERY PLAN SELECT id FROM evidence_events WHERE kind = 'decision'
		AND id IN (SELECT event_id FROM evidence_rule_ids WHERE rule_id = ?) ORDER BY ts DESC, id DESC LIMIT 101`, "grants.no_grant")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	p := strings.Join(plan, "\n")
	if !strings.Contains(p, "evidence_rule_ids USING") || !strings.Contains(p, "rule_id=?") || strings.Contains(p, "SCAN evidence_events") {
		t.Errorf("rule filter not served by evidence_rule_ids' key:\n%s", p)
	}
}
