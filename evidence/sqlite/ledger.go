package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/portcullis/portcullis/evidence"
)

var _ evidence.Ledger = (*Store)(nil)

// queryAll runs q and scans each row with scan: the one row loop of the
// ledger's reads. scan classifies its own Scan errors.
func queryAll[T any](ctx context.Context, db querier, q string, args []any, scan func(*sql.Rows) (T, error)) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, classify(rows.Err())
}

// scanChain reads a chain_id and max(chain_seq) row.
func scanChain(rows *sql.Rows) (evidence.ChainInfo, error) {
	var (
		id  string
		max int64
	)
	if err := rows.Scan(&id, &max); err != nil {
		return evidence.ChainInfo{}, classify(err)
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return evidence.ChainInfo{}, fmt.Errorf("stored chain_id %q: %w", id, err)
	}
	return evidence.ChainInfo{ChainID: u, MaxSeq: max}, nil
}

// ActiveChains lists chains by their chain_start events (index probes).
func (s *Store) ActiveChains(ctx context.Context) ([]evidence.ChainInfo, error) {
	cs, err := queryAll(ctx, s.q, `SELECT c.chain_id,
		(SELECT max(e.chain_seq) FROM evidence_events e WHERE e.chain_id = c.chain_id)
		FROM evidence_events c WHERE c.kind = 'chain_start'`, nil, scanChain)
	if err != nil {
		return nil, fmt.Errorf("evidence/sqlite: active chains: %w", err)
	}
	return cs, nil
}

// ReadHashes returns stored tree hashes by index.
func (s *Store) ReadHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for k, i := range indexes {
		var b []byte
		if err := s.q.QueryRowContext(ctx, "SELECT hash FROM evidence_tree_hashes WHERE idx = ?", i).Scan(&b); err != nil {
			return nil, fmt.Errorf("evidence/sqlite: tree hash %d: %w", i, classify(err))
		}
		copy(out[k][:], b)
	}
	return out, nil
}

