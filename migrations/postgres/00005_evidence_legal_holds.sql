-- Issue 7: legal holds. Placing and releasing a hold are chained evidence
-- events (kinds legal_hold and legal_hold_release, content in `body`), so
-- they are append-only, tamper-evident and checkpointed like every event;
-- the current holds are derived from them, never stored mutably. The app
-- role needs nothing new: it already has SELECT and INSERT on
-- evidence_events and nothing else. `gateway evidence retain` keeps every
-- month an active hold overlaps (evidence.Retain, under the session
-- advisory lock portcullis.evidence_holds).
--
-- The embedded store's migration 5 is Go (evidence/sqlite/holds.go): SQLite
-- must rebuild the table to change a CHECK constraint.

-- +goose Up
ALTER TABLE evidence_events DROP CONSTRAINT evidence_events_kind_check;
ALTER TABLE evidence_events ADD CONSTRAINT evidence_events_kind_check CHECK (kind IN
    ('decision', 'outcome', 'chain_start', 'policy_activated', 'shadow_diff', 'checkpoint', 'retention',
     'legal_hold', 'legal_hold_release'));

-- +goose Down
ALTER TABLE evidence_events DROP CONSTRAINT evidence_events_kind_check;
ALTER TABLE evidence_events ADD CONSTRAINT evidence_events_kind_check CHECK (kind IN
    ('decision', 'outcome', 'chain_start', 'policy_activated', 'shadow_diff', 'checkpoint', 'retention'));
