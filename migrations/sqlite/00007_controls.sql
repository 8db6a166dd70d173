-- Issue 15: human approval and quotas (contract sections 9 and 10); see
-- migrations/postgres/00007_controls.sql. The kind 'approval' is added by
-- the Go migration 8 (evidence/sqlite/controls.go): SQLite rebuilds the
-- table to change a CHECK constraint.

-- +goose Up
CREATE TABLE portcullis_quota_counters (
    key          TEXT    NOT NULL,
    window_s     INTEGER NOT NULL CHECK (window_s > 0),
    window_start INTEGER NOT NULL,
    used         INTEGER NOT NULL CHECK (used >= 0),
    quota_limit  INTEGER NOT NULL,
    PRIMARY KEY (key, window_s, window_start)
) WITHOUT ROWID;

CREATE TABLE portcullis_approvals (
    id              TEXT    PRIMARY KEY,
    receipt_id      TEXT    NOT NULL UNIQUE,
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'expired', 'stopped')),
    principal       TEXT    NOT NULL,
    principal_id    TEXT    NOT NULL,
    tool            TEXT    NOT NULL,
    call_id         TEXT    NOT NULL DEFAULT '',
    session_id      TEXT    NOT NULL DEFAULT '',
    input           BLOB,
    args_sha256     TEXT    NOT NULL,
    args            TEXT,
    policy_revision TEXT    NOT NULL,
    reason          TEXT    NOT NULL,
    approvers       TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    decided_by      TEXT    NOT NULL DEFAULT '',
    decided_at      INTEGER,
    decision_reason TEXT    NOT NULL DEFAULT '',
    response        TEXT
);
CREATE INDEX portcullis_approvals_status ON portcullis_approvals (status, created_at);

-- +goose Down
DROP TABLE portcullis_approvals;
DROP TABLE portcullis_quota_counters;
