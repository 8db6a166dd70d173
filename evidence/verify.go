package evidence

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"golang.org/x/mod/sumdb/tlog"
)

// Problem is one thing verification found wrong, precise enough to act on.
type Problem struct {
	// Kind classifies it: empty_store, altered_event, missing_sequence,
	// deleted_tail, chain_link, chain_head, not_in_tree, tree_mismatch,
	// forged_checkpoint, checkpoint_mismatch, external_checkpoint,
	// rule_index, rollup.
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// Report is the result of Verify.
type Report struct {
	Chains          int   `json:"chains"`
	Events          int64 `json:"events"`
	Leaves          int64 `json:"leaves"`
	Checkpoints     int   `json:"checkpoints"`
	NotCheckpointed int64 `json:"not_checkpointed"`
	// Retained counts leaves whose events retention dropped: the tree
	// keeps their hashes, so checkpoints still verify.
	Retained int64 `json:"retained"`
	// RetainedBefore is the newest bound of a verified retention event:
	// events older than it may have been dropped (RFC 3339; empty: none).
	RetainedBefore string `json:"retained_before,omitempty"`
	// Passed is OK(), for the JSON report.
	Passed bool `json:"ok"`
	// Anchored says whether anything kept outside the database (an
	// external checkpoint or chain head, VerifyOptions) was checked. When
	// false, the result is internal consistency only: a rollback of the
	// whole store to an earlier consistent copy, or the deletion of events
	// no checkpoint in the store covers, would not show.
	Anchored bool `json:"anchored"`
	// AnchoredSize is the largest external checkpoint's tree size: the
	// store's first AnchoredSize leaves are pinned by it.
	AnchoredSize int64 `json:"anchored_size"`
	// AnchorCheckpoints and AnchorHeads count the anchors checked.
	AnchorCheckpoints int `json:"anchor_checkpoints"`
	AnchorHeads       int `json:"anchor_heads"`
	// Checks lists the derived-data checks that ran (rule_index, rollup)
	// or why one did not ("rollup: skipped, ...").
	Checks   []string  `json:"checks,omitempty"`
	Problems []Problem `json:"problems"`
}

// OK reports whether nothing was wrong.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// seqKey names one event by its place in a chain.
type seqKey struct {
	chain uuid.UUID
	seq   int64
}

func (r *Report) add(kind, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{Kind: kind, Detail: fmt.Sprintf(format, args...)})
}

// VerifyOptions configure Verify.
type VerifyOptions struct {
	// VerifierKey checks checkpoint signatures ("name+hash+key"). Required.
	VerifierKey string
	// External are checkpoints kept outside the database (signed notes):
	// the store's tree must extend each one.
	External [][]byte
	// Heads are chain heads kept outside the database (signed notes,
	// SignChainHead): the store must hold each one's event.
	Heads [][]byte
}

// IndexChecker is implemented by stores with derived tables that must
// match the events (SQLite's evidence_rule_ids, which `?rule=` reads):
// Verify reports what it finds as problems.
type IndexChecker interface {
	CheckIndexes(ctx context.Context) ([]Problem, error)
}

// RollupReader is implemented by stores that keep the checkpointer's hourly
// counts: Verify recomputes them from the checkpointed decisions.
type RollupReader interface {
	RollupCells(ctx context.Context) ([]RollupCell, []RuleRollupCell, error)
}

// Verify checks everything the store holds: it holds events at all, each
// chain recomputes and links to its predecessor, the tree holds every
// checkpointed event at its place, the tree recomputes to every stored
// checkpoint, each checkpoint is signed by the key, the tree extends every
// external checkpoint, the store holds the event of every external chain
// head, and derived tables (rule index, hourly counts) match the events.
// Store failures are returned as errors; evidence problems are listed in
// the report. Memory: one chain's events at a time plus 32 bytes per event.
func Verify(ctx context.Context, l Ledger, opts VerifyOptions) (*Report, error) {
	r, err := verify(ctx, l, opts)
	if r != nil {
		r.Passed = r.OK()
	}
	return r, err
}

