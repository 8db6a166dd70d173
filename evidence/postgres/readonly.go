package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/portcullis/portcullis/evidence"
)

// errReadOnly refuses every write to a store opened with OpenReadOnly.
var errReadOnly = errors.New("evidence/postgres: store opened read-only for verification")

// querier is what reads need: the pool, or the one transaction of a
// read-only store.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readOnly is the state of a store opened with OpenReadOnly.
type readOnly struct {
	conn *pgxpool.Conn
	tx   pgx.Tx
}

func (ro *readOnly) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = ro.tx.Rollback(ctx)
	ro.conn.Release()
}

// OpenReadOnly opens an existing store for `gateway evidence verify`: no
// migrations, no partition upkeep, nothing written. Every connection has
// default_transaction_read_only on, and every read runs in one
// REPEATABLE READ READ ONLY transaction, so verification sees one
// snapshot even while gateways append. A database without the evidence
// schema is evidence.ErrNoStore; one whose applied migrations differ from
// this binary's is evidence.ErrSchemaMismatch. A role with SELECT on the
// evidence tables is enough.
func OpenReadOnly(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("evidence/postgres: parse database url: %w", redactURLError(err))
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	cfg.ConnConfig.RuntimeParams["application_name"] = "portcullis-evidence-verify"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("evidence/postgres: connect: %w", classify(err))
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		pool.Close()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "3D000" { // invalid_catalog_name
			return nil, fmt.Errorf("%w: database %q does not exist", evidence.ErrNoStore, cfg.ConnConfig.Database)
		}
		return nil, fmt.Errorf("evidence/postgres: connect: %w", classify(err))
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		conn.Release()
		pool.Close()
		return nil, fmt.Errorf("evidence/postgres: begin read-only transaction: %w", classify(err))
	}
	s := newStore(pool, tx, &readOnly{conn: conn, tx: tx})
	if err := s.checkSchema(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// checkSchema compares the applied migrations with this binary's, reading
// goose's table itself (goose would create it).
func (s *Store) checkSchema(ctx context.Context) error {
	var events, versions bool
	if err := s.q.QueryRow(ctx, "SELECT to_regclass('evidence_events') IS NOT NULL, to_regclass($1) IS NOT NULL", versionTable).
		Scan(&events, &versions); err != nil {
		return fmt.Errorf("evidence/postgres: schema: %w", classify(err))
	}
	if !events || !versions {
		return fmt.Errorf("%w: the database holds no Portcullis evidence schema (tables evidence_events and %s)", evidence.ErrNoStore, versionTable)
	}
	rows, err := s.q.Query(ctx, evidence.SQLVersions(versionTable))
	if err != nil {
		return fmt.Errorf("evidence/postgres: schema version: %w", classify(err))
	}
	applied, err := evidence.AppliedVersions(rows)
	rows.Close()
	if err != nil {
		return fmt.Errorf("evidence/postgres: schema version: %w", classify(err))
	}
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	known, err := migrator.Versions(db)
	if err != nil {
		return err
	}
	return evidence.CheckSchema("the database", applied, known)
}
