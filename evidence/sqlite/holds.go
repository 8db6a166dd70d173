package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"

	"github.com/pressly/goose/v3"

	"github.com/portcullis/portcullis/evidence"
)

var _ evidence.HoldStore = (*Store)(nil)

// holdSems serializes legal hold locks within this process, per file (on
// systems without flock, lockFileWait does not).
var holdSems sync.Map // path -> chan struct{}

// LockHolds takes the legal hold lock: an exclusive flock on
// "<file>-holds", waited for until ctx ends, shared by every process on
// the file. It dies with the process.
func (s *Store) LockHolds(ctx context.Context) (func(), error) {
	if s.ro != nil {
		return nil, errReadOnly
	}
	path := strings.TrimSuffix(s.leadPath, "-lead") + "-holds"
	v, _ := holdSems.LoadOrStore(path, make(chan struct{}, 1))
	sem := v.(chan struct{})
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("evidence/sqlite: legal hold lock %s: %w", path, ctx.Err())
	}
	unlock, err := lockFileWait(ctx, path)
	if err != nil {
		<-sem
		return nil, fmt.Errorf("evidence/sqlite: legal hold lock %s: %w", path, err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			unlock()
			<-sem
		})
	}, nil
}

// Migration 5 (legal holds) is Go, not SQL: SQLite cannot alter the CHECK
// constraint on evidence_events.kind, so the table is rebuilt, and the
// rebuild must carry whatever columns earlier migrations gave the table
// (a fixed column list in SQL would drop any added since). It
//   - rebuilds evidence_events from its own stored CREATE statement with
//     the kinds legal_hold and legal_hold_release allowed, copying every
//     row byte for byte and recreating its indexes and triggers;
//   - replaces the DELETE trigger so that, on top of migration 00003's
//     rule (only checkpointed events older than a recorded retention
//     event), it refuses to delete any event inside the range of a legal
//     hold that no legal_hold_release names: the database itself refuses
//     to drop held evidence, whoever issues the statement.
//
// PostgreSQL's migration 5 is migrations/postgres/00005_evidence_legal_holds.sql.
const holdsVersion = 5

const oldKinds = `'checkpoint', 'retention')`

const newKinds = `'checkpoint', 'retention', 'legal_hold', 'legal_hold_release')`

// deleteTrigger is migration 00003's trigger plus the legal hold rule.
const deleteTrigger = `CREATE TRIGGER evidence_events_no_delete BEFORE DELETE ON evidence_events
WHEN NOT EXISTS (SELECT 1 FROM evidence_tree t WHERE t.event_id = old.id)
  OR old.ts >= coalesce((SELECT max(CAST(strftime('%s', json_extract(r.body, '$.before')) AS INTEGER) * 1000000)
                         FROM evidence_events r WHERE r.kind = 'retention'), 0)
  OR EXISTS (SELECT 1 FROM evidence_events h
             WHERE h.kind = 'legal_hold'
               AND old.ts >= CAST(strftime('%s', json_extract(h.body, '$.since')) AS INTEGER) * 1000000
               AND (json_extract(h.body, '$.until') IS NULL
                    OR old.ts < CAST(strftime('%s', json_extract(h.body, '$.until')) AS INTEGER) * 1000000)
               AND NOT EXISTS (SELECT 1 FROM evidence_events r
                               WHERE r.kind = 'legal_hold_release'
                                 AND json_extract(r.body, '$.hold_id') = json_extract(h.body, '$.hold_id')))
BEGIN
    SELECT RAISE(ABORT, 'evidence_events is append-only: DELETE refused (only gateway evidence retain deletes, and only checkpointed events older than a recorded retention event and under no active legal hold)');
END`

// retentionDeleteTrigger is migration 00003's trigger (for Down).
const retentionDeleteTrigger = `CREATE TRIGGER evidence_events_no_delete BEFORE DELETE ON evidence_events
WHEN NOT EXISTS (SELECT 1 FROM evidence_tree t WHERE t.event_id = old.id)
  OR old.ts >= coalesce((SELECT max(CAST(strftime('%s', json_extract(r.body, '$.before')) AS INTEGER) * 1000000)
                         FROM evidence_events r WHERE r.kind = 'retention'), 0)
BEGIN
    SELECT RAISE(ABORT, 'evidence_events is append-only: DELETE refused (only gateway evidence retain deletes, and only checkpointed events older than a recorded retention event)');
END`

func holdsMigration() *goose.Migration {
	return kindsMigration(holdsVersion, oldKinds, newKinds, deleteTrigger, retentionDeleteTrigger)
}

// kindsMigration is the Go migration version that rebuilds evidence_events
// (rebuildEvents) with its kind list changed from from to to and the
// DELETE trigger upTrigger, and down again with downTrigger.
func kindsMigration(version int64, from, to, upTrigger, downTrigger string) *goose.Migration {
	return goose.NewGoMigration(version,
		&goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
			return rebuildEvents(ctx, tx, from, to, upTrigger)
		}},
		&goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
			return rebuildEvents(ctx, tx, to, from, downTrigger)
		}},
	)
}

// rebuildEvents recreates evidence_events with its kind list changed from
// from to to, inside goose's transaction: every column, row, index and
// trigger is kept except the DELETE trigger, which becomes delTrigger.
func rebuildEvents(ctx context.Context, tx *sql.Tx, from, to, delTrigger string) error {
	var create string
	if err := tx.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'evidence_events'`).Scan(&create); err != nil {
		return fmt.Errorf("read evidence_events schema: %w", err)
	}
	if strings.Count(create, from) != 1 {
		return fmt.Errorf("evidence_events schema has no kind list ending %s: %s", from, create)
	}
	open := strings.Index(create, "(")
	if open < 0 {
		return fmt.Errorf("evidence_events schema is not a CREATE TABLE: %s", create)
	}
	create = "CREATE TABLE evidence_events_v5 " + strings.Replace(create[open:], from, to, 1)
	// Its own indexes and triggers go with it; triggers of other tables
	// that read it would break the RENAME (SQLite re-parses them against
	// the missing table), so they are dropped for the rebuild and
	// recreated unchanged.
	rows, err := tx.QueryContext(ctx, `SELECT type, name, sql FROM sqlite_master
		WHERE type IN ('index', 'trigger') AND sql IS NOT NULL
		  AND (tbl_name = 'evidence_events' OR (type = 'trigger' AND sql LIKE '%evidence_events%'))
		ORDER BY type, name`)
	if err != nil {
		return fmt.Errorf("read evidence_events indexes and triggers: %w", err)
	}
	var before, after []string
	for rows.Next() {
		var typ, name, stmt string
		if err := rows.Scan(&typ, &name, &stmt); err != nil {
			rows.Close()
			return fmt.Errorf("read evidence_events indexes and triggers: %w", err)
		}
		if typ == "trigger" && name == "evidence_events_no_delete" {
			continue
		}
		if typ == "trigger" {
			before = append(before, "DROP TRIGGER IF EXISTS "+quoteIdent(name))
		}
		after = append(after, stmt)
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("read evidence_events indexes and triggers: %w", err)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read evidence_events indexes and triggers: %w", err)
	}
	stmts := append(before,
		create,
		"INSERT INTO evidence_events_v5 SELECT * FROM evidence_events",
		"DROP TABLE evidence_events",
		"ALTER TABLE evidence_events_v5 RENAME TO evidence_events",
	)
	stmts = append(stmts, after...)
	stmts = append(stmts, delTrigger)
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("rebuild evidence_events: %.60s...: %w", q, err)
		}
	}
	return nil
}

func quoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
