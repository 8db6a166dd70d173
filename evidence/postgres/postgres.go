// Package postgres is the PostgreSQL evidence store: append-only events in a
// monthly-partitioned table, written with COPY inside one transaction per
// group commit, guarded by triggers that refuse UPDATE, DELETE and
// TRUNCATE. Several gateway replicas can share one database.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/internal/rowcodec"
	"github.com/portcullis/portcullis/evidence/internal/schema"
	"github.com/portcullis/portcullis/migrations"
)

// versionTable is goose's bookkeeping table.
const versionTable = schema.VersionTable

// partitionInterval is how often the store makes sure next month's
// partition exists while the gateway runs for months.
const partitionInterval = 6 * time.Hour

// Store is the PostgreSQL evidence.Store.
type Store struct {
	pool *pgxpool.Pool
	// q runs every read: the pool, or, for a store opened with
	// OpenReadOnly, its one REPEATABLE READ READ ONLY transaction.
	q   querier
	ro  *readOnly
	log *slog.Logger
	// reads are the reads both SQL stores share (evidence.SQLReads) over
	// this store's row loops.
	reads

	// quotas group-commits quota draws (controls.go).
	quotas evidence.QuotaBatch

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

var _ evidence.Store = (*Store)(nil)

// reads, embedded in Store, lends it the reads both SQL stores share.
type reads = evidence.SQLReads

// newStore is a store on pool that reads through q, its reads bound.
func newStore(pool *pgxpool.Pool, q querier, ro *readOnly) *Store {
	s := &Store{pool: pool, q: q, ro: ro, log: slog.New(slog.DiscardHandler), stop: make(chan struct{})}
	s.reads = evidence.NewSQLReads("evidence/postgres", dialect, selectCols,
		evidence.SQLRowLoops{
			Events: s.query, Parked: s.parked, IDs: s.queryIDs,
			Chains: func(ctx context.Context, q string, args ...any) ([]evidence.ChainInfo, error) {
				return collect(ctx, s.q, scanChain, q, args...)
			},
			Checkpoints: func(ctx context.Context, q string, args ...any) ([]evidence.StoredCheckpoint, error) {
				return collect(ctx, s.q, scanCheckpoint, q, args...)
			},
			Leaves: func(ctx context.Context, q string, args ...any) ([]evidence.Leaf, error) {
				return collect(ctx, s.q, scanLeaf, q, args...)
			},
			Int64: func(ctx context.Context, q string, args ...any) (int64, error) {
				var n int64
				err := s.q.QueryRow(ctx, q, args...).Scan(&n)
				return n, classify(err)
			},
		})
	return s
}

// Open connects, applies pending migrations (safe with several replicas
// starting at once: goose holds a session advisory lock), makes sure the
// current and next month have partitions, and returns the store.
// Connection failures wrap evidence.ErrUnavailable.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("evidence/postgres: parse database url: %w", redactURLError(err))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("evidence/postgres: connect: %w", classify(err))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("evidence/postgres: connect: %w", classify(err))
	}
	if err := migrate(ctx, cfg.ConnConfig); err != nil {
		pool.Close()
		return nil, err
	}
	s := newStore(pool, pool, nil)
	if err := s.EnsurePartitions(ctx, time.Now()); err != nil {
		pool.Close()
		return nil, err
	}
	s.wg.Add(1)
	go s.maintain()
	return s, nil
}

// SetLogger sends the store's own warnings (partition maintenance, run
// claims) to l instead of discarding them. Call it before using the store.
func (s *Store) SetLogger(l *slog.Logger) {
	if l != nil {
		s.log = l
	}
}

// Migrate applies pending migrations (for `gateway migrate`).
func Migrate(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("evidence/postgres: parse database url: %w", redactURLError(err))
	}
	return migrate(ctx, cfg)
}

// MigrationStatus reports the applied schema version and the newest one
// this binary knows (for `gateway doctor`). current is 0 on a fresh
// database.
func MigrationStatus(ctx context.Context, url string) (current, latest int64, err error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return 0, 0, fmt.Errorf("evidence/postgres: parse database url: %w", redactURLError(err))
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	return migrator.Status(ctx, db)
}

// migrator runs the PostgreSQL migrations.
var migrator = schema.Migrator{
	Name:    "evidence/postgres",
	Dialect: goose.DialectPostgres,
	Dir:     migrations.PostgresDir,
	Options: func() ([]goose.ProviderOption, error) {
		// Poll the advisory lock every second (goose's default is 5 s)
		// for up to 5 minutes, so replicas that lost the race start
		// quickly.
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
		if err != nil {
			return nil, fmt.Errorf("evidence/postgres: migration locker: %w", err)
		}
		return []goose.ProviderOption{goose.WithSessionLocker(locker)}, nil
	},
	Classify: classify,
}

