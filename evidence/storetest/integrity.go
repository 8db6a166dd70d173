package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// Tamperer is implemented by test wrappers of a store that can run a
// statement with the append-only protection bypassed, as a database owner
// could: the suite uses it to prove Verify names each kind of tampering.
type Tamperer interface {
	Tamper(ctx context.Context, stmt string) error
}

type keys struct {
	signer   note.Signer
	verifier string
}

func newKeys(t *testing.T, name string) keys {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	derived, err := evidence.VerifierKeyFromSigningKey(skey)
	if err != nil || derived != vkey {
		t.Fatalf("VerifierKeyFromSigningKey = %q, %v; want %q", derived, err, vkey)
	}
	return keys{signer: s, verifier: vkey}
}

// fill appends n calls (decision + outcome) through a Writer and returns
// the decisions.
func fill(t *testing.T, s evidence.Store, inst string, n int) []evidence.Event {
	t.Helper()
	ctx := ctxFor(t)
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: inst})
	var ds []evidence.Event
	for i := range n {
		d := decision(t, fmt.Sprintf("%s-%d", inst, i))
		o := evidence.Event{Kind: evidence.KindOutcome, ReceiptID: d.ID, Outcome: &wire.Outcome{Status: wire.StatusSucceeded, Backend: "process"}}
		if err := w.Append(ctx, d, o); err != nil {
			t.Fatalf("Append: %v", err)
		}
		ds = append(ds, d)
	}
	closeWriter(t, w)
	return ds
}

func ledger(t *testing.T, s evidence.Store) evidence.Ledger {
	t.Helper()
	l, ok := s.(evidence.Ledger)
	if !ok {
		t.Fatalf("%T does not implement evidence.Ledger", s)
	}
	return l
}

func pass(t *testing.T, c *evidence.Checkpointer, want int64) {
	t.Helper()
	size, err := c.Pass(ctxFor(t))
	if err != nil || size != want {
		t.Fatalf("Pass = %d, %v; want %d", size, err, want)
	}
}

func verify(t *testing.T, l evidence.Ledger, k keys, external ...[]byte) *evidence.Report {
	t.Helper()
	r, err := evidence.Verify(ctxFor(t), l, evidence.VerifyOptions{VerifierKey: k.verifier, External: external})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return r
}

