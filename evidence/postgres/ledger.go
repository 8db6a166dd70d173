package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/portcullis/portcullis/evidence"
)

var _ evidence.Ledger = (*Store)(nil)

// checkpointerLock is the session advisory lock key of the single
// checkpointer among replicas.
const checkpointerLock = "portcullis.evidence.checkpointer"

// collect runs q and scans each row with scan: the one row loop of the
// store's reads. Its error is classified, not yet wrapped.
func collect[T any](ctx context.Context, db querier, scan pgx.RowToFunc[T], q string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, classify(err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, classify(err)
	}
	return out, nil
}

func scanChain(r pgx.CollectableRow) (evidence.ChainInfo, error) {
	var (
		id  pgtype.UUID
		max int64
	)
	err := r.Scan(&id, &max)
	return evidence.ChainInfo{ChainID: id.Bytes, MaxSeq: max}, err
}

// ActiveChains lists chains by their chain_start events, each with its
// highest sequence: index probes only (evidence_events_chain_start and
// evidence_events_chain), never a scan of the events.
func (s *Store) ActiveChains(ctx context.Context) ([]evidence.ChainInfo, error) {
	out, err := collect(ctx, s.q, scanChain, `SELECT c.chain_id,
		(SELECT e.chain_seq FROM evidence_events e WHERE e.chain_id = c.chain_id ORDER BY e.chain_seq DESC LIMIT 1)
		FROM evidence_events c WHERE c.kind = 'chain_start'`)
	if err != nil {
		return nil, fmt.Errorf("evidence/postgres: active chains: %w", err)
	}
	return out, nil
}

// ReadHashes returns stored tree hashes by index; a missing one is an
// error (tlog asks only for hashes that must exist).
func (s *Store) ReadHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error) {
	rows, err := s.q.Query(ctx, "SELECT idx, hash FROM evidence_tree_hashes WHERE idx = ANY($1)", indexes)
	if err != nil {
		return nil, fmt.Errorf("evidence/postgres: read tree hashes: %w", classify(err))
	}
	got := map[int64]tlog.Hash{}
	for rows.Next() {
		var (
			i int64
			b []byte
		)
		if err := rows.Scan(&i, &b); err != nil {
			rows.Close()
			return nil, fmt.Errorf("evidence/postgres: read tree hashes: %w", classify(err))
		}
		var h tlog.Hash
		copy(h[:], b)
		got[i] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("evidence/postgres: read tree hashes: %w", classify(err))
	}
	out := make([]tlog.Hash, len(indexes))
	for k, i := range indexes {
		h, ok := got[i]
		if !ok {
			return nil, fmt.Errorf("evidence/postgres: tree hash %d missing", i)
		}
		out[k] = h
	}
	return out, nil
}