func migrate(ctx context.Context, cfg *pgx.ConnConfig) error {
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	return migrator.Up(ctx, db)
}

// redactURLError keeps a database password out of parse errors, which
// pgx may quote in full.
func redactURLError(err error) error {
	return errors.New(strings.SplitN(err.Error(), "://", 2)[0] + ": invalid connection string")
}

// EnsurePartitions creates the partitions for the month of at and the next
// one. Open calls it, and the store repeats it every few hours; rows for a
// month without its partition land in the DEFAULT partition, so an insert
// never fails for lack of one.
func (s *Store) EnsurePartitions(ctx context.Context, at time.Time) error {
	if s.ro != nil {
		return errReadOnly
	}
	if _, err := s.pool.Exec(ctx, "SELECT evidence_ensure_partitions($1, 2)", at); err != nil {
		return fmt.Errorf("evidence/postgres: ensure partitions: %w", classify(err))
	}
	return nil
}

func (s *Store) maintain() {
	defer s.wg.Done()
	t := time.NewTicker(partitionInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if err := s.EnsurePartitions(ctx, time.Now()); err != nil {
				s.log.Warn("evidence partition maintenance failed", "error", err.Error())
			}
			cancel()
		}
	}
}

// classify wraps connectivity failures with evidence.ErrUnavailable and
// leaves server-reported errors (bad data, constraint, trigger) as they are.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		// Whatever the server said while connecting (down, refusing,
		// unknown database, bad credentials), the store is unreachable.
		return fmt.Errorf("%w: %w", evidence.ErrUnavailable, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", "53", "57", "58": // connection, resources, operator intervention, system
			return fmt.Errorf("%w: %w", evidence.ErrUnavailable, err)
		}
		return err
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w: %w", evidence.ErrUnavailable, err)
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

// ruleIDs is the rule_ids column value: NULL when there are none.
func ruleIDs(ids []string) any {
	if len(ids) == 0 {
		return nil
	}
	return ids
}

func rowValues(e evidence.Event) ([]any, error) {
	j, err := rowcodec.Encode(e.Reasons, e.Args, e.Scope, e.Outcome)
	if err != nil {
		return nil, fmt.Errorf("event %s: %w", e.ID, err)
	}
	parent := pgtype.UUID{}
	if e.ParentReceiptID != nil {
		parent = pgUUID(*e.ParentReceiptID)
	}
	prev, hash := e.PrevHash, e.Hash
	if prev == nil {
		prev = []byte{}
	}
	if hash == nil {
		hash = []byte{}
	}
	var body []byte
	if len(e.Body) > 0 {
		body = e.Body
	}
	return []any{
		evidence.NormalizeTime(e.Time), pgUUID(e.ID), pgUUID(e.ReceiptID), e.Kind, e.InstanceID,
		e.PrincipalID, e.SessionID, e.CallID, e.Tool, e.Decision, j.Reasons, e.PolicyRevision,
		e.ArgsSHA256, j.Args, j.Scope, e.TraceID, parent, e.ErrorCode, j.Outcome,
		pgUUID(e.ChainID), e.ChainSeq, prev, hash, body, ruleIDs(e.RuleIDs),
	}, nil
}

// Append writes the events with COPY in one transaction. When some already
// exist (a retry) or the result of the commit is unknown, it re-sends them
// once as INSERT … ON CONFLICT DO NOTHING, so a retry never duplicates.
func (s *Store) Append(ctx context.Context, events []evidence.Event) error {
	if len(events) == 0 {
		return nil
	}
	if s.ro != nil {
		return errReadOnly
	}
	rows, err := eventRows(events)
	if err != nil {
		return fmt.Errorf("evidence/postgres: append: %w", err)
	}
	err = s.copyIn(ctx, rows)
	if err == nil {
		return nil
	}
	if !isUniqueViolation(err) && !errors.Is(classify(err), evidence.ErrUnavailable) {
		return fmt.Errorf("evidence/postgres: append %d events: %w", len(events), err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("evidence/postgres: append %d events: %w", len(events), classify(err))
	}
	if err2 := s.insertIdempotent(ctx, rows); err2 != nil {
		return fmt.Errorf("evidence/postgres: append %d events (retry after %v): %w", len(events), err, classify(err2))
	}
	return nil
}

// eventRows are the COPY rows of events.
func eventRows(events []evidence.Event) ([][]any, error) {
	rows := make([][]any, len(events))
	for i, e := range events {
		v, err := rowValues(e)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", evidence.ErrInvalidEvent, err)
		}
		rows[i] = v
	}
	return rows, nil
}

func (s *Store) copyIn(ctx context.Context, rows [][]any) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"evidence_events"}, rowcodec.Columns, pgx.CopyFromRows(rows)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

