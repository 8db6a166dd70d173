// Package sqlite is the embedded evidence store for single-node and --dev
// use: one SQLite file in WAL mode with synchronous=FULL, exactly one writer
// connection (SQLite serializes writers anyway; one connection makes that
// explicit and lets the group-commit Writer batch) and a pool of read-only
// connections. Triggers make the table append-only, as in PostgreSQL.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/pressly/goose/v3"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/internal/rowcodec"
	"github.com/portcullis/portcullis/evidence/internal/schema"
	"github.com/portcullis/portcullis/migrations"
)

// versionTable is goose's bookkeeping table.
const versionTable = schema.VersionTable

// Store is the SQLite evidence.Store.
type Store struct {
	writer *sql.DB
	reader *sql.DB
	// q runs every read: the reader pool, or, for a store opened with
	// OpenReadOnly, its one read transaction (a single snapshot).
	q      querier
	insert *sql.Stmt
	// ro is set for a store opened with OpenReadOnly (readonly.go).
	ro *readOnly
	// leadPath is the file whose lock elects the checkpointer among every
	// process that opens the database (TryLead).
	leadPath string
	// lead is held by this Store's leader, so one Store never leads twice.
	lead sync.Mutex
	// quotas group-commits quota draws (controls.go).
	quotas evidence.QuotaBatch
	// reads are the reads both SQL stores share (evidence.SQLReads) over
	// this store's row loops.
	reads
}

var _ evidence.Store = (*Store)(nil)

// reads, embedded in Store, lends it the reads both SQL stores share.
type reads = evidence.SQLReads

// withReads is s with its reads bound to its query.
func withReads(s *Store) *Store {
	s.reads = evidence.NewSQLReads("evidence/sqlite", dialect, selectCols, evidence.SQLRowLoops{
		Events: s.query,
		Parked: func(ctx context.Context, q string, args ...any) ([]evidence.ParkedCall, error) {
			return parkedRows(s.q.QueryContext(ctx, q, args...))
		},
		IDs: func(ctx context.Context, q string, args ...any) ([]uuid.UUID, error) {
			return queryAll(ctx, s.q, q, args, scanID)
		},
		Chains: func(ctx context.Context, q string, args ...any) ([]evidence.ChainInfo, error) {
			return queryAll(ctx, s.q, q, args, scanChain)
		},
		Checkpoints: func(ctx context.Context, q string, args ...any) ([]evidence.StoredCheckpoint, error) {
			return queryAll(ctx, s.q, q, args, scanCheckpoint)
		},
		Leaves: func(ctx context.Context, q string, args ...any) ([]evidence.Leaf, error) {
			return queryAll(ctx, s.q, q, args, scanLeaf)
		},
		Int64: func(ctx context.Context, q string, args ...any) (int64, error) {
			var n int64
			err := s.q.QueryRowContext(ctx, q, args...).Scan(&n)
			return n, classify(err)
		},
	})
	return s
}

func dsn(path string, readOnly bool) (string, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return "", fmt.Errorf("evidence/sqlite: path %q must be non-empty and contain no '?' or '#'", path)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode(), nil
}

func openDB(path string, readOnly bool) (*sql.DB, error) {
	d, err := dsn(path, readOnly)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", d)
	if err != nil {
		return nil, fmt.Errorf("evidence/sqlite: open %s: %w", path, err)
	}
	return db, nil
}

// Open opens (creating if needed) the database file, applies pending
// migrations and returns the store.
func Open(ctx context.Context, path string) (*Store, error) {
	w, err := openDB(path, false)
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := openLocked(ctx, path, w); err != nil {
		w.Close()
		return nil, err
	}
	r, err := openDB(path, true)
	if err != nil {
		w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(8)
	r.SetMaxIdleConns(8)
	ph := strings.TrimSuffix(strings.Repeat("?, ", len(rowcodec.Columns)), ", ")
	ins, err := w.PrepareContext(ctx, "INSERT INTO evidence_events ("+strings.Join(rowcodec.Columns, ", ")+
		") VALUES ("+ph+") ON CONFLICT(id) DO NOTHING")
	if err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("evidence/sqlite: prepare insert: %w", classify(err))
	}
	return withReads(&Store{writer: w, reader: r, q: r, insert: ins, leadPath: path + "-lead"}), nil
}

// Migrate applies pending migrations to the database file.
func Migrate(ctx context.Context, path string) error {
	db, err := openDB(path, false)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	return migrateLocked(ctx, path, db)
}

