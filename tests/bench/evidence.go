package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/postgres"
	"github.com/portcullis/portcullis/wire"
)

// copyBatch is the rows of one raw COPY: the evidence writer's default
// MaxBatch, so the ceiling batches like the writer at its best.
const copyBatch = 500

// evidenceScenario: the evidence writer alone (in process, PostgreSQL),
// durable decision + outcome per receipt, vs a raw pgx CopyFrom of the
// same rows into a scratch table with the same columns and indexes.
func (r *runner) evidenceScenario(ctx context.Context) error {
	const scenario = "evidence"
	dbURL, dbName, err := r.env.createDB(ctx)
	if err != nil {
		return err
	}
	st, err := postgres.Open(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("open evidence store: %w", err)
	}
	defer st.Close()
	w := evidence.NewWriter(st, evidence.WriterOptions{InstanceID: "bench-evidence"})
	err = r.measure(ctx, scenario, system{
		name: "writer", unit: "events/s", perOp: 2, op: appendReceipt(w),
		pid: "self", cpuScope: "harness (writer + generator); PostgreSQL in its own column", db: dbName,
		clients: writerClients(r.cfg.clients),
		note:    "evidence.Writer.Append of a decision then its outcome (2 durable events per op), hash chains on",
	})
	if cerr := w.Close(context.WithoutCancel(ctx)); err == nil && cerr != nil {
		err = fmt.Errorf("close writer: %w", cerr)
	}
	if err != nil {
		return err
	}

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	cols, template, err := copyTemplate(ctx, pool)
	if err != nil {
		return err
	}
	clients := []int{1, 2}
	return r.measure(ctx, scenario, system{
		name: "raw-copyfrom", unit: "events/s", perOp: copyBatch, op: copyRows(pool, cols, template),
		pid: "self", cpuScope: "harness (generator); PostgreSQL in its own column", db: dbName,
		clients: clients, noOpen: true,
		note: fmt.Sprintf("pgx CopyFrom of %d evidence rows per transaction into a table LIKE evidence_events (same columns and indexes, not partitioned)", copyBatch),
	})
}

// writerClients is -clients plus 256 callers: the writer batches whatever
// queued during the previous commit, so its throughput grows with its
// callers, and 256 shows how close it gets to the COPY ceiling.
func writerClients(clients []int) []int {
	out := append([]int(nil), clients...)
	if !slices.Contains(out, 256) {
		out = append(out, 256)
	}
	return out
}

// appendReceipt appends an allowed call's decision, then its outcome, each
// durable before Append returns: what the gateway does for every call.
func appendReceipt(w *evidence.Writer) Op {
	args := json.RawMessage(`{"path":"/srv/work/f.txt"}`)
	scope := &wire.Scope{Backend: "fs", EnvNames: []string{}}
	return func(ctx context.Context) error {
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		d := evidence.Event{ID: id, Kind: evidence.KindDecision, Decision: wire.DecisionAllow, PrincipalID: benchPrincipal,
			SessionID: "bench", CallID: "call", Tool: "fs.read", Reasons: []string{}, PolicyRevision: "sha256:83d53ba08794",
			ArgsSHA256: "f6ca1fb5180f5968667c55b8b89f1a956fb41182f7e1b807c7a51da44bc928b9", Args: args, Scope: scope,
			TraceID: "db0ab1cdb937f17a131ecad2fd8cb5aa"}
		if err := w.Append(ctx, d); err != nil {
			return err
		}
		o := evidence.Event{Kind: evidence.KindOutcome, ReceiptID: id, Outcome: &wire.Outcome{Status: wire.StatusSucceeded,
			Backend: "fs", DurationMS: 1, OutputSHA256: "2cfce64efb92b310cf0628c0901580ba6b4762152a224099acff125dc678a4ff"}}
		return w.Append(ctx, o)
	}
}

// copyTemplate creates the scratch table and reads back rows the writer
// wrote, JSON columns kept as their exact bytes, as the rows to copy.
func copyTemplate(ctx context.Context, pool *pgxpool.Pool) ([]string, [][]any, error) {
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_copy (LIKE evidence_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)`); err != nil {
		return nil, nil, fmt.Errorf("create scratch table: %w", err)
	}
	rows, err := pool.Query(ctx, `SELECT * FROM evidence_events WHERE kind IN ('decision', 'outcome') ORDER BY ts, id LIMIT 1000`)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	fds := rows.FieldDescriptions()
	cols := make([]string, len(fds))
	for i, fd := range fds {
		cols[i] = fd.Name
	}
	var template [][]any
	for rows.Next() {
		raw := rows.RawValues()
		vals, err := rows.Values()
		if err != nil {
			return nil, nil, err
		}
		for i, fd := range fds {
			// json columns (OID 114; text and binary forms are the same
			// bytes): copy the exact text, as the store does.
			if fd.DataTypeOID == 114 && raw[i] != nil {
				vals[i] = json.RawMessage(append([]byte(nil), raw[i]...))
			}
		}
		template = append(template, vals)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if len(template) == 0 {
		return nil, nil, errors.New("no evidence rows to copy (the writer run wrote none)")
	}
	return cols, template, nil
}

// copyRows returns an Op that copies copyBatch rows in one transaction,
// each with a fresh id and the current time.
func copyRows(pool *pgxpool.Pool, cols []string, template [][]any) Op {
	idCol, tsCol := -1, -1
	for i, c := range cols {
		switch c {
		case "id":
			idCol = i
		case "ts":
			tsCol = i
		}
	}
	return func(ctx context.Context) error {
		if idCol < 0 || tsCol < 0 {
			return errors.New("evidence_events has no id or ts column")
		}
		batch := make([][]any, copyBatch)
		now := time.Now().UTC()
		for i := range batch {
			row := append([]any(nil), template[i%len(template)]...)
			id, err := uuid.NewV7()
			if err != nil {
				return err
			}
			row[idCol], row[tsCol] = id, now
			batch[i] = row
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"bench_copy"}, cols, pgx.CopyFromRows(batch)); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
}
