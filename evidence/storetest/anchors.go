package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// hasProblem reports whether r names a problem of kind.
func hasProblem(r *evidence.Report, kind string) bool {
	for _, p := range r.Problems {
		if p.Kind == kind {
			return true
		}
	}
	return false
}

func verifyWith(t *testing.T, l evidence.Ledger, k keys, opts evidence.VerifyOptions) *evidence.Report {
	t.Helper()
	opts.VerifierKey = k.verifier
	r, err := evidence.Verify(ctxFor(t), l, opts)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if r.Passed != r.OK() {
		t.Fatalf("report ok = %v but %d problems", r.Passed, len(r.Problems))
	}
	return r
}

// tamperable returns the store's Tamperer or skips.
func tamperable(t *testing.T, s evidence.Store) Tamperer {
	t.Helper()
	tm, ok := s.(Tamperer)
	if !ok {
		t.Skipf("%T cannot tamper", s)
	}
	return tm
}

func tamper(t *testing.T, tm Tamperer, stmts ...string) {
	t.Helper()
	for _, stmt := range stmts {
		if err := tm.Tamper(ctxFor(t), stmt); err != nil {
			t.Fatalf("tamper %q: %v", stmt, err)
		}
	}
}

// testVerifyEmpty: a store with no evidence never verifies: neither a fresh
// one nor one whose every row (events, tree, checkpoints, counts) was
// deleted; with the checkpoint copied out earlier, the deletion is named.
func testVerifyEmpty(t *testing.T, open func(t *testing.T) evidence.Store) {
	t.Run("fresh", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		k := newKeys(t, "test.portcullis/evidence")
		r := verifyWith(t, ledger(t, s), k, evidence.VerifyOptions{})
		if r.OK() || !hasProblem(r, "empty_store") {
			t.Fatalf("Verify of an empty store = %+v, want empty_store", r)
		}
	})
	t.Run("all-rows-deleted", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		tm := tamperable(t, s)
		l := ledger(t, s)
		k := newKeys(t, "test.portcullis/evidence")
		c, err := evidence.NewCheckpointer(l, evidence.CheckpointerOptions{Signer: k.signer})
		if err != nil {
			t.Fatal(err)
		}
		fill(t, s, "inst-a", 3)
		pass(t, c, 7)
		cp, err := l.LatestCheckpoint(ctxFor(t))
		if err != nil {
			t.Fatal(err)
		}
		tamper(t, tm, "DELETE FROM evidence_events", "DELETE FROM evidence_tree", "DELETE FROM evidence_tree_hashes",
			"DELETE FROM evidence_checkpoints", "DELETE FROM evidence_rollup_hourly", "DELETE FROM evidence_rollup_rules_hourly")
		r := verifyWith(t, l, k, evidence.VerifyOptions{})
		if r.OK() || !hasProblem(r, "empty_store") || r.Anchored {
			t.Fatalf("Verify after every row was deleted = %+v, want empty_store, not anchored", r)
		}
		r = verifyWith(t, l, k, evidence.VerifyOptions{External: [][]byte{[]byte(cp.Note)}})
		if !hasProblem(r, "external_checkpoint") || !r.Anchored || r.AnchoredSize != 7 {
			t.Fatalf("Verify against the copied checkpoint = %+v, want external_checkpoint", r)
		}
	})
}