// openLocked makes the first connection (whose pragmas switch a fresh file
// to WAL, which takes the file's exclusive lock and may answer
// SQLITE_BUSY at once rather than wait) and migrates, both under the
// migration lock, so processes opening one file at once take turns.
func openLocked(ctx context.Context, path string, db *sql.DB) error {
	unlock, err := lockFileWait(ctx, path+"-migrate")
	if err != nil {
		return fmt.Errorf("evidence/sqlite: migration lock %s-migrate: %w", path, err)
	}
	defer unlock()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("evidence/sqlite: open %s: %w", path, classify(err))
	}
	return migrator.Up(ctx, db)
}

// migrateLocked migrates while holding the file "<path>-migrate" locked, so
// gateway processes starting at once on a fresh file migrate one after the
// other (goose has no session locker for SQLite: each would otherwise read
// the old version and re-run what another just applied).
func migrateLocked(ctx context.Context, path string, db *sql.DB) error {
	unlock, err := lockFileWait(ctx, path+"-migrate")
	if err != nil {
		return fmt.Errorf("evidence/sqlite: migration lock %s-migrate: %w", path, err)
	}
	defer unlock()
	return migrator.Up(ctx, db)
}

// MigrationStatus reports the applied schema version (0 on a fresh file)
// and the newest this binary knows.
func MigrationStatus(ctx context.Context, path string) (current, latest int64, err error) {
	db, err := openDB(path, false)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	return migrator.Status(ctx, db)
}

// migrator runs the SQLite migrations, two of them Go.
var migrator = schema.Migrator{
	Name:    "evidence/sqlite",
	Dialect: goose.DialectSQLite3,
	Dir:     migrations.SQLiteDir,
	Options: func() ([]goose.ProviderOption, error) {
		return []goose.ProviderOption{goose.WithGoMigrations(
			holdsMigration(),        // 5: legal holds (holds.go)
			approvalKindMigration(), // 8: the approval event kind (controls.go)
		)}, nil
	},
	Classify: classify,
}

// classify wraps failures of the file or its lock with
// evidence.ErrUnavailable; constraint and trigger errors stay as they are.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
			sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_PROTOCOL,
			sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return fmt.Errorf("%w: %w", evidence.ErrUnavailable, err)
		}
		return err
	}
	if errors.Is(err, sql.ErrConnDone) || errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "database is closed") {
		return fmt.Errorf("%w: %w", evidence.ErrUnavailable, err)
	}
	return err
}

func nullable(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// Append inserts the events in one IMMEDIATE transaction on the single
// writer connection; existing ids are skipped, so retries are idempotent.
func (s *Store) Append(ctx context.Context, events []evidence.Event) error {
	if len(events) == 0 {
		return nil
	}
	if s.ro != nil {
		return errReadOnly
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("evidence/sqlite: append: %w", classify(err))
	}
	defer func() { _ = tx.Rollback() }()
	if err := s.insertEvents(ctx, tx, events); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("evidence/sqlite: commit %d events: %w", len(events), classify(err))
	}
	return nil
}

// insertEvents inserts events in tx with the prepared insert.
func (s *Store) insertEvents(ctx context.Context, tx *sql.Tx, events []evidence.Event) error {
	stmt := tx.StmtContext(ctx, s.insert)
	for _, e := range events {
		j, err := rowcodec.Encode(e.Reasons, e.Args, e.Scope, e.Outcome)
		if err != nil {
			return fmt.Errorf("evidence/sqlite: append: %w: event %s: %w", evidence.ErrInvalidEvent, e.ID, err)
		}
		rules, err := rowcodec.RuleIDsJSON(e.RuleIDs)
		if err != nil {
			return fmt.Errorf("evidence/sqlite: append: %w: event %s: %w", evidence.ErrInvalidEvent, e.ID, err)
		}
		var parent any
		if e.ParentReceiptID != nil {
			parent = e.ParentReceiptID.String()
		}
		prev, hash := e.PrevHash, e.Hash
		if prev == nil {
			prev = []byte{}
		}
		if hash == nil {
			hash = []byte{}
		}
		if _, err := stmt.ExecContext(ctx, e.Time.UnixMicro(), e.ID.String(), e.ReceiptID.String(), e.Kind,
			e.InstanceID, e.PrincipalID, e.SessionID, e.CallID, e.Tool, e.Decision, nullable(j.Reasons),
			e.PolicyRevision, e.ArgsSHA256, nullable(j.Args), nullable(j.Scope), e.TraceID, parent,
			e.ErrorCode, nullable(j.Outcome), e.ChainID.String(), e.ChainSeq, prev, hash, nullable(e.Body),
			nullable(rules)); err != nil {
			return fmt.Errorf("evidence/sqlite: append event %s: %w", e.ID, classify(err))
		}
	}
	return nil
}

