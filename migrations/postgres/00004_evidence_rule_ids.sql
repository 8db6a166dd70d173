-- Issue 7: receipts carry the ids of the policy rules behind each decision
-- (wire.Decision rule_ids) and GET /v1/receipts filters on them (?rule=).
--
--  * rule_ids text[]: NULL for events without rule ids (every event written
--    before this migration, and every non-decision event). Adding a
--    nullable column without a default rewrites nothing, and the rows'
--    chain hashes are unchanged: the canonical encoding leaves rule ids out
--    when there are none.
--  * A GIN index, partial to decisions, serves `rule_ids @> ARRAY[$1]`: a
--    rule filter is an index lookup, not a scan. Created on the partitioned
--    parent, it cascades to every partition, present and future.
--  * The app role needs no new grant: evidence_grant_app grants INSERT and
--    SELECT on the whole table.

-- +goose Up
ALTER TABLE evidence_events ADD COLUMN rule_ids text[];
CREATE INDEX evidence_events_rule_ids ON evidence_events USING gin (rule_ids) WHERE kind = 'decision';

-- +goose Down
DROP INDEX evidence_events_rule_ids;
ALTER TABLE evidence_events DROP COLUMN rule_ids;
