package evidence

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
	// UnheadedChains, when chain heads were given (VerifyOptions.Heads),
	// are the chains no head covers: neither a head names the chain nor a
	// later chain of a head's instance links back to it. Chains need no
	// secret to write, so a chain of made-up receipts written straight
	// into the database verifies like any other; the heads are signed with
	// the checkpoint key. Not a problem by itself (a gateway whose heads
	// are kept elsewhere, a replica on another host, is listed too), but
	// each one should be a gateway you know of.
	UnheadedChains []UnheadedChain `json:"unheaded_chains,omitempty"`
}

// UnheadedChain is a chain no chain head copied out of the store covers.
type UnheadedChain struct {
	ChainID    string `json:"chain_id"`
	InstanceID string `json:"instance_id"`
	Events     int64  `json:"events"`
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

// verifier is one run of Verify: what it has learnt so far, shared by its
// steps.
type verifier struct {
	l    Ledger
	opts VerifyOptions
	r    *Report

	// Anchors kept outside the store: external checkpoints by size, and
	// chain heads with their leaves as the tree walk finds them.
	extAt      map[int64][]Checkpoint
	heads      []ChainHeadNote
	headLeaves map[seqKey]headLeaf

	// Hourly counts recomputed from checkpointed decisions (nil when the
	// store keeps no rollups).
	rollups   RollupReader
	cells     map[RollupKey]int64
	ruleCells map[RuleRollupKey]int64

	treeHeads map[uuid.UUID]int64
	// Verified chain hashes by chain, index seq-1, for the tree and links.
	// A nil entry is an event the store no longer holds: acceptable only
	// when a retention event covers it (checked against the tree).
	hashes map[uuid.UUID][][]byte
	links  []verifyLink
	gaps   []verifyGap
	// expect holds, by (chain, seq), event hashes that other stored events
	// claim for events retention dropped: the tree's leaf must match.
	expect         map[seqKey][][]byte
	retainedBefore time.Time
	// cut: chains whose walk stopped at a break (already reported).
	cut map[uuid.UUID]bool
	// chainInfo: each stored chain's instance and number of events.
	chainInfo map[uuid.UUID]UnheadedChain
}

// verifyLink is a chain_start's link to the chain before it.
type verifyLink struct {
	chain uuid.UUID
	ChainLink
}

// verifyGap is a run of sequences a chain's stored events skip.
type verifyGap struct {
	chain    uuid.UUID
	from, to int64
	next     Event // the first stored event after the gap
}

func verify(ctx context.Context, l Ledger, opts VerifyOptions) (*Report, error) {
	v := &verifier{l: l, opts: opts, r: &Report{Problems: []Problem{}},
		hashes: map[uuid.UUID][][]byte{}, expect: map[seqKey][][]byte{}, cut: map[uuid.UUID]bool{},
		chainInfo: map[uuid.UUID]UnheadedChain{}}
	// Anchors are opened first: their signatures do not depend on the
	// store, and the leaf walk checks external checkpoints as it goes.
	v.openAnchors()
	if rollups, ok := l.(RollupReader); ok {
		v.rollups, v.cells, v.ruleCells = rollups, map[RollupKey]int64{}, map[RuleRollupKey]int64{}
	}
	if err := v.walkChains(ctx); err != nil {
		return nil, err
	}
	v.resolveGaps()
	v.checkTreeHeads()
	v.checkLinks()
	if err := v.walkTree(ctx); err != nil {
		return nil, err
	}
	verifyHeads(v.r, v.heads, v.hashes, v.headLeaves)
	v.listUnheaded()
	if err := checkDerived(ctx, l, v.r, v.rollups, v.cells, v.ruleCells, v.retainedBefore); err != nil {
		return nil, err
	}
	return v.r, nil
}

// openAnchors opens the external checkpoints and chain heads.
func (v *verifier) openAnchors() {
	r := v.r
	v.extAt = map[int64][]Checkpoint{}
	for i, ext := range v.opts.External {
		cp, err := OpenCheckpoint(ext, v.opts.VerifierKey)
		if err != nil {
			r.add("forged_checkpoint", "external checkpoint %d: %v", i+1, err)
			continue
		}
		r.AnchorCheckpoints++
		r.AnchoredSize = max(r.AnchoredSize, cp.Size)
		v.extAt[cp.Size] = append(v.extAt[cp.Size], cp)
	}
	v.headLeaves = map[seqKey]headLeaf{}
	for i, b := range v.opts.Heads {
		h, err := OpenChainHead(b, v.opts.VerifierKey)
		if err != nil {
			r.add("forged_checkpoint", "external chain head %d: %v", i+1, err)
			continue
		}
		v.heads = append(v.heads, h)
		v.headLeaves[seqKey{h.ChainID, h.Seq}] = headLeaf{}
	}
	r.AnchorHeads = len(v.heads)
	r.Anchored = r.AnchorCheckpoints+r.AnchorHeads > 0
}

// walkChains recomputes every chain, one at a time.
func (v *verifier) walkChains(ctx context.Context) error {
	chains, err := v.l.Chains(ctx)
	if err != nil {
		return err
	}
	if _, v.treeHeads, err = v.l.TreeHeads(ctx); err != nil {
		return err
	}
	for _, ch := range chains {
		evs, err := v.l.ChainEvents(ctx, ch.ChainID)
		if err != nil {
			return err
		}
		v.r.Chains++
		v.r.Events += int64(len(evs))
		v.hashes[ch.ChainID] = v.walkChain(ch.ChainID, evs)
		info := UnheadedChain{ChainID: ch.ChainID.String(), Events: int64(len(evs))}
		if len(evs) > 0 {
			info.InstanceID = evs[0].InstanceID
		}
		v.chainInfo[ch.ChainID] = info
		if ch.MaxSeq > v.treeHeads[ch.ChainID] {
			v.r.NotCheckpointed += ch.MaxSeq - v.treeHeads[ch.ChainID]
		}
	}
	if !v.retainedBefore.IsZero() {
		v.r.RetainedBefore = v.retainedBefore.UTC().Format(time.RFC3339)
	}
	if v.r.Events == 0 {
		v.r.add("empty_store", "the store holds no evidence events: it was emptied, or never written")
	}
	return nil
}

// walkChain checks one chain's stored events in order (sequence, link,
// content hash) and returns their hashes, nil for skipped sequences. It
// stops at the first break, marking the chain cut.
func (v *verifier) walkChain(chain uuid.UUID, evs []Event) [][]byte {
	r := v.r
	hs := make([][]byte, 0, len(evs))
	var prev []byte
	for _, e := range evs {
		want := int64(len(hs) + 1)
		if e.ChainSeq < want {
			r.add("missing_sequence", "chain %s: sequence %d is missing (the next stored is %d, event %s)", chain, want, e.ChainSeq, e.ID)
			v.cut[chain] = true
			break
		}
		gapped := e.ChainSeq > want
		if gapped {
			// Resolved once every retention event is known.
			v.gaps = append(v.gaps, verifyGap{chain, want, e.ChainSeq - 1, e})
			for int64(len(hs)) < e.ChainSeq-1 {
				hs = append(hs, nil)
			}
			prev = e.PrevHash
		}
		if e.ChainSeq == 1 {
			if e.Kind != KindChainStart {
				r.add("chain_link", "chain %s: first event %s is %q, not chain_start", chain, e.ID, e.Kind)
				v.cut[chain] = true
				break
			}
			var cl ChainLink
			if err := json.Unmarshal(e.Args, &cl); err != nil || hex.EncodeToString(e.PrevHash) != cl.PrevHash {
				r.add("altered_event", "chain %s: chain_start %s was altered: its link body does not match its prev_hash", chain, e.ID)
				v.cut[chain] = true
				break
			}
			v.links = append(v.links, verifyLink{chain, cl})
			prev = e.PrevHash
		} else if !gapped && !bytes.Equal(e.PrevHash, prev) {
			r.add("altered_event", "chain %s: event %s (seq %d) prev_hash is not the previous event's hash", chain, e.ID, e.ChainSeq)
			v.cut[chain] = true
			break
		}
		if ok, err := hashMatches(prev, e); err != nil || !ok {
			r.add("altered_event", "chain %s: event %s (seq %d, %s) was altered: its content does not match its hash", chain, e.ID, e.ChainSeq, e.Kind)
			v.cut[chain] = true
			break
		}
		v.noteEvent(chain, e)
		hs = append(hs, e.Hash)
		prev = e.Hash
	}
	return hs
}

// noteEvent takes what a verified event tells beyond its chain: the
// retention bound, and the hourly counts of checkpointed decisions.
func (v *verifier) noteEvent(chain uuid.UUID, e Event) {
	if e.Kind == KindRetention {
		var body struct {
			Before time.Time `json:"before"`
		}
		if json.Unmarshal(e.Body, &body) == nil && body.Before.After(v.retainedBefore) {
			v.retainedBefore = body.Before
		}
	}
	if v.cells != nil && e.Kind == KindDecision && e.ChainSeq <= v.treeHeads[chain] {
		// A decision is counted when it becomes a leaf
		// (Checkpointer.Pass), and a chain's leaves are its
		// sequences 1..tree head.
		hour := e.Time.UTC().Truncate(time.Hour)
		v.cells[RollupKey{Hour: hour, PrincipalID: e.PrincipalID, Tool: e.Tool, Decision: e.Decision}]++
		for i, id := range e.RuleIDs {
			if !slices.Contains(e.RuleIDs[:i], id) {
				v.ruleCells[RuleRollupKey{Hour: hour, RuleID: id}]++
			}
		}
	}
}

// resolveGaps judges skipped sequences: without a retention event, or
// where the missing events never reached the tree (so their times are
// unknown), they are deletions.
func (v *verifier) resolveGaps() {
	for _, g := range v.gaps {
		if v.cut[g.chain] {
			continue
		}
		if v.retainedBefore.IsZero() || g.to > v.treeHeads[g.chain] {
			v.r.add("missing_sequence", "chain %s: sequence %d is missing (the next stored is %d, event %s)", g.chain, g.from, g.next.ChainSeq, g.next.ID)
			v.hashes[g.chain] = v.hashes[g.chain][:g.from-1]
			v.cut[g.chain] = true
			continue
		}
		k := seqKey{g.chain, g.to}
		v.expect[k] = append(v.expect[k], g.next.PrevHash)
	}
}

// checkTreeHeads compares each chain's stored events with the leaves the
// tree holds of it: fewer is a deleted tail, unless retention explains it.
func (v *verifier) checkTreeHeads() {
	for id, th := range v.treeHeads {
		hs, ok := v.hashes[id]
		switch {
		case v.cut[id]:
		case !ok && v.retainedBefore.IsZero():
			v.r.add("deleted_tail", "chain %s: the tree holds %d of its events but the store has none", id, th)
		case int64(len(hs)) < th && v.retainedBefore.IsZero():
			v.r.add("deleted_tail", "chain %s: the tree holds sequences up to %d but the store ends at %d: events were deleted", id, th, len(hs))
		case int64(len(hs)) < th:
			// Possibly retained: every missing leaf must be older than the
			// retention bound (tree walk).
			for int64(len(hs)) < th {
				hs = append(hs, nil)
			}
			v.hashes[id] = hs
		}
	}
}

// checkLinks holds each chain_start's link against its predecessor's
// event, or, where retention dropped that event, against its leaf.
func (v *verifier) checkLinks() {
	for _, lk := range v.links {
		if lk.PrevChainID == "" {
			continue
		}
		pid, err := uuid.Parse(lk.PrevChainID)
		if err != nil {
			v.r.add("chain_link", "chain %s: chain_start names a bad previous chain %q", lk.chain, lk.PrevChainID)
			continue
		}
		phs, ok := v.hashes[pid]
		if !ok || lk.PrevChainSeq < 1 || lk.PrevChainSeq > int64(len(phs)) {
			v.r.add("chain_link", "chain %s: its predecessor %s seq %d is not in the store", lk.chain, pid, lk.PrevChainSeq)
			continue
		}
		if phs[lk.PrevChainSeq-1] == nil {
			want, err := hex.DecodeString(lk.PrevHash)
			if err != nil {
				want = nil
			}
			k := seqKey{pid, lk.PrevChainSeq}
			v.expect[k] = append(v.expect[k], want)
			continue
		}
		if hex.EncodeToString(phs[lk.PrevChainSeq-1]) != lk.PrevHash {
			v.r.add("chain_link", "chain %s: its link to %s seq %d does not match that event's hash", lk.chain, pid, lk.PrevChainSeq)
		}
	}
}

// treeWalk is the state of the walk over the tree's leaves.
type treeWalk struct {
	b    RootBuilder
	cps  []StoredCheckpoint
	next int // the first stored checkpoint not yet reached
}

// walkTree rebuilds the tree from the leaves (the events' hashes, or the
// stored leaf of an event retention dropped), checking every stored and
// external checkpoint at its size, then the stored tree hashes.
func (v *verifier) walkTree(ctx context.Context) error {
	cps, err := v.l.Checkpoints(ctx)
	if err != nil {
		return err
	}
	v.r.Checkpoints = len(cps)
	w := &treeWalk{cps: cps}
	const page = 10000
	for from := int64(0); ; {
		ls, err := v.l.Leaves(ctx, from, page)
		if err != nil {
			return err
		}
		done, err := v.walkLeaves(ctx, w, ls)
		if err != nil {
			return err
		}
		if done || len(ls) < page {
			break
		}
		from += int64(len(ls))
	}
	v.finishTree(ctx, w)
	return nil
}

// walkLeaves adds one page of leaves; done reports a break in the tree
// table, which ends the walk.
func (v *verifier) walkLeaves(ctx context.Context, w *treeWalk, ls []Leaf) (done bool, err error) {
	// Leaves whose event is gone: their stored leaf hash, read at once.
	var need []int64
	for _, lf := range ls {
		if _, ok := leafOf(v.hashes, lf); !ok {
			need = append(need, tlog.StoredHashIndex(0, lf.Index))
		}
	}
	var stored []tlog.Hash
	if len(need) > 0 {
		if stored, err = v.l.ReadHashes(ctx, need); err != nil {
			return false, err
		}
	}
	for _, lf := range ls {
		if lf.Index != w.b.Size() {
			v.r.add("tree_mismatch", "leaf %d is missing from the tree table", w.b.Size())
			return true, nil
		}
		leaf, ok := leafOf(v.hashes, lf)
		if !ok {
			// Take the stored hash so later checkpoints are still checked.
			leaf, stored = stored[0], stored[1:]
			v.retainedLeaf(lf, leaf)
		}
		w.b.Add(leaf)
		v.checkpointsAt(w)
		for _, cp := range v.extAt[w.b.Size()] {
			if root := w.b.Root(); root != cp.Root {
				v.r.add("external_checkpoint", "external checkpoint of size %d: the store's first %d leaves no longer give its root", cp.Size, cp.Size)
			}
		}
	}
	return false, nil
}

// retainedLeaf judges a leaf whose event the store does not hold: dropped
// by retention (older than its bound, the hashes linking to it match), or
// missing or altered.
func (v *verifier) retainedLeaf(lf Leaf, leaf tlog.Hash) {
	hs := v.hashes[lf.ChainID]
	if lf.ChainSeq >= 1 && lf.ChainSeq <= int64(len(hs)) && hs[lf.ChainSeq-1] == nil &&
		lf.EventTime.Before(v.retainedBefore) {
		// Dropped by retention: the signed tree still holds it.
		v.r.Retained++
		for _, want := range v.expect[seqKey{lf.ChainID, lf.ChainSeq}] {
			if LeafHash(want) != leaf {
				v.r.add("chain_link", "chain %s: the event after retained seq %d does not link to that leaf in the tree", lf.ChainID, lf.ChainSeq)
			}
		}
		if _, ok := v.headLeaves[seqKey{lf.ChainID, lf.ChainSeq}]; ok {
			v.headLeaves[seqKey{lf.ChainID, lf.ChainSeq}] = headLeaf{leaf: leaf, retained: true}
		}
		return
	}
	v.r.add("not_in_tree", "leaf %d: event %s (chain %s seq %d) is missing or altered in the store", lf.Index, lf.EventID, lf.ChainID, lf.ChainSeq)
}

// checkpointsAt checks the stored checkpoints of the tree's current size:
// signed by the key, their row matching their note, their root the one
// the events give.
func (v *verifier) checkpointsAt(w *treeWalk) {
	for w.next < len(w.cps) && w.cps[w.next].Size == w.b.Size() {
		cp := w.cps[w.next]
		w.next++
		opened, err := OpenCheckpoint([]byte(cp.Note), v.opts.VerifierKey)
		if err != nil {
			v.r.add("forged_checkpoint", "checkpoint of size %d: %v", cp.Size, err)
			continue
		}
		if opened.Size != cp.Size || opened.Root != cp.Root {
			v.r.add("forged_checkpoint", "checkpoint of size %d: its row does not match its signed note", cp.Size)
		}
		if root := w.b.Root(); opened.Root != root {
			v.r.add("checkpoint_mismatch", "checkpoint of size %d: signed root %x…, the stored events give %x…", cp.Size, opened.Root[:6], root[:6])
		}
	}
}

// finishTree reports what lies beyond the walked tree: stored checkpoints
// larger than it, stored tree hashes that disagree, external checkpoints
// it no longer reaches.
func (v *verifier) finishTree(ctx context.Context, w *treeWalk) {
	r, size := v.r, w.b.Size()
	r.Leaves = size
	for ; w.next < len(w.cps); w.next++ {
		r.add("checkpoint_mismatch", "checkpoint of size %d is larger than the tree (%d leaves): leaves were deleted", w.cps[w.next].Size, size)
	}
	if size > 0 {
		if root, err := tlog.TreeHash(size, HashReader(ctx, v.l)); err != nil {
			r.add("tree_mismatch", "stored tree hashes: %v", err)
		} else if want := w.b.Root(); root != want {
			r.add("tree_mismatch", "stored tree hashes give root %x…, the events %x…: proofs would not match", root[:6], want[:6])
		}
	}
	if r.AnchoredSize > size {
		beyond := 0
		for sz, cps := range v.extAt {
			if sz > size {
				beyond += len(cps)
			}
		}
		r.add("external_checkpoint", "%d external checkpoint(s), the largest of size %d, are beyond the store's tree (%d leaves): the store was rolled back or truncated",
			beyond, r.AnchoredSize, size)
	}
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

// listUnheaded fills Report.UnheadedChains when chain heads were given: a
// head covers its chain and, through the chain_start links, every earlier
// chain of its instance.
func (v *verifier) listUnheaded() {
	if len(v.heads) == 0 {
		return
	}
	prevOf := map[uuid.UUID]uuid.UUID{}
	for _, l := range v.links {
		if p, err := uuid.Parse(l.PrevChainID); err == nil {
			prevOf[l.chain] = p
		}
	}
	covered := map[uuid.UUID]bool{}
	for _, h := range v.heads {
		for c, ok := h.ChainID, true; ok && !covered[c]; c, ok = prevOf[c] {
			covered[c] = true
		}
	}
	for id, info := range v.chainInfo {
		if !covered[id] {
			v.r.UnheadedChains = append(v.r.UnheadedChains, info)
		}
	}
	slices.SortFunc(v.r.UnheadedChains, func(a, b UnheadedChain) int { return strings.Compare(a.ChainID, b.ChainID) })
}