func verify(ctx context.Context, l Ledger, opts VerifyOptions) (*Report, error) {
	r := &Report{Problems: []Problem{}}
	// Anchors are opened first: their signatures do not depend on the
	// store, and the leaf walk checks external checkpoints as it goes.
	extAt := map[int64][]Checkpoint{}
	for i, ext := range opts.External {
		cp, err := OpenCheckpoint(ext, opts.VerifierKey)
		if err != nil {
			r.add("forged_checkpoint", "external checkpoint %d: %v", i+1, err)
			continue
		}
		r.AnchorCheckpoints++
		r.AnchoredSize = max(r.AnchoredSize, cp.Size)
		extAt[cp.Size] = append(extAt[cp.Size], cp)
	}
	var heads []ChainHeadNote
	headLeaves := map[seqKey]headLeaf{}
	for i, b := range opts.Heads {
		h, err := OpenChainHead(b, opts.VerifierKey)
		if err != nil {
			r.add("forged_checkpoint", "external chain head %d: %v", i+1, err)
			continue
		}
		heads = append(heads, h)
		headLeaves[seqKey{h.ChainID, h.Seq}] = headLeaf{}
	}
	r.AnchorHeads = len(heads)
	r.Anchored = r.AnchorCheckpoints+r.AnchorHeads > 0
	rollups, rollupsOK := l.(RollupReader)
	var (
		cells     map[RollupKey]int64
		ruleCells map[RuleRollupKey]int64
	)
	if rollupsOK {
		cells, ruleCells = map[RollupKey]int64{}, map[RuleRollupKey]int64{}
	}
	chains, err := l.Chains(ctx)
	if err != nil {
		return nil, err
	}
	_, treeHeads, err := l.TreeHeads(ctx)
	if err != nil {
		return nil, err
	}
	// Verified chain hashes by chain, index seq-1, for the tree and links.
	// A nil entry is an event the store no longer holds: acceptable only
	// when a retention event covers it (checked against the tree below).
	hashes := map[uuid.UUID][][]byte{}
	type link struct {
		chain uuid.UUID
		ChainLink
	}
	type gap struct {
		chain    uuid.UUID
		from, to int64
		next     Event // the first stored event after the gap
	}
	var (
		links []link
		gaps  []gap
	)
	// expect holds, by (chain, seq), event hashes that other stored events
	// claim for events retention dropped: the tree's leaf must match.
	expect := map[seqKey][][]byte{}
	var retainedBefore time.Time
	// cut: chains whose walk stopped at a break (already reported).
	cut := map[uuid.UUID]bool{}
	for _, ch := range chains {
		evs, err := l.ChainEvents(ctx, ch.ChainID)
		if err != nil {
			return nil, err
		}
		r.Chains++
		r.Events += int64(len(evs))
		hs := make([][]byte, 0, len(evs))
		var prev []byte
		for _, e := range evs {
			want := int64(len(hs) + 1)
			if e.ChainSeq < want {
				r.add("missing_sequence", "chain %s: sequence %d is missing (the next stored is %d, event %s)", ch.ChainID, want, e.ChainSeq, e.ID)
				cut[ch.ChainID] = true
				break
			}
			gapped := e.ChainSeq > want
			if gapped {
				// Resolved once every retention event is known.
				gaps = append(gaps, gap{ch.ChainID, want, e.ChainSeq - 1, e})
				for int64(len(hs)) < e.ChainSeq-1 {
					hs = append(hs, nil)
				}
				prev = e.PrevHash
			}
			if e.ChainSeq == 1 {
				if e.Kind != KindChainStart {
					r.add("chain_link", "chain %s: first event %s is %q, not chain_start", ch.ChainID, e.ID, e.Kind)
					cut[ch.ChainID] = true
					break
				}
				var cl ChainLink
				if err := json.Unmarshal(e.Args, &cl); err != nil || hex.EncodeToString(e.PrevHash) != cl.PrevHash {
					r.add("altered_event", "chain %s: chain_start %s was altered: its link body does not match its prev_hash", ch.ChainID, e.ID)
					cut[ch.ChainID] = true
					break
				}
				links = append(links, link{ch.ChainID, cl})
				prev = e.PrevHash
			} else if !gapped && !bytes.Equal(e.PrevHash, prev) {
				r.add("altered_event", "chain %s: event %s (seq %d) prev_hash is not the previous event's hash", ch.ChainID, e.ID, e.ChainSeq)
				cut[ch.ChainID] = true
				break
			}
			if ok, err := hashMatches(prev, e); err != nil || !ok {
				r.add("altered_event", "chain %s: event %s (seq %d, %s) was altered: its content does not match its hash", ch.ChainID, e.ID, e.ChainSeq, e.Kind)
				cut[ch.ChainID] = true
				break
			}
			if e.Kind == KindRetention {
				var body struct {
					Before time.Time `json:"before"`
				}
				if json.Unmarshal(e.Body, &body) == nil && body.Before.After(retainedBefore) {
					retainedBefore = body.Before
				}
			}
			if cells != nil && e.Kind == KindDecision && e.ChainSeq <= treeHeads[ch.ChainID] {
				// A decision is counted when it becomes a leaf
				// (Checkpointer.Pass), and a chain's leaves are its
				// sequences 1..tree head.
				hour := e.Time.UTC().Truncate(time.Hour)
				cells[RollupKey{Hour: hour, PrincipalID: e.PrincipalID, Tool: e.Tool, Decision: e.Decision}]++
				for i, id := range e.RuleIDs {
					if !slices.Contains(e.RuleIDs[:i], id) {
						ruleCells[RuleRollupKey{Hour: hour, RuleID: id}]++
					}
				}
			}
			hs = append(hs, e.Hash)
			prev = e.Hash
		}
		hashes[ch.ChainID] = hs
		if ch.MaxSeq > treeHeads[ch.ChainID] {
			r.NotCheckpointed += ch.MaxSeq - treeHeads[ch.ChainID]
		}
	}
	if !retainedBefore.IsZero() {
		r.RetainedBefore = retainedBefore.UTC().Format(time.RFC3339)
	}
	if r.Events == 0 {
		r.add("empty_store", "the store holds no evidence events: it was emptied, or never written")
	}
	// Gaps: without a retention event, or where the missing events never
	// reached the tree (so their times are unknown), they are deletions.
	for _, g := range gaps {
		if cut[g.chain] {
			continue
		}
		if retainedBefore.IsZero() || g.to > treeHeads[g.chain] {
			r.add("missing_sequence", "chain %s: sequence %d is missing (the next stored is %d, event %s)", g.chain, g.from, g.next.ChainSeq, g.next.ID)
			hashes[g.chain] = hashes[g.chain][:g.from-1]
			cut[g.chain] = true
			continue
		}
		k := seqKey{g.chain, g.to}
		expect[k] = append(expect[k], g.next.PrevHash)
	}
	for id, th := range treeHeads {
		hs, ok := hashes[id]
		switch {
		case cut[id]:
		case !ok && retainedBefore.IsZero():
			r.add("deleted_tail", "chain %s: the tree holds %d of its events but the store has none", id, th)
		case int64(len(hs)) < th && retainedBefore.IsZero():
			r.add("deleted_tail", "chain %s: the tree holds sequences up to %d but the store ends at %d: events were deleted", id, th, len(hs))
		case int64(len(hs)) < th:
			// Possibly retained: every missing leaf must be older than the
			// retention bound (tree walk).
			for int64(len(hs)) < th {
				hs = append(hs, nil)
			}
			hashes[id] = hs
		}
	}
	for _, lk := range links {
		if lk.PrevChainID == "" {
			continue
		}
		pid, err := uuid.Parse(lk.PrevChainID)
		if err != nil {
			r.add("chain_link", "chain %s: chain_start names a bad previous chain %q", lk.chain, lk.PrevChainID)
			continue
		}
		phs, ok := hashes[pid]
		if !ok || lk.PrevChainSeq < 1 || lk.PrevChainSeq > int64(len(phs)) {
			r.add("chain_link", "chain %s: its predecessor %s seq %d is not in the store", lk.chain, pid, lk.PrevChainSeq)
			continue
		}
		if phs[lk.PrevChainSeq-1] == nil {
			want, err := hex.DecodeString(lk.PrevHash)
			if err != nil {
				want = nil
			}
			k := seqKey{pid, lk.PrevChainSeq}
			expect[k] = append(expect[k], want)
			continue
		}
		if hex.EncodeToString(phs[lk.PrevChainSeq-1]) != lk.PrevHash {
			r.add("chain_link", "chain %s: its link to %s seq %d does not match that event's hash", lk.chain, pid, lk.PrevChainSeq)
		}
	}

	cps, err := l.Checkpoints(ctx)
	if err != nil {
		return nil, err
	}
	r.Checkpoints = len(cps)
	var b RootBuilder
	next := 0
	checkAt := func() {
		for next < len(cps) && cps[next].Size == b.Size() {
			cp := cps[next]
			next++
			opened, err := OpenCheckpoint([]byte(cp.Note), opts.VerifierKey)
			if err != nil {
				r.add("forged_checkpoint", "checkpoint of size %d: %v", cp.Size, err)
				continue
			}
			if opened.Size != cp.Size || opened.Root != cp.Root {
				r.add("forged_checkpoint", "checkpoint of size %d: its row does not match its signed note", cp.Size)
			}
			if root := b.Root(); opened.Root != root {
				r.add("checkpoint_mismatch", "checkpoint of size %d: signed root %x…, the stored events give %x…", cp.Size, opened.Root[:6], root[:6])
			}
		}
	}
	const page = 10000
walk:
	for from := int64(0); ; {
		ls, err := l.Leaves(ctx, from, page)
		if err != nil {
			return nil, err
		}
		// Leaves whose event is gone: their stored leaf hash, read at once.
		var need []int64
		for _, lf := range ls {
			if _, ok := leafOf(hashes, lf); !ok {
				need = append(need, tlog.StoredHashIndex(0, lf.Index))
			}
		}
		var stored []tlog.Hash
		if len(need) > 0 {
			if stored, err = l.ReadHashes(ctx, need); err != nil {
				return nil, err
			}
		}
		for _, lf := range ls {
			if lf.Index != b.Size() {
				r.add("tree_mismatch", "leaf %d is missing from the tree table", b.Size())
				break walk
			}
			leaf, ok := leafOf(hashes, lf)
			if !ok {
				// Take the stored hash so later checkpoints are still checked.
				leaf, stored = stored[0], stored[1:]
				hs := hashes[lf.ChainID]
				if lf.ChainSeq >= 1 && lf.ChainSeq <= int64(len(hs)) && hs[lf.ChainSeq-1] == nil &&
					lf.EventTime.Before(retainedBefore) {
					// Dropped by retention: the signed tree still holds it.
					r.Retained++
					for _, want := range expect[seqKey{lf.ChainID, lf.ChainSeq}] {
						if LeafHash(want) != leaf {
							r.add("chain_link", "chain %s: the event after retained seq %d does not link to that leaf in the tree", lf.ChainID, lf.ChainSeq)
						}
					}
					if _, ok := headLeaves[seqKey{lf.ChainID, lf.ChainSeq}]; ok {
						headLeaves[seqKey{lf.ChainID, lf.ChainSeq}] = headLeaf{leaf: leaf, retained: true}
					}
				} else {
					r.add("not_in_tree", "leaf %d: event %s (chain %s seq %d) is missing or altered in the store", lf.Index, lf.EventID, lf.ChainID, lf.ChainSeq)
				}
			}
			b.Add(leaf)
			checkAt()
			for _, cp := range extAt[b.Size()] {
				if root := b.Root(); root != cp.Root {
					r.add("external_checkpoint", "external checkpoint of size %d: the store's first %d leaves no longer give its root", cp.Size, cp.Size)
				}
			}
		}
		if len(ls) < page {
			break
		}
		from += int64(len(ls))
	}
	r.Leaves = b.Size()
	for ; next < len(cps); next++ {
		r.add("checkpoint_mismatch", "checkpoint of size %d is larger than the tree (%d leaves): leaves were deleted", cps[next].Size, b.Size())
	}
	if b.Size() > 0 {
		if root, err := tlog.TreeHash(b.Size(), HashReader(ctx, l)); err != nil {
			r.add("tree_mismatch", "stored tree hashes: %v", err)
		} else if want := b.Root(); root != want {
			r.add("tree_mismatch", "stored tree hashes give root %x…, the events %x…: proofs would not match", root[:6], want[:6])
		}
	}
	if r.AnchoredSize > b.Size() {
		beyond := 0
		for size, cps := range extAt {
			if size > b.Size() {
				beyond += len(cps)
			}
		}
		r.add("external_checkpoint", "%d external checkpoint(s), the largest of size %d, are beyond the store's tree (%d leaves): the store was rolled back or truncated",
			beyond, r.AnchoredSize, b.Size())
	}
	verifyHeads(r, heads, hashes, headLeaves)
	if err := checkDerived(ctx, l, r, rollups, cells, ruleCells, retainedBefore); err != nil {
		return nil, err
	}
	return r, nil
}

