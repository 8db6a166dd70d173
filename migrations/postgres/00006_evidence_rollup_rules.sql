-- Issue 7 follow-up: GET /v1/evidence/stats counts decisions per rule id
-- (by_rule) beside the per-tool, per-decision counts (by_tool_decision,
-- which evidence_rollup_hourly already serves: it is keyed by tool and
-- decision).
--
--  * evidence_rollup_rules_hourly: decisions per hour and rule id, a
--    decision with several ids counted once under each. Like
--    evidence_rollup_hourly it is derived data the checkpointer upserts in
--    the same transaction as the leaves it counts, so stats stay a range
--    scan of a rollup's primary key, never a scan of the events.
--  * Backfill: decisions checkpointed before this migration are counted
--    here once, from the events already in the tree (a single pass over
--    the decisions with rule ids, at migration time only). Decisions not
--    in the tree yet are counted by the checkpointer when it reaches them,
--    so nothing is counted twice or missed. Events written before 00004
--    have no rule ids and count under no rule.
--  * The app role: evidence_grant_app grants the new table too, and every
--    role that may already write evidence_rollup_hourly (an app role
--    granted before this migration) gets the same on the new table, so an
--    upgraded gateway's checkpointer keeps working without re-running the
--    grant.

-- +goose Up
CREATE TABLE evidence_rollup_rules_hourly (
    hour    timestamptz NOT NULL,
    rule_id text        NOT NULL,
    n       bigint      NOT NULL,
    PRIMARY KEY (hour, rule_id)
);

INSERT INTO evidence_rollup_rules_hourly (hour, rule_id, n)
SELECT date_trunc('hour', e.ts AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', r.rule_id, count(*)
FROM evidence_events e
JOIN evidence_tree t ON t.event_id = e.id
CROSS JOIN LATERAL (SELECT DISTINCT u AS rule_id FROM unnest(e.rule_ids) u) r
WHERE e.kind = 'decision' AND e.rule_ids IS NOT NULL
GROUP BY 1, 2;

-- +goose StatementBegin
DO $$
DECLARE
    app regrole;
BEGIN
    FOR app IN SELECT DISTINCT a.grantee::regrole
               FROM pg_class c, aclexplode(c.relacl) a
               WHERE c.oid = 'evidence_rollup_hourly'::regclass
                 AND a.privilege_type = 'INSERT' AND a.grantee <> 0 AND a.grantee <> c.relowner LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON TABLE evidence_rollup_rules_hourly TO %s', app);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION evidence_grant_app(app regrole) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t    text;
    part regclass;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %s', current_schema(), app);
    FOREACH t IN ARRAY ARRAY['evidence_events', 'evidence_tree', 'evidence_tree_hashes', 'evidence_checkpoints'] LOOP
        EXECUTE format('REVOKE ALL ON TABLE %I FROM %s', t, app);
        EXECUTE format('GRANT SELECT, INSERT ON TABLE %I TO %s', t, app);
    END LOOP;
    -- Derived counts, not evidence: the checkpointer upserts them.
    FOREACH t IN ARRAY ARRAY['evidence_rollup_hourly', 'evidence_rollup_rules_hourly'] LOOP
        EXECUTE format('REVOKE ALL ON TABLE %I FROM %s', t, app);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON TABLE %I TO %s', t, app);
    END LOOP;
    -- goose reads its version table when the gateway opens the store.
    EXECUTE format('REVOKE ALL ON TABLE portcullis_schema_version FROM %s', app);
    EXECUTE format('GRANT SELECT ON TABLE portcullis_schema_version TO %s', app);
    FOR part IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'evidence_events'::regclass LOOP
        EXECUTE format('REVOKE ALL ON TABLE %s FROM %s', part, app);
    END LOOP;
    EXECUTE format('GRANT EXECUTE ON FUNCTION evidence_ensure_partitions(timestamptz, int) TO %s', app);
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION evidence_grant_app(app regrole) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t    text;
    part regclass;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %s', current_schema(), app);
    FOREACH t IN ARRAY ARRAY['evidence_events', 'evidence_tree', 'evidence_tree_hashes', 'evidence_checkpoints'] LOOP
        EXECUTE format('REVOKE ALL ON TABLE %I FROM %s', t, app);
        EXECUTE format('GRANT SELECT, INSERT ON TABLE %I TO %s', t, app);
    END LOOP;
    -- Derived counts, not evidence: the checkpointer upserts them.
    EXECUTE format('REVOKE ALL ON TABLE evidence_rollup_hourly FROM %s', app);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON TABLE evidence_rollup_hourly TO %s', app);
    -- goose reads its version table when the gateway opens the store.
    EXECUTE format('REVOKE ALL ON TABLE portcullis_schema_version FROM %s', app);
    EXECUTE format('GRANT SELECT ON TABLE portcullis_schema_version TO %s', app);
    FOR part IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'evidence_events'::regclass LOOP
        EXECUTE format('REVOKE ALL ON TABLE %s FROM %s', part, app);
    END LOOP;
    EXECUTE format('GRANT EXECUTE ON FUNCTION evidence_ensure_partitions(timestamptz, int) TO %s', app);
END
$$;
-- +goose StatementEnd
DROP TABLE evidence_rollup_rules_hourly;
