package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"

	"github.com/portcullis/portcullis/evidence"
)

// errReadOnly refuses every write to a store opened with OpenReadOnly.
var errReadOnly = errors.New("evidence/sqlite: store opened read-only for verification")

// querier is what reads need: *sql.DB (the reader pool) or *sql.Tx (the
// one snapshot of a read-only store).
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// sqliteHeader starts every SQLite database file.
var sqliteHeader = []byte("SQLite format 3\x00")

// readOnly is the state of a store opened with OpenReadOnly.
type readOnly struct {
	path      string
	conn      *sql.Conn
	tx        *sql.Tx
	immutable bool
	before    os.FileInfo
}

// OpenReadOnly opens an existing store for `gateway evidence verify`: it
// never creates, migrates or changes anything. A missing file, a 0-byte
// file, a file that is not an SQLite database or one without the evidence
// schema is evidence.ErrNoStore; a schema older or newer than this binary's
// is evidence.ErrSchemaMismatch. Every read of the returned store sees one
// snapshot (one read transaction). Writes fail.
//
// How the file is opened depends on its WAL file. When "<path>-wal" is
// absent (a gateway stopped cleanly, so every commit is in the main file)
// the file is opened immutable: SQLite then creates no -wal or -shm file
// and takes no lock, and Close checks the file did not change meanwhile (a
// gateway starting on it), so the snapshot is exact or the result is
// refused with ErrChangedWhileRead. When the WAL exists (a gateway runs,
// or died) it holds committed evidence that must be read: the file is
// opened mode=ro, which reads the WAL through its shared-memory index
// "<path>-shm" and writes neither the database nor the WAL. SQLite creates
// that index when it is missing, which happens only when a WAL was left
// without one.
func OpenReadOnly(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: no database path", evidence.ErrNoStore)
	}
	before, err := checkFile(path)
	if err != nil {
		return nil, err
	}
	_, werr := os.Lstat(path + "-wal")
	immutable := errors.Is(werr, os.ErrNotExist)
	if werr != nil && !immutable {
		return nil, fmt.Errorf("evidence/sqlite: %s-wal: %w", path, werr)
	}
	q := url.Values{}
	q.Set("mode", "ro")
	if immutable {
		q.Set("immutable", "1")
	}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "query_only(1)")
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: path}).EscapedPath(), RawQuery: q.Encode()}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return nil, fmt.Errorf("evidence/sqlite: open %s read-only: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	fail := func(err error) (*Store, error) {
		_ = db.Close()
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fail(fmt.Errorf("evidence/sqlite: open %s read-only: %w", path, classify(err)))
	}
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		_ = conn.Close()
		return fail(fmt.Errorf("evidence/sqlite: open %s read-only: %w", path, classify(err)))
	}
	ro := &readOnly{path: path, conn: conn, tx: tx, immutable: immutable, before: before}
	s := withReads(&Store{reader: db, q: tx, ro: ro, leadPath: path + "-lead"})
	if err := s.checkSchema(ctx); err != nil {
		_ = ro.close(db)
		return nil, err
	}
	return s, nil
}

// checkFile refuses what is no store before SQLite sees it: SQLite would
// create a missing file, and would treat a 0-byte one as an empty
// database (and delete its WAL).
func checkFile(path string) (os.FileInfo, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist", evidence.ErrNoStore, path)
	}
	if err != nil {
		return nil, fmt.Errorf("evidence/sqlite: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", evidence.ErrNoStore, path)
	}
	if fi.Size() == 0 {
		return nil, fmt.Errorf("%w: %s is empty (0 bytes)", evidence.ErrNoStore, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("evidence/sqlite: %w", err)
	}
	defer f.Close()
	head := make([]byte, len(sqliteHeader))
	if _, err := io.ReadFull(f, head); err != nil || !bytes.Equal(head, sqliteHeader) {
		return nil, fmt.Errorf("%w: %s is not an SQLite database", evidence.ErrNoStore, path)
	}
	return fi, nil
}

// checkSchema reads the applied migrations without goose (which would
// create its table) and compares them with this binary's.
func (s *Store) checkSchema(ctx context.Context) error {
	var n int
	if err := s.q.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, 'evidence_events')",
		versionTable).Scan(&n); err != nil {
		return fmt.Errorf("evidence/sqlite: %s: %w", s.ro.path, classify(err))
	}
	if n != 2 {
		return fmt.Errorf("%w: %s holds no Portcullis evidence schema", evidence.ErrNoStore, s.ro.path)
	}
	rows, err := s.q.QueryContext(ctx, evidence.SQLVersions(versionTable))
	if err != nil {
		return fmt.Errorf("evidence/sqlite: schema version: %w", classify(err))
	}
	defer rows.Close()
	applied, err := evidence.AppliedVersions(rows)
	if err != nil {
		return fmt.Errorf("evidence/sqlite: schema version: %w", classify(err))
	}
	known, err := migrator.Versions(s.reader)
	if err != nil {
		return err
	}
	return evidence.CheckSchema(s.ro.path, applied, known)
}

// ErrChangedWhileRead means an immutable read-only store's file changed
// while it was being read: the verification saw no single state of it.
var ErrChangedWhileRead = errors.New("evidence/sqlite: the database changed while it was read (a gateway started on it?); verify again")

func (ro *readOnly) close(db *sql.DB) error {
	err := errors.Join(ro.tx.Rollback(), ro.conn.Close(), db.Close())
	if errors.Is(err, sql.ErrTxDone) {
		err = nil
	}
	if ro.immutable {
		// A writer that opened the file meanwhile commits to a new WAL
		// first, so the main file stays the state that was read until a
		// WAL checkpoint changes it: that is what is checked.
		after, serr := os.Stat(ro.path)
		if serr != nil || !os.SameFile(ro.before, after) || after.Size() != ro.before.Size() ||
			!after.ModTime().Equal(ro.before.ModTime()) {
			return errors.Join(err, ErrChangedWhileRead)
		}
	}
	return err
}
