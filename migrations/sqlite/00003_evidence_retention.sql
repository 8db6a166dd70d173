-- Retention on the embedded store. SQLite has no partitions, so `gateway
-- evidence retain` deletes expired months row by row. The append-only
-- trigger still refuses every DELETE except of an event that (1) is a leaf
-- of the signed Merkle tree and (2) is older than the `before` bound of a
-- recorded retention event: exactly the gaps `evidence verify` accepts as
-- deliberate. UPDATE stays refused without exception.

-- +goose Up
DROP TRIGGER evidence_events_no_delete;

-- +goose StatementBegin
CREATE TRIGGER evidence_events_no_delete BEFORE DELETE ON evidence_events
WHEN NOT EXISTS (SELECT 1 FROM evidence_tree t WHERE t.event_id = old.id)
  OR old.ts >= coalesce((SELECT max(CAST(strftime('%s', json_extract(r.body, '$.before')) AS INTEGER) * 1000000)
                         FROM evidence_events r WHERE r.kind = 'retention'), 0)
BEGIN
    SELECT RAISE(ABORT, 'evidence_events is append-only: DELETE refused (only gateway evidence retain deletes, and only checkpointed events older than a recorded retention event)');
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER evidence_events_no_delete;

-- +goose StatementBegin
CREATE TRIGGER evidence_events_no_delete BEFORE DELETE ON evidence_events
BEGIN
    SELECT RAISE(ABORT, 'evidence_events is append-only: DELETE refused');
END;
-- +goose StatementEnd
