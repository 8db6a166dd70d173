-- Issue 7: evidence that compliance teams can trust.
--  * New event kinds beside decisions and outcomes: policy_activated and
--    shadow_diff (policy lifecycle), checkpoint and retention (integrity
--    maintenance). Their content is a generic `body` (json: exact bytes, so
--    chain hashes recompute).
--  * The RFC 6962 Merkle tree over every event, kept in append-only tables
--    apart from the events: evidence_tree maps leaf index <-> event,
--    evidence_tree_hashes holds the tlog stored hashes, evidence_checkpoints
--    the signed checkpoints. Only the elected checkpointer appends to them.
--  * evidence_rollup_hourly: counts of decisions per hour, principal, tool
--    and decision, maintained by the checkpointer as it appends leaves, so
--    GET /v1/evidence/stats never scans the events. Derived data, not
--    evidence: it is the one table that is updated in place.

-- +goose Up
ALTER TABLE evidence_events ADD COLUMN body json;
ALTER TABLE evidence_events DROP CONSTRAINT evidence_events_kind_check;
ALTER TABLE evidence_events ADD CONSTRAINT evidence_events_kind_check CHECK (kind IN
    ('decision', 'outcome', 'chain_start', 'policy_activated', 'shadow_diff', 'checkpoint', 'retention'));
CREATE INDEX evidence_events_chain_start ON evidence_events (chain_id) WHERE kind = 'chain_start';
CREATE INDEX evidence_events_kind_ts ON evidence_events (kind, ts) WHERE kind NOT IN ('decision', 'outcome');

CREATE TABLE evidence_tree (
    leaf_index bigint NOT NULL PRIMARY KEY CHECK (leaf_index >= 0),
    event_id   uuid   NOT NULL UNIQUE,
    event_ts   timestamptz NOT NULL,
    chain_id   uuid   NOT NULL,
    chain_seq  bigint NOT NULL,
    UNIQUE (chain_id, chain_seq)
);

CREATE TABLE evidence_tree_hashes (
    idx  bigint NOT NULL PRIMARY KEY CHECK (idx >= 0),
    hash bytea  NOT NULL CHECK (length(hash) = 32)
);

CREATE TABLE evidence_checkpoints (
    tree_size  bigint      NOT NULL PRIMARY KEY CHECK (tree_size > 0),
    root_hash  bytea       NOT NULL CHECK (length(root_hash) = 32),
    note       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE evidence_rollup_hourly (
    hour         timestamptz NOT NULL,
    principal_id text        NOT NULL,
    tool         text        NOT NULL,
    decision     text        NOT NULL,
    n            bigint      NOT NULL,
    PRIMARY KEY (hour, principal_id, tool, decision)
);

CREATE TRIGGER evidence_tree_append_only BEFORE UPDATE OR DELETE ON evidence_tree
    FOR EACH ROW EXECUTE FUNCTION evidence_reject_change();
CREATE TRIGGER evidence_tree_no_truncate BEFORE TRUNCATE ON evidence_tree
    FOR EACH STATEMENT EXECUTE FUNCTION evidence_reject_change();
CREATE TRIGGER evidence_tree_hashes_append_only BEFORE UPDATE OR DELETE ON evidence_tree_hashes
    FOR EACH ROW EXECUTE FUNCTION evidence_reject_change();
CREATE TRIGGER evidence_tree_hashes_no_truncate BEFORE TRUNCATE ON evidence_tree_hashes
    FOR EACH STATEMENT EXECUTE FUNCTION evidence_reject_change();
CREATE TRIGGER evidence_checkpoints_append_only BEFORE UPDATE OR DELETE ON evidence_checkpoints
    FOR EACH ROW EXECUTE FUNCTION evidence_reject_change();
CREATE TRIGGER evidence_checkpoints_no_truncate BEFORE TRUNCATE ON evidence_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION evidence_reject_change();

-- +goose Down
DROP TABLE evidence_rollup_hourly;
DROP TABLE evidence_checkpoints;
DROP TABLE evidence_tree_hashes;
DROP TABLE evidence_tree;
DROP INDEX evidence_events_kind_ts;
DROP INDEX evidence_events_chain_start;
ALTER TABLE evidence_events DROP CONSTRAINT evidence_events_kind_check;
ALTER TABLE evidence_events ADD CONSTRAINT evidence_events_kind_check CHECK (kind IN ('decision', 'outcome', 'chain_start'));
ALTER TABLE evidence_events DROP COLUMN body;
