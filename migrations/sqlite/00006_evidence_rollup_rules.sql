-- Issue 7 follow-up, embedded store: the same change as PostgreSQL's 00006
-- (this store's migration 5 is Go: evidence/sqlite/holds.go).
--
--  * evidence_rollup_rules_hourly: decisions per hour (Unix microseconds,
--    UTC) and rule id, a decision with several ids counted once under each.
--    Derived data the checkpointer upserts in the transaction that appends
--    the leaves it counts, so GET /v1/evidence/stats stays a range scan of
--    a rollup's primary key.
--  * Backfill: decisions checkpointed before this migration are counted
--    once, from evidence_rule_ids (migration 00004: one row per decision
--    and distinct rule id) joined to the tree. Decisions not yet in the
--    tree are counted by the checkpointer when it reaches them.

-- +goose Up
CREATE TABLE evidence_rollup_rules_hourly (
    hour    INTEGER NOT NULL,
    rule_id TEXT    NOT NULL,
    n       INTEGER NOT NULL,
    PRIMARY KEY (hour, rule_id)
) WITHOUT ROWID;

INSERT INTO evidence_rollup_rules_hourly (hour, rule_id, n)
SELECT (r.ts / 3600000000) * 3600000000, r.rule_id, count(*)
FROM evidence_rule_ids r
JOIN evidence_tree t ON t.event_id = r.event_id
GROUP BY 1, 2;

-- +goose Down
DROP TABLE evidence_rollup_rules_hourly;