// AppendTree commits one checkpointer pass in one transaction.
func (s *Store) AppendTree(ctx context.Context, a evidence.TreeAppend) error {
	if s.ro != nil {
		return errReadOnly
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("evidence/sqlite: append tree: %w", classify(err))
	}
	defer func() { _ = tx.Rollback() }()
	for _, l := range a.Leaves {
		if _, err := tx.ExecContext(ctx, "INSERT INTO evidence_tree (leaf_index, event_id, event_ts, chain_id, chain_seq) VALUES (?, ?, ?, ?, ?)",
			l.Index, l.EventID.String(), l.EventTime.UnixMicro(), l.ChainID.String(), l.ChainSeq); err != nil {
			return fmt.Errorf("evidence/sqlite: append leaf %d: %w", l.Index, classify(err))
		}
	}
	for i, h := range a.Hashes {
		if _, err := tx.ExecContext(ctx, "INSERT INTO evidence_tree_hashes (idx, hash) VALUES (?, ?)", i, h[:]); err != nil {
			return fmt.Errorf("evidence/sqlite: append tree hash %d: %w", i, classify(err))
		}
	}
	cp := a.Checkpoint
	if _, err := tx.ExecContext(ctx, "INSERT INTO evidence_checkpoints (tree_size, root_hash, note, created_at) VALUES (?, ?, ?, ?)",
		cp.Size, cp.Root[:], cp.Note, cp.CreatedAt.UnixMicro()); err != nil {
		return fmt.Errorf("evidence/sqlite: append checkpoint: %w", classify(err))
	}
	for k, n := range a.Rollup {
		if _, err := tx.ExecContext(ctx, `INSERT INTO evidence_rollup_hourly (hour, principal_id, tool, decision, n) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (hour, principal_id, tool, decision) DO UPDATE SET n = n + excluded.n`,
			k.Hour.UnixMicro(), k.PrincipalID, k.Tool, k.Decision, n); err != nil {
			return fmt.Errorf("evidence/sqlite: rollup: %w", classify(err))
		}
	}
	for k, n := range a.RuleRollup {
		if _, err := tx.ExecContext(ctx, `INSERT INTO evidence_rollup_rules_hourly (hour, rule_id, n) VALUES (?, ?, ?)
			ON CONFLICT (hour, rule_id) DO UPDATE SET n = n + excluded.n`,
			k.Hour.UnixMicro(), k.RuleID, n); err != nil {
			return fmt.Errorf("evidence/sqlite: rule rollup: %w", classify(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("evidence/sqlite: commit tree: %w", classify(err))
	}
	return nil
}

// scanCheckpoint reads an evidence_checkpoints row.
func scanCheckpoint(rows *sql.Rows) (evidence.StoredCheckpoint, error) {
	var (
		c    evidence.StoredCheckpoint
		root []byte
		at   int64
	)
	if err := rows.Scan(&c.Size, &root, &c.Note, &at); err != nil {
		return c, classify(err)
	}
	copy(c.Root[:], root)
	c.CreatedAt = time.UnixMicro(at).UTC()
	return c, nil
}

// scanLeaf reads an evidence_tree row.
func scanLeaf(rows *sql.Rows) (evidence.Leaf, error) {
	var (
		l         evidence.Leaf
		id, chain string
		ts        int64
	)
	if err := rows.Scan(&l.Index, &id, &ts, &chain, &l.ChainSeq); err != nil {
		return l, classify(err)
	}
	var err error
	if l.EventID, err = uuid.Parse(id); err != nil {
		return l, fmt.Errorf("stored event_id %q: %w", id, err)
	}
	if l.ChainID, err = uuid.Parse(chain); err != nil {
		return l, fmt.Errorf("stored chain_id %q: %w", chain, err)
	}
	l.EventTime = time.UnixMicro(ts).UTC()
	return l, nil
}

// Stats sums the hourly rollups (decisions, migration 00002; rule ids,
// migration 00006) into hour or day buckets: two range scans of their
// primary keys, never of the events.
func (s *Store) Stats(ctx context.Context, q evidence.StatsQuery) ([]evidence.StatsBucket, error) {
	cells, err := queryAll(ctx, s.q, `SELECT hour, principal_id, tool, decision, n FROM evidence_rollup_hourly
		WHERE hour >= ? AND hour < ? ORDER BY hour`, []any{q.Since.UnixMicro(), q.Until.UnixMicro()}, scanRollupCell)
	if err != nil {
		return nil, fmt.Errorf("evidence/sqlite: stats: %w", err)
	}
	rules, err := s.ruleStats(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("evidence/sqlite: rule stats: %w", err)
	}
	return evidence.Bucket(cells, rules, q), nil
}

// scanRollupCell reads one evidence_rollup_hourly row.
func scanRollupCell(rows *sql.Rows) (evidence.RollupCell, error) {
	var (
		c    evidence.RollupCell
		hour int64
	)
	if err := rows.Scan(&hour, &c.PrincipalID, &c.Tool, &c.Decision, &c.N); err != nil {
		return c, classify(err)
	}
	c.Hour = time.UnixMicro(hour).UTC()
	return c, nil
}

func (s *Store) ruleStats(ctx context.Context, q evidence.StatsQuery) ([]evidence.RuleRollupCell, error) {
	return queryAll(ctx, s.q, `SELECT hour, rule_id, n FROM evidence_rollup_rules_hourly
		WHERE hour >= ? AND hour < ? ORDER BY hour`, []any{q.Since.UnixMicro(), q.Until.UnixMicro()},
		func(rows *sql.Rows) (evidence.RuleRollupCell, error) {
			var (
				c    evidence.RuleRollupCell
				hour int64
			)
			if err := rows.Scan(&hour, &c.RuleID, &c.N); err != nil {
				return c, classify(err)
			}
			c.Hour = time.UnixMicro(hour).UTC()
			return c, nil
		})
}

// TryLead makes this Store the single checkpointer of the file, among
// every Store and every process that opens it: it holds an exclusive,
// non-blocking lock (flock) on the file "<path>-lead" until release. The
// kernel drops the lock when the process dies, so a crashed leader never
// blocks the next one.
func (s *Store) TryLead(context.Context) (func(), bool, error) {
	if s.ro != nil {
		return nil, false, nil
	}
	if !s.lead.TryLock() {
		return nil, false, nil
	}
	unlock, ok, err := lockFile(s.leadPath)
	if err != nil || !ok {
		s.lead.Unlock()
		if err != nil {
			return nil, false, fmt.Errorf("evidence/sqlite: checkpointer lock %s: %w", s.leadPath, err)
		}
		return nil, false, nil
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			unlock()
			s.lead.Unlock()
		})
	}, true, nil
}

var (
	_ evidence.RollupReader = (*Store)(nil)
	_ evidence.IndexChecker = (*Store)(nil)
)

// RollupCells returns every stored hourly count, for Verify.
func (s *Store) RollupCells(ctx context.Context) ([]evidence.RollupCell, []evidence.RuleRollupCell, error) {
	q := evidence.StatsQuery{Since: time.Unix(0, 0), Until: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}
	cells, err := queryAll(ctx, s.q, `SELECT hour, principal_id, tool, decision, n FROM evidence_rollup_hourly ORDER BY hour`, nil, scanRollupCell)
	if err != nil {
		return nil, nil, fmt.Errorf("evidence/sqlite: rollup: %w", err)
	}
	rules, err := s.ruleStats(ctx, q)
	if err != nil {
		return nil, nil, fmt.Errorf("evidence/sqlite: rule rollup: %w", err)
	}
	return cells, rules, nil
}

// CheckIndexes holds evidence_rule_ids, the index `?rule=` reads, against
// the rule_ids column the chain covers: a missing row hides a decision
// from rule queries, an extra one attributes a decision to a rule it does
// not name. Rows are matched on (rule_id, ts, event_id), as the trigger
// writes them.
func (s *Store) CheckIndexes(ctx context.Context) ([]evidence.Problem, error) {
	var problems []evidence.Problem
	for _, c := range []struct {
		q, what string
	}{{
		`SELECT e.id, j.value FROM evidence_events e, json_each(e.rule_ids) j
		WHERE e.kind = 'decision' AND e.rule_ids IS NOT NULL AND j.type = 'text'
		AND NOT EXISTS (SELECT 1 FROM evidence_rule_ids r WHERE r.rule_id = j.value AND r.ts = e.ts AND r.event_id = e.id)
		ORDER BY e.ts, e.id`,
		"decision %s names rule %q but the rule index has no row for it: `?rule=` queries miss it",
	}, {
		`SELECT r.event_id, r.rule_id FROM evidence_rule_ids r
		WHERE NOT EXISTS (SELECT 1 FROM evidence_events e, json_each(e.rule_ids) j
			WHERE e.id = r.event_id AND e.ts = r.ts AND e.kind = 'decision' AND j.type = 'text' AND j.value = r.rule_id)
		ORDER BY r.ts, r.event_id`,
		"the rule index lists decision %s under rule %q, which its event does not name",
	}} {
		n, err := s.indexProblems(ctx, c.q, c.what, &problems)
		if err != nil {
			return nil, err
		}
		if n > maxIndexProblems {
			problems = append(problems, evidence.Problem{Kind: "rule_index",
				Detail: fmt.Sprintf("%d more rule index rows like the above", n-maxIndexProblems)})
		}
	}
	return problems, nil
}

// maxIndexProblems bounds the rule index rows named in a report.
const maxIndexProblems = 5

func (s *Store) indexProblems(ctx context.Context, q, what string, out *[]evidence.Problem) (int, error) {
	rows, err := s.q.QueryContext(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("evidence/sqlite: check rule index: %w", classify(err))
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id, rule string
		if err := rows.Scan(&id, &rule); err != nil {
			return 0, fmt.Errorf("evidence/sqlite: check rule index: %w", classify(err))
		}
		n++
		if n <= maxIndexProblems {
			*out = append(*out, evidence.Problem{Kind: "rule_index", Detail: fmt.Sprintf(what, id, rule)})
		}
	}
	return n, classify(rows.Err())
}
