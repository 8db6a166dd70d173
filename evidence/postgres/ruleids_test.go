package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis/portcullis/evidence/postgres"
)

// TestRuleFilterUsesIndex: the rule filter of Receipts is served by the GIN
// index on rule_ids (migration 00004), not by walking decisions. On a
// test-sized table a sequential scan is cheapest, so the planner is told
// to avoid one, as a table of real size makes it; it then has the ts and
// principal indexes to choose from as well, and must pick rule_ids'.
func TestRuleFilterUsesIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := freshDatabase(t)
	s, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// Enough decisions for the planner to weigh its options: one in 200
	// names the rule asked for.
	if _, err := tx.Exec(ctx, `INSERT INTO evidence_events (ts, id, receipt_id, kind, instance_id, decision,
		chain_id, chain_seq, prev_hash, hash, rule_ids)
		SELECT now() - make_interval(secs => i), gen_random_uuid(), gen_random_uuid(), 'decision', 'i', 'deny',
			gen_random_uuid(), i, '', '',
			CASE WHEN i % 200 = 0 THEN ARRAY['grants.no_grant'] ELSE ARRAY['grant:role/agent/Exec', 'exec.shape.ls'] END
		FROM generate_series(1, 20000) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "ANALYZE evidence_events"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	// The shape of the query Store.Receipts builds for Filter{Rule: ...}.
	rows, err := tx.Query(ctx, `EXPLAIN SELECT id FROM evidence_events WHERE kind = 'decision'
		AND rule_ids @> ARRAY[$1]::text[] ORDER BY ts DESC, id DESC LIMIT 101`, "grants.no_grant")
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	p := strings.Join(plan, "\n")
	served := false
	for _, line := range plan {
		served = served || (strings.Contains(line, "Bitmap Index Scan on") && strings.Contains(line, "rule_ids"))
	}
	if !served {
		t.Errorf("rule filter not served by the rule_ids index:\n%s", p)
	}
}