// testCheckpoints: passes append every event as a leaf, in chain order,
// sign checkpoints that verify, copy them outside the database, and serve
// inclusion proofs that verify offline, while forged proofs do not.
func testCheckpoints(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	l := ledger(t, s)
	k := newKeys(t, "test.portcullis/evidence")
	dir := t.TempDir()
	c, err := evidence.NewCheckpointer(l, evidence.CheckpointerOptions{Signer: k.signer, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	pass(t, c, 0) // empty store: no checkpoint
	ds := fill(t, s, "inst-a", 5)
	pass(t, c, 11) // chain_start + 5 × (decision, outcome)
	pass(t, c, 11) // nothing new: no new checkpoint
	first, err := l.LatestCheckpoint(ctx)
	if err != nil || first.Size != 11 {
		t.Fatalf("LatestCheckpoint = %d, %v", first.Size, err)
	}
	fill(t, s, "inst-b", 3)
	fill(t, s, "inst-a", 2) // a second chain of inst-a, linked to the first
	pass(t, c, 11+7+5)
	r := verify(t, l, k, []byte(first.Note))
	if !r.OK() || r.Leaves != 23 || r.Events != 23 || r.Checkpoints != 2 || r.Chains != 3 || r.NotCheckpointed != 0 {
		t.Fatalf("Verify = %+v", r)
	}
	// A new checkpointer (another leader after failover) continues the tree.
	c2, err := evidence.NewCheckpointer(l, evidence.CheckpointerOptions{Signer: k.signer})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, "inst-b", 1)
	pass(t, c2, 23+3)
	if r := verify(t, l, k); !r.OK() || r.Checkpoints != 3 {
		t.Fatalf("Verify after failover = %+v", r)
	}
	if got, err := evidence.OpenCheckpoint(readFile(t, dir, "checkpoint-23"), k.verifier); err != nil || got.Size != 23 {
		t.Errorf("checkpoint copy outside the database = %+v, %v", got, err)
	}
	if got := string(readFile(t, dir, "latest")); !strings.HasPrefix(got, "test.portcullis/evidence\n23\n") {
		t.Errorf("latest copy = %q", got)
	}
	// Inclusion proofs.
	p, err := evidence.ProveEvent(ctx, l, ds[2].ID)
	if err != nil {
		t.Fatalf("ProveEvent: %v", err)
	}
	if err := evidence.VerifyInclusion(p, k.verifier); err != nil {
		t.Fatalf("VerifyInclusion of a genuine proof: %v", err)
	}
	if p.TreeSize != 26 || len(p.Proof) == 0 {
		t.Errorf("proof = %+v", p)
	}
	other := newKeys(t, "test.portcullis/evidence")
	forge := map[string]func(p *evidence.InclusionProof){
		"path hash flipped": func(p *evidence.InclusionProof) { p.Proof[0] = flipHex(p.Proof[0]) },
		"other event":       func(p *evidence.InclusionProof) { p.EventHash = flipHex(p.EventHash) },
		"leaf index":        func(p *evidence.InclusionProof) { p.LeafIndex ^= 1 },
		"leaf hash":         func(p *evidence.InclusionProof) { p.LeafHash = flipHex(p.LeafHash) },
		"tree size":         func(p *evidence.InclusionProof) { p.TreeSize++ },
		"path shortened":    func(p *evidence.InclusionProof) { p.Proof = p.Proof[1:] },
		"checkpoint re-signed by another key": func(p *evidence.InclusionProof) {
			cp, err := evidence.OpenCheckpoint([]byte(p.Checkpoint), k.verifier)
			if err != nil {
				t.Fatal(err)
			}
			forged, err := evidence.SignCheckpoint(other.signer, cp.Size, cp.Root)
			if err != nil {
				t.Fatal(err)
			}
			p.Checkpoint = forged.Note
		},
		"checkpoint text edited": func(p *evidence.InclusionProof) {
			p.Checkpoint = strings.Replace(p.Checkpoint, "\n26\n", "\n25\n", 1)
			p.TreeSize = 25
		},
	}
	for name, f := range forge {
		q := p
		q.Proof = append([]string(nil), p.Proof...)
		f(&q)
		if err := evidence.VerifyInclusion(q, k.verifier); !errors.Is(err, evidence.ErrProofInvalid) {
			t.Errorf("VerifyInclusion(%s) = %v, want ErrProofInvalid", name, err)
		}
	}
	if _, err := evidence.ProveEvent(ctx, l, newID(t)); !errors.Is(err, evidence.ErrNotFound) {
		t.Errorf("ProveEvent(unknown) = %v, want ErrNotFound", err)
	}
}

func flipHex(s string) string {
	b, _ := hex.DecodeString(s)
	if len(b) > 0 {
		b[0] ^= 1
	}
	return hex.EncodeToString(b)
}

// testTampering: each kind of change to stored evidence is reported by
// name. Each case starts from its own checkpointed store.
func testTampering(t *testing.T, open func(t *testing.T) evidence.Store) {
	cases := []struct {
		name string
		// tamper returns the statements to run given the decisions.
		tamper   func(t *testing.T, ds []evidence.Event, k keys, l evidence.Ledger) []string
		wantKind string
		// others is how many receipts a second instance ("inst-b")
		// writes before the checkpoint, for the splice case.
		others int
	}{
		{"altered row", func(t *testing.T, ds []evidence.Event, _ keys, _ evidence.Ledger) []string {
			return []string{fmt.Sprintf("UPDATE evidence_events SET tool = 'Forged' WHERE id = '%s'", ds[1].ID)}
		}, "altered_event", 0},
		{"missing sequence", func(t *testing.T, ds []evidence.Event, _ keys, _ evidence.Ledger) []string {
			return []string{fmt.Sprintf("DELETE FROM evidence_events WHERE id = '%s'", ds[1].ID)}
		}, "missing_sequence", 0},
		{"deleted tail", func(t *testing.T, ds []evidence.Event, _ keys, _ evidence.Ledger) []string {
			return []string{fmt.Sprintf("DELETE FROM evidence_events WHERE receipt_id = '%s'", ds[len(ds)-1].ID)}
		}, "deleted_tail", 0},
		{"forged checkpoint", func(t *testing.T, _ []evidence.Event, _ keys, l evidence.Ledger) []string {
			cp, err := l.LatestCheckpoint(ctxFor(t))
			if err != nil {
				t.Fatal(err)
			}
			forged, err := evidence.SignCheckpoint(newKeys(t, "test.portcullis/evidence").signer, cp.Size, cp.Root)
			if err != nil {
				t.Fatal(err)
			}
			return []string{fmt.Sprintf("UPDATE evidence_checkpoints SET note = '%s' WHERE tree_size = %d", forged.Note, cp.Size)}
		}, "forged_checkpoint", 0},
		// Two decisions of one chain swap places (d1 sits two after d2
		// in the chain: each receipt is a decision and an outcome).
		{"reordered", func(t *testing.T, ds []evidence.Event, _ keys, _ evidence.Ledger) []string {
			return []string{
				fmt.Sprintf("UPDATE evidence_events SET chain_seq = -chain_seq WHERE id = '%s'", ds[2].ID),
				fmt.Sprintf("UPDATE evidence_events SET chain_seq = chain_seq + 2 WHERE id = '%s'", ds[1].ID),
				fmt.Sprintf("UPDATE evidence_events SET chain_seq = -chain_seq - 2 WHERE id = '%s'", ds[2].ID),
			}
		}, "altered_event", 0},
		// Another instance's chain, hashed and linked by its own writer,
		// is relabelled onto the tail of inst-a's chain, as if inst-a had
		// made those calls.
		{"spliced from another instance", func(t *testing.T, ds []evidence.Event, _ keys, _ evidence.Ledger) []string {
			return []string{
				"UPDATE evidence_events SET chain_id = (SELECT chain_id FROM evidence_events WHERE instance_id = 'inst-a' LIMIT 1), " +
					"chain_seq = chain_seq + 9, instance_id = 'inst-a' WHERE instance_id = 'inst-b'",
			}
		}, "altered_event", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			tm, ok := s.(Tamperer)
			if !ok {
				t.Skipf("%T cannot tamper", s)
			}
			l := ledger(t, s)
			k := newKeys(t, "test.portcullis/evidence")
			c, err := evidence.NewCheckpointer(l, evidence.CheckpointerOptions{Signer: k.signer})
			if err != nil {
				t.Fatal(err)
			}
			ds := fill(t, s, "inst-a", 4)
			size := int64(9)
			if tc.others > 0 {
				fill(t, s, "inst-b", tc.others)
				size += 1 + 2*int64(tc.others)
			}
			pass(t, c, size)
			if r := verify(t, l, k); !r.OK() {
				t.Fatalf("Verify before tampering: %+v", r.Problems)
			}
			for _, stmt := range tc.tamper(t, ds, k, l) {
				if err := tm.Tamper(ctxFor(t), stmt); err != nil {
					t.Fatalf("tamper %q: %v", stmt, err)
				}
			}
			r := verify(t, l, k)
			found := false
			for _, p := range r.Problems {
				found = found || p.Kind == tc.wantKind
			}
			if !found {
				t.Fatalf("Verify after %s: problems %+v, want a %s", tc.name, r.Problems, tc.wantKind)
			}
		})
	}
}

