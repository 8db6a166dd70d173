-- Issue 7: the app role cannot UPDATE, DELETE or TRUNCATE evidence.
--
-- The triggers refuse changes whatever the role, but the table's owner can
-- drop them. Privileges are the second, independent layer: run the gateway
-- as a login role that holds only INSERT and SELECT, and keep ownership
-- (migrations, retention) with another role.
--
--  * evidence_ensure_partitions becomes SECURITY DEFINER: the gateway
--    calls it at start and every 6 hours, and the partitions it creates
--    must belong to the owner, never to the app role (an owner may TRUNCATE
--    or DROP its table).
--  * evidence_grant_app(role) grants exactly what the gateway needs and
--    revokes everything else, on the parents and on every partition. The
--    owner runs it once per app role (docs/evidence.md#least-privilege-app-role):
--        SELECT evidence_grant_app('portcullis_app');
--    Partitions need no grant at all: rows reach them through the parent,
--    whose privileges are the ones checked. A partition created later
--    therefore gives the app role nothing (unless someone set ALTER DEFAULT
--    PRIVILEGES granting more), and the function revokes any privilege a
--    partition carries when it is run again.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION evidence_ensure_partitions(timestamptz, int) SECURITY DEFINER SET search_path = %I, pg_temp',
        current_schema());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION evidence_grant_app(app regrole) RETURNS void
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

-- +goose Down
DROP FUNCTION evidence_grant_app(regrole);
ALTER FUNCTION evidence_ensure_partitions(timestamptz, int) SECURITY INVOKER RESET search_path;
