-- Issue 7, embedded store: the same changes as PostgreSQL's 00002. SQLite
-- cannot alter a CHECK constraint, so evidence_events is rebuilt: the rows
-- are copied byte for byte (the append-only triggers are dropped only for
-- the copy, inside goose's transaction, and recreated).

-- +goose Up
CREATE TABLE evidence_events_v2 (
    id                TEXT    NOT NULL PRIMARY KEY,
    ts                INTEGER NOT NULL,
    receipt_id        TEXT    NOT NULL,
    kind              TEXT    NOT NULL CHECK (kind IN ('decision', 'outcome', 'chain_start', 'policy_activated', 'shadow_diff', 'checkpoint', 'retention')),
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
    hash              BLOB    NOT NULL,
    body              TEXT
);
INSERT INTO evidence_events_v2 (id, ts, receipt_id, kind, instance_id, principal_id, session_id, call_id, tool,
    decision, reasons, policy_revision, args_sha256, args, scope, trace_id, parent_receipt_id, error_code, outcome,
    chain_id, chain_seq, prev_hash, hash)
SELECT id, ts, receipt_id, kind, instance_id, principal_id, session_id, call_id, tool,
    decision, reasons, policy_revision, args_sha256, args, scope, trace_id, parent_receipt_id, error_code, outcome,
    chain_id, chain_seq, prev_hash, hash FROM evidence_events;
DROP TABLE evidence_events;
ALTER TABLE evidence_events_v2 RENAME TO evidence_events;

CREATE INDEX evidence_events_decision_ts ON evidence_events (ts, id) WHERE kind = 'decision';
CREATE INDEX evidence_events_principal ON evidence_events (principal_id, ts, id) WHERE kind = 'decision';
CREATE INDEX evidence_events_tool ON evidence_events (tool, ts, id) WHERE kind = 'decision';
CREATE INDEX evidence_events_session ON evidence_events (session_id, ts, id) WHERE kind = 'decision';
CREATE INDEX evidence_events_receipt ON evidence_events (receipt_id);
CREATE INDEX evidence_events_chain ON evidence_events (chain_id, chain_seq);
CREATE INDEX evidence_events_instance_chain ON evidence_events (instance_id, chain_id, chain_seq);
CREATE INDEX evidence_events_chain_start ON evidence_events (chain_id) WHERE kind = 'chain_start';
CREATE INDEX evidence_events_kind_ts ON evidence_events (kind, ts) WHERE kind NOT IN ('decision', 'outcome');

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

CREATE TABLE evidence_tree (
    leaf_index INTEGER NOT NULL PRIMARY KEY CHECK (leaf_index >= 0),
    event_id   TEXT    NOT NULL UNIQUE,
    event_ts   INTEGER NOT NULL,
    chain_id   TEXT    NOT NULL,
    chain_seq  INTEGER NOT NULL,
    UNIQUE (chain_id, chain_seq)
);
CREATE TABLE evidence_tree_hashes (
    idx  INTEGER NOT NULL PRIMARY KEY CHECK (idx >= 0),
    hash BLOB    NOT NULL CHECK (length(hash) = 32)
);
CREATE TABLE evidence_checkpoints (
    tree_size  INTEGER NOT NULL PRIMARY KEY CHECK (tree_size > 0),
    root_hash  BLOB    NOT NULL CHECK (length(root_hash) = 32),
    note       TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE evidence_rollup_hourly (
    hour         INTEGER NOT NULL,
    principal_id TEXT    NOT NULL,
    tool         TEXT    NOT NULL,
    decision     TEXT    NOT NULL,
    n            INTEGER NOT NULL,
    PRIMARY KEY (hour, principal_id, tool, decision)
);

-- +goose StatementBegin
CREATE TRIGGER evidence_tree_no_change BEFORE UPDATE ON evidence_tree
BEGIN SELECT RAISE(ABORT, 'evidence_tree is append-only'); END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER evidence_tree_no_delete BEFORE DELETE ON evidence_tree
BEGIN SELECT RAISE(ABORT, 'evidence_tree is append-only'); END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER evidence_tree_hashes_no_change BEFORE UPDATE ON evidence_tree_hashes
BEGIN SELECT RAISE(ABORT, 'evidence_tree_hashes is append-only'); END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER evidence_tree_hashes_no_delete BEFORE DELETE ON evidence_tree_hashes
BEGIN SELECT RAISE(ABORT, 'evidence_tree_hashes is append-only'); END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER evidence_checkpoints_no_change BEFORE UPDATE ON evidence_checkpoints
BEGIN SELECT RAISE(ABORT, 'evidence_checkpoints is append-only'); END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER evidence_checkpoints_no_delete BEFORE DELETE ON evidence_checkpoints
BEGIN SELECT RAISE(ABORT, 'evidence_checkpoints is append-only'); END;
-- +goose StatementEnd

-- +goose Down
DROP TABLE evidence_rollup_hourly;
DROP TABLE evidence_checkpoints;
DROP TABLE evidence_tree_hashes;
DROP TABLE evidence_tree;
