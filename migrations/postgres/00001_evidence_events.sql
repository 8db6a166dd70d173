-- Evidence events: append-only, one row per decision, outcome or chain start.
-- A receipt is its decision event plus its latest outcome event; nothing is
-- ever updated in place. Partitioned by month on ts so retention is
-- DETACH + DROP of whole months by a maintenance role.

-- +goose Up
CREATE TABLE evidence_events (
    ts                timestamptz NOT NULL,
    id                uuid        NOT NULL,
    receipt_id        uuid        NOT NULL,
    kind              text        NOT NULL CHECK (kind IN ('decision', 'outcome', 'chain_start')),
    instance_id       text        NOT NULL,
    principal_id      text        NOT NULL DEFAULT '',
    session_id        text        NOT NULL DEFAULT '',
    call_id           text        NOT NULL DEFAULT '',
    tool              text        NOT NULL DEFAULT '',
    decision          text        NOT NULL DEFAULT '',
    reasons           json,
    policy_revision   text        NOT NULL DEFAULT '',
    args_sha256       text        NOT NULL DEFAULT '',
    -- json, not jsonb: the exact bytes are kept so chain hashes recompute.
    args              json,
    scope             json,
    trace_id          text        NOT NULL DEFAULT '',
    parent_receipt_id uuid,
    error_code        text        NOT NULL DEFAULT '',
    outcome           json,
    chain_id          uuid        NOT NULL,
    chain_seq         bigint      NOT NULL,
    prev_hash         bytea       NOT NULL,
    hash              bytea       NOT NULL,
    PRIMARY KEY (ts, id)
) PARTITION BY RANGE (ts);

CREATE TABLE evidence_events_default PARTITION OF evidence_events DEFAULT;

CREATE INDEX evidence_events_decision_ts ON evidence_events (ts, id) WHERE kind = 'decision';
CREATE INDEX evidence_events_principal ON evidence_events (principal_id, ts, id) WHERE kind = 'decision';
CREATE INDEX evidence_events_tool ON evidence_events (tool, ts, id) WHERE kind = 'decision';
CREATE INDEX evidence_events_session ON evidence_events (session_id, ts, id) WHERE kind = 'decision';
CREATE INDEX evidence_events_receipt ON evidence_events (receipt_id);
CREATE INDEX evidence_events_chain ON evidence_events (chain_id, chain_seq);
CREATE INDEX evidence_events_instance_chain ON evidence_events (instance_id, chain_id, chain_seq);

-- +goose StatementBegin
CREATE FUNCTION evidence_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'evidence_events is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER evidence_events_append_only
    BEFORE UPDATE OR DELETE ON evidence_events
    FOR EACH ROW EXECUTE FUNCTION evidence_reject_change();

CREATE TRIGGER evidence_events_no_truncate
    BEFORE TRUNCATE ON evidence_events
    FOR EACH STATEMENT EXECUTE FUNCTION evidence_reject_change();

-- TRUNCATE of a partition bypasses the parent's trigger, so every partition
-- gets its own.
CREATE TRIGGER evidence_events_no_truncate
    BEFORE TRUNCATE ON evidence_events_default
    FOR EACH STATEMENT EXECUTE FUNCTION evidence_reject_change();

-- evidence_ensure_partitions creates the monthly partitions for `months`
-- months starting with the month of from_ts (UTC). Replicas may call it at
-- once: an advisory transaction lock serializes them. A month whose rows
-- already landed in the DEFAULT partition is left there (creating the
-- partition would fail) and reported with a NOTICE.
-- +goose StatementBegin
CREATE FUNCTION evidence_ensure_partitions(from_ts timestamptz, months int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    lo   timestamptz;
    hi   timestamptz;
    name text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('portcullis.evidence_ensure_partitions'));
    FOR i IN 0 .. months - 1 LOOP
        lo := (date_trunc('month', from_ts AT TIME ZONE 'UTC') + make_interval(months => i)) AT TIME ZONE 'UTC';
        hi := (date_trunc('month', from_ts AT TIME ZONE 'UTC') + make_interval(months => i + 1)) AT TIME ZONE 'UTC';
        name := 'evidence_events_' || to_char(lo AT TIME ZONE 'UTC', 'YYYY_MM');
        IF to_regclass(quote_ident(name)) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE TABLE %I PARTITION OF evidence_events FOR VALUES FROM (%L) TO (%L)', name, lo, hi);
                EXECUTE format('CREATE TRIGGER evidence_events_no_truncate BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION evidence_reject_change()', name);
            EXCEPTION WHEN check_violation THEN
                RAISE NOTICE 'evidence partition % not created: rows for it are in the default partition', name;
            END;
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

SELECT evidence_ensure_partitions(now(), 2);

-- +goose Down
DROP TABLE evidence_events;
DROP FUNCTION evidence_ensure_partitions(timestamptz, int);
DROP FUNCTION evidence_reject_change();