// AppendTree commits one checkpointer pass in one transaction.
func (s *Store) AppendTree(ctx context.Context, a evidence.TreeAppend) error {
	if s.ro != nil {
		return errReadOnly
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("evidence/postgres: append tree: %w", classify(err))
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	leaves := make([][]any, len(a.Leaves))
	for i, l := range a.Leaves {
		leaves[i] = []any{l.Index, pgUUID(l.EventID), l.EventTime, pgUUID(l.ChainID), l.ChainSeq}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"evidence_tree"}, []string{"leaf_index", "event_id", "event_ts", "chain_id", "chain_seq"}, pgx.CopyFromRows(leaves)); err != nil {
		return fmt.Errorf("evidence/postgres: append leaves: %w", classify(err))
	}
	hashes := make([][]any, 0, len(a.Hashes))
	for i, h := range a.Hashes {
		hashes = append(hashes, []any{i, h[:]})
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"evidence_tree_hashes"}, []string{"idx", "hash"}, pgx.CopyFromRows(hashes)); err != nil {
		return fmt.Errorf("evidence/postgres: append tree hashes: %w", classify(err))
	}
	cp := a.Checkpoint
	if _, err := tx.Exec(ctx, "INSERT INTO evidence_checkpoints (tree_size, root_hash, note, created_at) VALUES ($1, $2, $3, $4)",
		cp.Size, cp.Root[:], cp.Note, cp.CreatedAt); err != nil {
		return fmt.Errorf("evidence/postgres: append checkpoint: %w", classify(err))
	}
	b := &pgx.Batch{}
	for k, n := range a.Rollup {
		b.Queue(`INSERT INTO evidence_rollup_hourly (hour, principal_id, tool, decision, n) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (hour, principal_id, tool, decision) DO UPDATE SET n = evidence_rollup_hourly.n + excluded.n`,
			k.Hour, k.PrincipalID, k.Tool, k.Decision, n)
	}
	for k, n := range a.RuleRollup {
		b.Queue(`INSERT INTO evidence_rollup_rules_hourly (hour, rule_id, n) VALUES ($1, $2, $3)
			ON CONFLICT (hour, rule_id) DO UPDATE SET n = evidence_rollup_rules_hourly.n + excluded.n`,
			k.Hour, k.RuleID, n)
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("evidence/postgres: rollup: %w", classify(err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("evidence/postgres: commit tree: %w", classify(err))
	}
	return nil
}

func scanCheckpoint(r pgx.CollectableRow) (evidence.StoredCheckpoint, error) {
	var (
		c    evidence.StoredCheckpoint
		root []byte
	)
	err := r.Scan(&c.Size, &root, &c.Note, &c.CreatedAt)
	copy(c.Root[:], root)
	c.CreatedAt = c.CreatedAt.UTC()
	return c, err
}

func scanLeaf(r pgx.CollectableRow) (evidence.Leaf, error) {
	var (
		l         evidence.Leaf
		id, chain pgtype.UUID
	)
	err := r.Scan(&l.Index, &id, &l.EventTime, &chain, &l.ChainSeq)
	l.EventID, l.ChainID, l.EventTime = id.Bytes, chain.Bytes, l.EventTime.UTC()
	return l, err
}

// Stats sums the hourly rollups (decisions, migration 00002; rule ids,
// migration 00006) into hour or day buckets: two range scans of their
// primary keys, never of the events.
func (s *Store) Stats(ctx context.Context, q evidence.StatsQuery) ([]evidence.StatsBucket, error) {
	cells, err := collect(ctx, s.q, scanRollupCell, `SELECT hour, principal_id, tool, decision, n FROM evidence_rollup_hourly
		WHERE hour >= $1 AND hour < $2 ORDER BY hour`, q.Since, q.Until)
	if err != nil {
		return nil, fmt.Errorf("evidence/postgres: stats: %w", err)
	}
	rules, err := collect(ctx, s.q, scanRuleCell, `SELECT hour, rule_id, n FROM evidence_rollup_rules_hourly
		WHERE hour >= $1 AND hour < $2 ORDER BY hour`, q.Since, q.Until)
	if err != nil {
		return nil, fmt.Errorf("evidence/postgres: rule stats: %w", err)
	}
	return evidence.Bucket(cells, rules, q), nil
}

// scanRollupCell reads one evidence_rollup_hourly row.
func scanRollupCell(r pgx.CollectableRow) (evidence.RollupCell, error) {
	var c evidence.RollupCell
	err := r.Scan(&c.Hour, &c.PrincipalID, &c.Tool, &c.Decision, &c.N)
	c.Hour = c.Hour.UTC()
	return c, err
}

// scanRuleCell reads one evidence_rollup_rules_hourly row.
func scanRuleCell(r pgx.CollectableRow) (evidence.RuleRollupCell, error) {
	var c evidence.RuleRollupCell
	err := r.Scan(&c.Hour, &c.RuleID, &c.N)
	c.Hour = c.Hour.UTC()
	return c, err
}

// TryLead takes the checkpointer's session advisory lock on a dedicated
// connection held until release; the lock dies with the connection, so a
// crashed leader never blocks the others.
func (s *Store) TryLead(ctx context.Context) (func(), bool, error) {
	if s.ro != nil {
		return nil, false, nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("evidence/postgres: checkpointer lock: %w", classify(err))
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1))", checkpointerLock).Scan(&ok); err != nil {
		conn.Release()
		return nil, false, fmt.Errorf("evidence/postgres: checkpointer lock: %w", classify(err))
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	release := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock(hashtext($1))", checkpointerLock); err != nil {
			// Never hand a connection holding the lock back to the pool.
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}
	return release, true, nil
}

var _ evidence.RollupReader = (*Store)(nil)

// RollupCells returns every stored hourly count, for Verify.
func (s *Store) RollupCells(ctx context.Context) ([]evidence.RollupCell, []evidence.RuleRollupCell, error) {
	cells, err := collect(ctx, s.q, scanRollupCell, `SELECT hour, principal_id, tool, decision, n FROM evidence_rollup_hourly ORDER BY hour`)
	if err != nil {
		return nil, nil, fmt.Errorf("evidence/postgres: rollup: %w", err)
	}
	rules, err := collect(ctx, s.q, scanRuleCell, `SELECT hour, rule_id, n FROM evidence_rollup_rules_hourly ORDER BY hour`)
	if err != nil {
		return nil, nil, fmt.Errorf("evidence/postgres: rule rollup: %w", err)
	}
	return cells, rules, nil
}
