-- Quota counters of windows long ended are pruned by the gateway: a
-- policy that builds quota keys from a call's input creates a counter row
-- per key and window, and without pruning they stayed for good, outliving
-- the receipts' retention. The app role may now DELETE from
-- portcullis_quota_counters (evidence_grant_app grants it, and roles
-- already granted the table get it now). Nothing else changes.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    app regrole;
BEGIN
    FOR app IN SELECT DISTINCT a.grantee::regrole
               FROM pg_class c, aclexplode(c.relacl) a
               WHERE c.oid = 'portcullis_quota_counters'::regclass
                 AND a.privilege_type = 'INSERT' AND a.grantee <> 0 AND a.grantee <> c.relowner LOOP
        EXECUTE format('GRANT DELETE ON TABLE portcullis_quota_counters TO %s', app);
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
    -- Mutable control state (issue 15), not evidence: quota counters and
    -- parked calls. What happened to a parked call is chained evidence.
    FOREACH t IN ARRAY ARRAY['evidence_rollup_hourly', 'evidence_rollup_rules_hourly', 'portcullis_quota_counters', 'portcullis_approvals'] LOOP
        EXECUTE format('REVOKE ALL ON TABLE %I FROM %s', t, app);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON TABLE %I TO %s', t, app);
    END LOOP;
    -- Quota windows long ended are pruned (issue: counters of keys drawn
    -- once would otherwise stay for good).
    EXECUTE format('GRANT DELETE ON TABLE portcullis_quota_counters TO %s', app);
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
DO $$
DECLARE
    app regrole;
BEGIN
    FOR app IN SELECT DISTINCT a.grantee::regrole
               FROM pg_class c, aclexplode(c.relacl) a
               WHERE c.oid = 'portcullis_quota_counters'::regclass
                 AND a.privilege_type = 'DELETE' AND a.grantee <> 0 AND a.grantee <> c.relowner LOOP
        EXECUTE format('REVOKE DELETE ON TABLE portcullis_quota_counters FROM %s', app);
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
    -- Mutable control state (issue 15), not evidence: quota counters and
    -- parked calls. What happened to a parked call is chained evidence.
    FOREACH t IN ARRAY ARRAY['evidence_rollup_hourly', 'evidence_rollup_rules_hourly', 'portcullis_quota_counters', 'portcullis_approvals'] LOOP
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
