-- Evidence events for the embedded store: the same append-only model as
-- PostgreSQL. ts is Unix microseconds (UTC); uuids are canonical lowercase
-- text so they sort like their bytes; json columns keep the exact bytes so
-- chain hashes recompute.

-- +goose Up
CREATE TABLE evidence_events (
    id                TEXT    NOT NULL PRIMARY KEY,
    ts                INTEGER NOT NULL,
    receipt_id        TEXT    NOT NULL,
    kind              TEXT    NOT NULL CHECK (kind IN ('decision', 'outcome', 'chain_start')),
    instance_id       TEXT    NOT NULL,
    principal_id      TEXT    NOT NULL DEFAULT '',
    session_id        TEXT    NOT NULL DEFAULT '',
    call_id           TEXT    NOT NULL DEFAULT '',
    tool              TEXT    NOT NULL DEFAULT '',
    decision          TEXT    NOT NULL DEFAULT '',
    reasons           TEXT,
    policy_revision   TEXT    NOT NULL DEFAULT '',
    args_sha256       TEXT    NOT NULL DEFAULT '',
    args              TEXT,
    scope             TEXT,
    trace_id          TEXT    NOT NULL DEFAULT '',
    parent_receipt_id TEXT,
    error_code        TEXT    NOT NULL DEFAULT '',
    outcome           TEXT,
    chain_id          TEXT    NOT NULL,
    chain_seq         INTEGER NOT NULL,
    prev_hash         BLOB    NOT NULL,
    hash              BLOB    NOT NULL
);

CREATE INDEX evidence_events_decision_ts ON evidence_events (ts, id) WHERE kind = 'decision';
CREATE INDEX evidence_events_principal ON evidence_events (principal_id, ts, id) WHERE kind = 'decision';
CREATE INDEX evidence_events_tool ON evidence_events (tool, ts, id) WHERE kind = 'decision';
CREATE INDEX evidence_events_session ON evidence_events (session_id, ts, id) WHERE kind = 'decision';
CREATE INDEX evidence_events_receipt ON evidence_events (receipt_id);
CREATE INDEX evidence_events_chain ON evidence_events (chain_id, chain_seq);
CREATE INDEX evidence_events_instance_chain ON evidence_events (instance_id, chain_id, chain_seq);

-- +goose StatementBegin
CREATE TRIGGER evidence_events_no_update BEFORE UPDATE ON evidence_events
BEGIN
    SELECT RAISE(ABORT, 'evidence_events is append-only: UPDATE refused');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER evidence_events_no_delete BEFORE DELETE ON evidence_events
BEGIN
    SELECT RAISE(ABORT, 'evidence_events is append-only: DELETE refused');
END;
-- +goose StatementEnd

-- +goose Down
DROP TABLE evidence_events;
