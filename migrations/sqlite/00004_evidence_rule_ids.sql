-- Issue 7, embedded store: receipts carry the ids of the policy rules behind
-- each decision, and GET /v1/receipts filters on them (?rule=).
--
--  * rule_ids TEXT: the JSON array of the decision's rule ids, NULL when
--    there are none (every event written before this migration). Chain
--    hashes are unchanged for those: the canonical encoding leaves rule ids
--    out when there are none.
--  * evidence_rule_ids is the index of that column: one row per (rule id,
--    decision), filled by a trigger from json_each as each decision is
--    inserted, keyed (rule_id, ts, event_id) so `?rule=` is a range scan
--    of its primary key, not a json_each over every decision. It is derived
--    data (the evidence is the column, which the chain covers): the store
--    never writes it, the triggers do. Updates are refused; a row goes
--    only with its event (retention), through the AFTER DELETE trigger.

-- +goose Up
ALTER TABLE evidence_events ADD COLUMN rule_ids TEXT;

CREATE TABLE evidence_rule_ids (
    rule_id  TEXT    NOT NULL,
    ts       INTEGER NOT NULL,
    event_id TEXT    NOT NULL,
    PRIMARY KEY (rule_id, ts, event_id)
) WITHOUT ROWID;

-- +goose StatementBegin
CREATE TRIGGER evidence_rule_ids_index AFTER INSERT ON evidence_events
WHEN new.kind = 'decision' AND new.rule_ids IS NOT NULL
BEGIN
    INSERT OR IGNORE INTO evidence_rule_ids (rule_id, ts, event_id)
    SELECT DISTINCT j.value, new.ts, new.id FROM json_each(new.rule_ids) j WHERE j.type = 'text';
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER evidence_rule_ids_unindex AFTER DELETE ON evidence_events
WHEN old.rule_ids IS NOT NULL
BEGIN
    DELETE FROM evidence_rule_ids WHERE event_id = old.id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER evidence_rule_ids_no_update BEFORE UPDATE ON evidence_rule_ids
BEGIN
    SELECT RAISE(ABORT, 'evidence_rule_ids is derived from evidence_events: UPDATE refused');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER evidence_rule_ids_no_delete BEFORE DELETE ON evidence_rule_ids
WHEN EXISTS (SELECT 1 FROM evidence_events e WHERE e.id = old.event_id)
BEGIN
    SELECT RAISE(ABORT, 'evidence_rule_ids is derived from evidence_events: DELETE refused while the event exists');
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER evidence_rule_ids_index;
DROP TRIGGER evidence_rule_ids_unindex;
DROP TABLE evidence_rule_ids;
ALTER TABLE evidence_events DROP COLUMN rule_ids;
