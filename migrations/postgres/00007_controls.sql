-- Issue 15: human approval and quotas decided by policy (contract sections
-- 9 and 10).
--
--  * portcullis_quota_counters: one row per quota key, window length and
--    fixed window; the gateway draws on it with one conditional upsert
--    per quota (ON CONFLICT ... DO UPDATE ... WHERE used + cost <= limit),
--    so the limit holds exactly across replicas.
--  * portcullis_approvals: the calls parked for a person, with their exact
--    input (cleared once settled); a call leaves pending exactly once
--    (UPDATE ... WHERE status = 'pending').
--  * evidence_events.kind gains 'approval': requested, approved, rejected
--    and expired are chained events bound to the call's receipt.
--  * The app role may SELECT, INSERT and UPDATE the two new tables (they
--    are state, not evidence); evidence_grant_app grants them, and roles
--    already granted evidence_rollup_hourly get them now.

-- +goose Up
CREATE TABLE portcullis_quota_counters (
    key          text        NOT NULL,
    window_s     bigint      NOT NULL CHECK (window_s > 0),
    window_start bigint      NOT NULL,
    used         bigint      NOT NULL CHECK (used >= 0),
    quota_limit  bigint      NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, window_s, window_start)
);

CREATE TABLE portcullis_approvals (
    id              uuid        PRIMARY KEY,
    receipt_id      uuid        NOT NULL UNIQUE,
    status          text        NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'expired', 'stopped')),
    principal       jsonb       NOT NULL,
    principal_id    text        NOT NULL,
    tool            text        NOT NULL,
    call_id         text        NOT NULL DEFAULT '',
    session_id      text        NOT NULL DEFAULT '',
    input           bytea,
    args_sha256     text        NOT NULL,
    args            jsonb,
    policy_revision text        NOT NULL,
    reason          text        NOT NULL,
    approvers       jsonb       NOT NULL,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    decided_by      text        NOT NULL DEFAULT '',
    decided_at      timestamptz,
    decision_reason text        NOT NULL DEFAULT '',
    response        jsonb
);
CREATE INDEX portcullis_approvals_status ON portcullis_approvals (status, created_at);

ALTER TABLE evidence_events DROP CONSTRAINT evidence_events_kind_check;
ALTER TABLE evidence_events ADD CONSTRAINT evidence_events_kind_check CHECK (kind IN
    ('decision', 'outcome', 'chain_start', 'policy_activated', 'shadow_diff', 'checkpoint', 'retention',
     'legal_hold', 'legal_hold_release', 'approval'));

-- +goose StatementBegin
DO $$
DECLARE
    app regrole;
BEGIN
    FOR app IN SELECT DISTINCT a.grantee::regrole
               FROM pg_class c, aclexplode(c.relacl) a
               WHERE c.oid = 'evidence_rollup_hourly'::regclass
                 AND a.privilege_type = 'INSERT' AND a.grantee <> 0 AND a.grantee <> c.relowner LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON TABLE portcullis_quota_counters TO %s', app);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON TABLE portcullis_approvals TO %s', app);
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
ALTER TABLE evidence_events DROP CONSTRAINT evidence_events_kind_check;
ALTER TABLE evidence_events ADD CONSTRAINT evidence_events_kind_check CHECK (kind IN
    ('decision', 'outcome', 'chain_start', 'policy_activated', 'shadow_diff', 'checkpoint', 'retention',
     'legal_hold', 'legal_hold_release'));
DROP TABLE portcullis_approvals;
DROP TABLE portcullis_quota_counters;