var insertSQL = func() string {
	ph := make([]string, len(rowcodec.Columns))
	for i := range ph {
		ph[i] = "$" + strconv.Itoa(i+1)
	}
	return "INSERT INTO evidence_events (" + strings.Join(rowcodec.Columns, ", ") + ") VALUES (" +
		strings.Join(ph, ", ") + ") ON CONFLICT DO NOTHING"
}()

func (s *Store) insertIdempotent(ctx context.Context, rows [][]any) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	b := &pgx.Batch{}
	for _, r := range rows {
		b.Queue(insertSQL, r...)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

var selectCols = strings.Join(rowcodec.Columns, ", ")

func scanEvents(rows pgx.Rows) ([]evidence.Event, error) {
	defer rows.Close()
	var out []evidence.Event
	for rows.Next() {
		var (
			e                      evidence.Event
			id, rid, parent, chain pgtype.UUID
			j                      rowcodec.JSON
			body                   []byte
		)
		if err := rows.Scan(&e.Time, &id, &rid, &e.Kind, &e.InstanceID, &e.PrincipalID, &e.SessionID,
			&e.CallID, &e.Tool, &e.Decision, &j.Reasons, &e.PolicyRevision, &e.ArgsSHA256, &j.Args,
			&j.Scope, &e.TraceID, &parent, &e.ErrorCode, &j.Outcome, &chain, &e.ChainSeq,
			&e.PrevHash, &e.Hash, &body, &e.RuleIDs); err != nil {
			return nil, err
		}
		if len(e.RuleIDs) == 0 {
			e.RuleIDs = nil
		}
		e.Time = e.Time.UTC()
		e.ID, e.ReceiptID, e.ChainID = id.Bytes, rid.Bytes, chain.Bytes
		if parent.Valid {
			p := uuid.UUID(parent.Bytes)
			e.ParentReceiptID = &p
		}
		evidence.ScannedRow(&e, body)
		var err error
		if e.Reasons, e.Args, e.Scope, e.Outcome, err = rowcodec.Decode(j); err != nil {
			return nil, fmt.Errorf("event %s: %w", e.ID, err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func (s *Store) query(ctx context.Context, sql string, args ...any) ([]evidence.Event, error) {
	rows, err := s.q.Query(ctx, sql, args...)
	if err != nil {
		return nil, classify(err)
	}
	evs, err := scanEvents(rows)
	if err != nil {
		return nil, classify(err)
	}
	return evs, nil
}

// queryIDs runs q, whose one column is a uuid, and collects the ids: the
// row loop of the id listings. Its error is classified, not yet wrapped.
func (s *Store) queryIDs(ctx context.Context, q string, args ...any) ([]uuid.UUID, error) {
	return collect(ctx, s.q, func(r pgx.CollectableRow) (uuid.UUID, error) {
		var id pgtype.UUID
		err := r.Scan(&id)
		return id.Bytes, err
	}, q, args...)
}

// ChainHead returns the newest chain's last event of the instance.
func (s *Store) ChainHead(ctx context.Context, instanceID string) (uuid.UUID, int64, []byte, error) {
	var (
		chain pgtype.UUID
		seq   int64
		hash  []byte
	)
	err := s.q.QueryRow(ctx, sqlChainHead, instanceID).Scan(&chain, &seq, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, 0, nil, nil
	}
	if err != nil {
		return uuid.Nil, 0, nil, fmt.Errorf("evidence/postgres: chain head: %w", classify(err))
	}
	return chain.Bytes, seq, hash, nil
}

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if s.ro != nil {
		var one int
		if err := s.q.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			return fmt.Errorf("evidence/postgres: ping: %w", classify(err))
		}
		return nil
	}
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("evidence/postgres: ping: %w", classify(err))
	}
	return nil
}

// RawExec runs one statement outside the event model. It exists for tests
// that prove the database itself refuses changes to evidence.
func (s *Store) RawExec(ctx context.Context, sql string) error {
	if s.ro != nil {
		return errReadOnly
	}
	_, err := s.pool.Exec(ctx, sql)
	return err
}

// MigrateDownTo rolls the schema back to version v with the migrations'
// Down sections. It exists for tests that upgrade an older store.
func (s *Store) MigrateDownTo(ctx context.Context, v int64) error {
	if s.ro != nil {
		return errReadOnly
	}
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	return migrator.DownTo(ctx, db, v)
}

// Close stops maintenance and closes the pool.
func (s *Store) Close() error {
	s.stopOnce.Do(func() {
		close(s.stop)
		s.wg.Wait()
		if s.ro != nil {
			s.ro.close()
		}
		s.pool.Close()
	})
	return nil
}