// testVerifyDeletedTail: events after the last signed checkpoint can be
// deleted without breaking the store's own consistency, and neither the
// store nor the checkpoint copies can tell; a chain head copied outside
// the database does.
func testVerifyDeletedTail(t *testing.T, open func(t *testing.T) evidence.Store) {
	s := open(t)
	tm := tamperable(t, s)
	l := ledger(t, s)
	k := newKeys(t, "test.portcullis/evidence")
	c, err := evidence.NewCheckpointer(l, evidence.CheckpointerOptions{Signer: k.signer})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-tail"})
	call := func(i int) {
		d := decision(t, fmt.Sprintf("tail-%d", i))
		o := evidence.Event{Kind: evidence.KindOutcome, ReceiptID: d.ID, Outcome: &wire.Outcome{Status: wire.StatusSucceeded}}
		if err := w.Append(ctx, d, o); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		call(i)
	}
	pass(t, c, 7)
	cp, err := l.LatestCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 5; i++ {
		call(i) // never checkpointed
	}
	chain, seq, hash, ok := w.Head()
	if !ok || seq != 11 {
		t.Fatalf("writer head = %v %d %x %v, want seq 11", chain, seq, hash, ok)
	}
	head, err := evidence.SignChainHead(k.signer, w.InstanceID(), chain, seq, hash, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	closeWriter(t, w)
	anchors := evidence.VerifyOptions{External: [][]byte{[]byte(cp.Note)}, Heads: [][]byte{[]byte(head.Note)}}
	if r := verifyWith(t, l, k, anchors); !r.OK() || !r.Anchored || r.AnchorHeads != 1 || r.NotCheckpointed != 4 {
		t.Fatalf("Verify before the deletion = %+v", r)
	}
	tamper(t, tm, fmt.Sprintf("DELETE FROM evidence_events WHERE chain_id = '%s' AND chain_seq > 7", chain))
	// The limit, stated by the test: without the head, nothing shows.
	if r := verifyWith(t, l, k, evidence.VerifyOptions{External: anchors.External}); !r.OK() {
		t.Fatalf("Verify with the checkpoint alone = %+v: the unsigned tail was expected to be invisible to it", r.Problems)
	}
	if r := verifyWith(t, l, k, evidence.VerifyOptions{}); !r.OK() || r.Anchored {
		t.Fatalf("Verify without anchors = %+v, want OK and not anchored (internal consistency only)", r)
	}
	r := verifyWith(t, l, k, anchors)
	if r.OK() || !hasProblem(r, "deleted_tail") {
		t.Fatalf("Verify with the chain head after the tail was deleted = %+v, want deleted_tail", r.Problems)
	}
	// A head signed by another key is not believed.
	other := newKeys(t, "test.portcullis/evidence")
	forged, err := evidence.SignChainHead(other.signer, "inst-tail", chain, seq, hash, head.Time)
	if err != nil {
		t.Fatal(err)
	}
	r = verifyWith(t, l, k, evidence.VerifyOptions{Heads: [][]byte{[]byte(forged.Note)}})
	if !hasProblem(r, "forged_checkpoint") || r.AnchorHeads != 0 {
		t.Fatalf("Verify with a forged head = %+v, want forged_checkpoint", r)
	}
}

// testVerifyRollups: the hourly counts GET /v1/evidence/stats serves are
// derived from the checkpointed decisions; changing or deleting them is
// named.
func testVerifyRollups(t *testing.T, open func(t *testing.T) evidence.Store) {
	for name, stmt := range map[string]string{
		"count-changed":      "UPDATE evidence_rollup_hourly SET n = n + 1",
		"count-deleted":      "DELETE FROM evidence_rollup_hourly",
		"rule-count-deleted": "DELETE FROM evidence_rollup_rules_hourly",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			tm := tamperable(t, s)
			l := ledger(t, s)
			if _, ok := l.(evidence.RollupReader); !ok {
				t.Skipf("%T keeps no rollups", s)
			}
			k := newKeys(t, "test.portcullis/evidence")
			c, err := evidence.NewCheckpointer(l, evidence.CheckpointerOptions{Signer: k.signer})
			if err != nil {
				t.Fatal(err)
			}
			w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-rollup"})
			for i := range 3 {
				d := decision(t, fmt.Sprintf("r-%d", i))
				d.RuleIDs = []string{"grant:role/agent/Exec", "exec.shape.echo"}
				if err := w.Append(ctxFor(t), d); err != nil {
					t.Fatal(err)
				}
			}
			closeWriter(t, w)
			pass(t, c, 4)
			if r := verifyWith(t, l, k, evidence.VerifyOptions{}); !r.OK() {
				t.Fatalf("Verify before = %+v", r.Problems)
			}
			tamper(t, tm, stmt)
			if r := verifyWith(t, l, k, evidence.VerifyOptions{}); r.OK() || !hasProblem(r, "rollup") {
				t.Fatalf("Verify after %q = %+v, want rollup", stmt, r.Problems)
			}
		})
	}
}

// testVerifyUnheadedChain: chains need no secret to write, so whoever can
// write the database can add a whole chain of made-up receipts that links
// and hashes correctly, under an instance id no gateway uses; the
// checkpointer would then sign it. What no such writer has is the
// checkpoint key that signs chain heads: with heads given, Verify lists
// every chain no head covers (itself, or a later chain of its instance
// linking back to it), so a restarted instance is not listed and the
// made-up chain is.
func testVerifyUnheadedChain(t *testing.T, open func(t *testing.T) evidence.Store) {
	s := open(t)
	l := ledger(t, s)
	k := newKeys(t, "test.portcullis/evidence")
	fill(t, s, "inst-a", 2) // inst-a's first process
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-a"})
	d := decision(t, "inst-a-restarted")
	if err := w.Append(ctxFor(t), d); err != nil {
		t.Fatal(err)
	}
	chain, seq, hash, ok := w.Head()
	if !ok {
		t.Fatal("writer has no head")
	}
	head, err := evidence.SignChainHead(k.signer, "inst-a", chain, seq, hash, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	closeWriter(t, w)
	heads := evidence.VerifyOptions{Heads: [][]byte{[]byte(head.Note)}}
	if r := verifyWith(t, l, k, heads); !r.OK() || len(r.UnheadedChains) != 0 {
		t.Fatalf("Verify of two chains of one headed instance = %+v, unheaded %+v; want OK, none unheaded", r.Problems, r.UnheadedChains)
	}
	forged := fill(t, s, "inst-made-up", 2)
	r := verifyWith(t, l, k, heads)
	if len(r.UnheadedChains) != 1 || r.UnheadedChains[0].InstanceID != "inst-made-up" || r.UnheadedChains[0].Events != 5 {
		t.Fatalf("Verify after a made-up chain (receipts %s, %s) was added: unheaded %+v, want the inst-made-up chain of 5 events",
			forged[0].ID, forged[1].ID, r.UnheadedChains)
	}
	// Without heads there is nothing to hold chains against: none listed.
	if r := verifyWith(t, l, k, evidence.VerifyOptions{}); len(r.UnheadedChains) != 0 {
		t.Fatalf("Verify without heads listed unheaded chains %+v", r.UnheadedChains)
	}
}