// testAuditor: ProveReceipt proves a receipt's decision and latest outcome
// against one checkpoint (both verify offline), refuses honestly before a
// checkpoint covers them, and Stats counts checkpointed decisions from the
// rollup.
func testAuditor(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	l := ledger(t, s)
	k := newKeys(t, "test.portcullis/auditor")
	a := evidence.NewAuditor(l, k.verifier)
	ds := fill(t, s, "inst-a", 4)
	if _, err := a.ProveReceipt(ctx, ds[0].ID); !errors.Is(err, evidence.ErrNotCheckpointed) {
		t.Fatalf("ProveReceipt before any checkpoint = %v, want ErrNotCheckpointed", err)
	}
	c, err := evidence.NewCheckpointer(l, evidence.CheckpointerOptions{Signer: k.signer})
	if err != nil {
		t.Fatal(err)
	}
	pass(t, c, 9)
	p, err := a.ProveReceipt(ctx, ds[1].ID)
	if err != nil {
		t.Fatalf("ProveReceipt: %v", err)
	}
	if p.VerifierKey != k.verifier || p.TreeSize != 9 || p.Outcome == nil || p.Decision.EventID != ds[1].ID.String() {
		t.Fatalf("proof = %+v", p)
	}
	for _, ip := range []evidence.InclusionProof{p.Decision, *p.Outcome} {
		if ip.Checkpoint != p.Checkpoint {
			t.Errorf("event %s proven against another checkpoint", ip.EventID)
		}
		if err := evidence.VerifyInclusion(ip, k.verifier); err != nil {
			t.Errorf("VerifyInclusion(%s): %v", ip.EventID, err)
		}
	}
	r, err := s.Receipt(ctx, ds[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Chain == nil || r.Chain.Hash != p.Decision.EventHash || r.InstanceID != "inst-a" || r.CompletedAt == nil || r.DurationMS == nil {
		t.Errorf("receipt integrity fields = chain %+v instance %q completed %v duration %v; want the proven hash %s",
			r.Chain, r.InstanceID, r.CompletedAt, r.DurationMS, p.Decision.EventHash)
	}
	if _, err := a.ProveReceipt(ctx, newID(t)); !errors.Is(err, evidence.ErrNotFound) {
		t.Errorf("ProveReceipt(unknown) = %v, want ErrNotFound", err)
	}
	later := fill(t, s, "inst-b", 1)
	if _, err := a.ProveReceipt(ctx, later[0].ID); !errors.Is(err, evidence.ErrNotCheckpointed) {
		t.Errorf("ProveReceipt(after the checkpoint) = %v, want ErrNotCheckpointed", err)
	}
	now := time.Now().UTC()
	st, err := a.Stats(ctx, evidence.StatsQuery{Since: now.Add(-48 * time.Hour), Until: now.Add(time.Hour), Interval: "day"})
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	var total int64
	for _, b := range st.Buckets {
		total += b.Total
		if b.ByDecision[wire.DecisionAllow] != b.Total || b.ByTool["Exec"] != b.Total || b.ByPrincipal["agent-alpha"] != b.Total {
			t.Errorf("bucket %+v", b)
		}
		if !b.Start.Equal(b.Start.Truncate(24 * time.Hour)) {
			t.Errorf("day bucket starts at %s", b.Start)
		}
	}
	if total != 4 { // the decision of inst-b is not checkpointed yet
		t.Errorf("Stats total = %d, want 4 (%+v)", total, st)
	}
	if _, err := a.Stats(ctx, evidence.StatsQuery{Since: now, Until: now.Add(-time.Hour)}); !errors.Is(err, evidence.ErrBadFilter) {
		t.Errorf("Stats(until before since) = %v, want ErrBadFilter", err)
	}
	if _, err := a.Stats(ctx, evidence.StatsQuery{Since: now.AddDate(-3, 0, 0), Until: now, Interval: "hour"}); !errors.Is(err, evidence.ErrBadFilter) {
		t.Errorf("Stats(3 years hourly) = %v, want ErrBadFilter", err)
	}
}

// testTwoProcesses: two gateway processes (Writers with different instance
// ids) writing at once produce two chains that both verify, checkpointed
// together in one tree.
func testTwoProcesses(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	l := ledger(t, s)
	k := newKeys(t, "test.portcullis/evidence")
	const goroutines, per = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, 2*goroutines)
	for _, inst := range []string{"gw-1", "gw-2"} {
		w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: inst})
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range per {
					d := decision(t, fmt.Sprintf("%s-%d-%d", inst, g, i))
					o := evidence.Event{Kind: evidence.KindOutcome, ReceiptID: d.ID, Outcome: &wire.Outcome{Status: wire.StatusSucceeded}}
					if err := w.Append(ctx, d, o); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		t.Cleanup(func() { _ = w.Close(context.Background()) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Append: %v", err)
	}
	c, err := evidence.NewCheckpointer(l, evidence.CheckpointerOptions{Signer: k.signer})
	if err != nil {
		t.Fatal(err)
	}
	const total = 2 * (1 + goroutines*per*2)
	pass(t, c, total)
	r := verify(t, l, k)
	if !r.OK() || r.Chains != 2 || r.Events != total || r.Leaves != total {
		t.Fatalf("Verify = %+v; want OK with 2 chains, %d events and leaves", r, total)
	}
	for _, inst := range []string{"gw-1", "gw-2"} {
		chain, seq, _, err := s.ChainHead(ctx, inst)
		if err != nil || seq != total/2 {
			t.Fatalf("ChainHead(%s) = %s %d, %v; want seq %d", inst, chain, seq, err, total/2)
		}
	}
}