func leafOf(hashes map[uuid.UUID][][]byte, lf Leaf) (tlog.Hash, bool) {
	hs := hashes[lf.ChainID]
	if lf.ChainSeq < 1 || lf.ChainSeq > int64(len(hs)) || hs[lf.ChainSeq-1] == nil {
		return tlog.Hash{}, false
	}
	return LeafHash(hs[lf.ChainSeq-1]), true
}

// checkDerived holds the store's derived tables against the events: its
// own index checks (IndexChecker), then the hourly counts the
// checkpointer keeps, recomputed from the checkpointed decisions walked
// (hours before a retention bound are skipped: their events may be gone
// while their counts stay). Counts are compared only when nothing else was
// wrong, since a broken chain was not walked to its end.
func checkDerived(ctx context.Context, l Ledger, r *Report, rollups RollupReader, cells map[RollupKey]int64,
	ruleCells map[RuleRollupKey]int64, retainedBefore time.Time) error {
	if ic, ok := l.(IndexChecker); ok {
		ps, err := ic.CheckIndexes(ctx)
		if err != nil {
			return err
		}
		r.Problems = append(r.Problems, ps...)
		r.Checks = append(r.Checks, "rule_index")
	}
	if rollups == nil {
		return nil
	}
	if len(r.Problems) > 0 {
		r.Checks = append(r.Checks, "rollup: skipped, the events did not verify")
		return nil
	}
	stored, storedRules, err := rollups.RollupCells(ctx)
	if err != nil {
		return err
	}
	r.Checks = append(r.Checks, "rollup")
	const maxReported = 5
	bad := 0
	report := func(format string, args ...any) {
		bad++
		if bad <= maxReported {
			r.add("rollup", format, args...)
		}
	}
	for _, c := range stored {
		if c.Hour.Before(retainedBefore) {
			continue
		}
		if want := cells[c.RollupKey]; c.N != want {
			report("hourly count %s %s/%s/%s is %d, the checkpointed decisions give %d", c.Hour.Format(time.RFC3339), c.PrincipalID, c.Tool, c.Decision, c.N, want)
		}
		delete(cells, c.RollupKey)
	}
	for k, n := range cells {
		if !k.Hour.Before(retainedBefore) {
			report("hourly count %s %s/%s/%s is missing, the checkpointed decisions give %d", k.Hour.Format(time.RFC3339), k.PrincipalID, k.Tool, k.Decision, n)
		}
	}
	for _, c := range storedRules {
		if c.Hour.Before(retainedBefore) {
			continue
		}
		if want := ruleCells[c.RuleRollupKey]; c.N != want {
			report("hourly count of rule %q at %s is %d, the checkpointed decisions give %d", c.RuleID, c.Hour.Format(time.RFC3339), c.N, want)
		}
		delete(ruleCells, c.RuleRollupKey)
	}
	for k, n := range ruleCells {
		if !k.Hour.Before(retainedBefore) {
			report("hourly count of rule %q at %s is missing, the checkpointed decisions give %d", k.RuleID, k.Hour.Format(time.RFC3339), n)
		}
	}
	if bad > maxReported {
		r.add("rollup", "%d more hourly counts do not match the checkpointed decisions", bad-maxReported)
	}
	return nil
}