var selectCols = strings.Join(rowcodec.Columns, ", ")

func (s *Store) query(ctx context.Context, q string, args ...any) ([]evidence.Event, error) {
	rows, err := s.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []evidence.Event
	for rows.Next() {
		var (
			e                   evidence.Event
			ts                  int64
			id, rid, chain      string
			parent              sql.NullString
			reasons, args, scop []byte
			outcome, body       []byte
			rules               []byte
		)
		if err := rows.Scan(&ts, &id, &rid, &e.Kind, &e.InstanceID, &e.PrincipalID, &e.SessionID,
			&e.CallID, &e.Tool, &e.Decision, &reasons, &e.PolicyRevision, &e.ArgsSHA256, &args,
			&scop, &e.TraceID, &parent, &e.ErrorCode, &outcome, &chain, &e.ChainSeq,
			&e.PrevHash, &e.Hash, &body, &rules); err != nil {
			return nil, classify(err)
		}
		if e.RuleIDs, err = rowcodec.DecodeRuleIDs(rules); err != nil {
			return nil, fmt.Errorf("event %s: %w", e.ID, err)
		}
		e.Time = time.UnixMicro(ts).UTC()
		if e.ID, err = uuid.Parse(id); err != nil {
			return nil, fmt.Errorf("stored id %q: %w", id, err)
		}
		if e.ReceiptID, err = uuid.Parse(rid); err != nil {
			return nil, fmt.Errorf("stored receipt_id %q: %w", rid, err)
		}
		if e.ChainID, err = uuid.Parse(chain); err != nil {
			return nil, fmt.Errorf("stored chain_id %q: %w", chain, err)
		}
		if parent.Valid {
			p, err := uuid.Parse(parent.String)
			if err != nil {
				return nil, fmt.Errorf("stored parent_receipt_id %q: %w", parent.String, err)
			}
			e.ParentReceiptID = &p
		}
		evidence.ScannedRow(&e, body)
		if e.Reasons, e.Args, e.Scope, e.Outcome, err = rowcodec.Decode(rowcodec.JSON{Reasons: reasons, Args: args, Scope: scop, Outcome: outcome}); err != nil {
			return nil, fmt.Errorf("event %s: %w", e.ID, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	return out, nil
}

// ChainHead returns the newest chain's last event of the instance.
func (s *Store) ChainHead(ctx context.Context, instanceID string) (uuid.UUID, int64, []byte, error) {
	var (
		chain string
		seq   int64
		hash  []byte
	)
	err := s.q.QueryRowContext(ctx, evidence.SQLChainHead, instanceID).Scan(&chain, &seq, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return uuid.Nil, 0, nil, nil
	}
	if err != nil {
		return uuid.Nil, 0, nil, fmt.Errorf("evidence/sqlite: chain head: %w", classify(err))
	}
	id, err := uuid.Parse(chain)
	if err != nil {
		return uuid.Nil, 0, nil, fmt.Errorf("evidence/sqlite: stored chain_id %q: %w", chain, err)
	}
	return id, seq, hash, nil
}

// Ping checks the file can be read.
func (s *Store) Ping(ctx context.Context) error {
	if s.ro != nil {
		var one int
		if err := s.q.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			return fmt.Errorf("evidence/sqlite: ping: %w", classify(err))
		}
		return nil
	}
	if err := s.reader.PingContext(ctx); err != nil {
		return fmt.Errorf("evidence/sqlite: ping: %w", classify(err))
	}
	return nil
}

// RawExec runs one statement on the writer connection outside the event
// model. It exists for tests that prove the database refuses changes.
func (s *Store) RawExec(ctx context.Context, q string) error {
	if s.ro != nil {
		return errReadOnly
	}
	_, err := s.writer.ExecContext(ctx, q)
	return err
}

// MigrateDownTo rolls the schema back to version v with the migrations'
// Down sections. It exists for tests that upgrade an older store.
func (s *Store) MigrateDownTo(ctx context.Context, v int64) error {
	if s.ro != nil {
		return errReadOnly
	}
	return migrator.DownTo(ctx, s.writer, v)
}

// Close closes both connection pools. For a store opened with
// OpenReadOnly it also reports whether the file changed while it was read
// (ErrChangedWhileRead): what was read may then not be one state of it.
func (s *Store) Close() error {
	if s.ro != nil {
		return s.ro.close(s.reader)
	}
	return errors.Join(s.insert.Close(), s.reader.Close(), s.writer.Close())
}
