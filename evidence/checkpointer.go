package evidence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// FinalPassTimeout bounds the checkpoint pass Run makes when it stops.
const FinalPassTimeout = 10 * time.Second

// CheckpointerOptions configure a Checkpointer.
type CheckpointerOptions struct {
	// Signer signs checkpoints (Ed25519 note key). Required.
	Signer note.Signer
	// Interval between passes (default 10s).
	Interval time.Duration
	// Dir, when set, receives a copy of every checkpoint outside the
	// database: checkpoint-<size> and latest, written atomically.
	Dir string
	// MaxLeavesPerPass bounds one pass's transaction (default 50000).
	MaxLeavesPerPass int
	Logger           *slog.Logger
	Now              func() time.Time
}

// Checkpointer appends every new chained event to the Merkle tree and signs
// a checkpoint of it. Exactly one process leads at a time (Ledger.TryLead:
// a PostgreSQL session advisory lock; SQLite has one process), so the tree
// has a single sequencer. Before an event becomes a leaf, its chain link and
// hash are checked: the checkpointer never signs a chain that does not
// verify; it logs the break and stops appending that chain (fail closed).
type Checkpointer struct {
	l    Ledger
	opts CheckpointerOptions
	// heads caches each chain's last leaf (sequence and event hash); it is
	// dropped whenever a pass fails, and re-read.
	heads map[uuid.UUID]chainTip
	size  int64
	ready bool
	// lastPass is when this instance last completed a pass (unix nanos;
	// 0: never), for the checkpoint lag metric.
	lastPass atomic.Int64
}

// LastPass is when this checkpointer last completed a pass while leading;
// zero when it never has (another replica leads, or the store is down).
// The age of that time is the checkpoint lag: how stale the newest signed
// checkpoint may be.
func (c *Checkpointer) LastPass() time.Time {
	if n := c.lastPass.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

type chainTip struct {
	seq  int64
	hash []byte
}

// NewCheckpointer checks the options.
func NewCheckpointer(l Ledger, opts CheckpointerOptions) (*Checkpointer, error) {
	if opts.Signer == nil {
		return nil, errors.New("evidence: checkpointer needs a signer")
	}
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.MaxLeavesPerPass <= 0 {
		opts.MaxLeavesPerPass = 50000
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Checkpointer{l: l, opts: opts}, nil
}

// Run passes every Interval until ctx ends, leading when it can. When ctx
// ends while it leads, it makes one last pass (bounded by FinalPassTimeout)
// so what the process wrote last is signed too: stop the writers first.
func (c *Checkpointer) Run(ctx context.Context) {
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	var release func()
	defer func() {
		if release != nil {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), FinalPassTimeout)
			if _, err := c.Pass(fctx); err != nil {
				c.opts.Logger.Error("evidence checkpoint: final pass at shutdown failed; the next leader signs the rest", "error", err.Error())
			}
			cancel()
			release()
		}
	}()
	for {
		if release == nil {
			r, ok, err := c.l.TryLead(ctx)
			switch {
			case err != nil:
				c.opts.Logger.Warn("evidence checkpointer: leader election failed", "error", err.Error())
			case ok:
				release = r
				c.ready = false
				c.opts.Logger.Info("evidence checkpointer: leading")
			}
		}
		if release != nil {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			_, err := c.Pass(pctx)
			if err == nil {
				c.lastPass.Store(time.Now().UnixNano())
			}
			if err != nil && ctx.Err() == nil {
				c.opts.Logger.Error("evidence checkpoint pass failed", "error", err.Error())
				if errors.Is(err, ErrUnavailable) {
					// The lock's session may be gone with the connection.
					release()
					release = nil
				}
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass appends what is new and signs a checkpoint when the tree grew. It
// returns the new tree size. The caller must lead (Run does; tests and
// one-shot tools may call it on a store no one else checkpoints).
func (c *Checkpointer) Pass(ctx context.Context) (int64, error) {
	if !c.ready {
		if err := c.load(ctx); err != nil {
			return 0, err
		}
	}
	chains, err := c.l.ActiveChains(ctx)
	if err != nil {
		return 0, fmt.Errorf("evidence: checkpoint: list chains: %w", err)
	}
	slices.SortFunc(chains, func(a, b ChainInfo) int { return bytes.Compare(a.ChainID[:], b.ChainID[:]) })
	a := TreeAppend{Hashes: map[int64]tlog.Hash{}, Rollup: map[RollupKey]int64{}, RuleRollup: map[RuleRollupKey]int64{}}
	reader := hashReader{ctx: ctx, l: c.l, overlay: a.Hashes}
	size := c.size
	tips := map[uuid.UUID]chainTip{}
	for _, ch := range chains {
		tip := c.heads[ch.ChainID]
		if ch.MaxSeq <= tip.seq || len(a.Leaves) >= c.opts.MaxLeavesPerPass {
			continue
		}
		from := max(tip.seq, 1)
		evs, err := c.l.ChainEventsFrom(ctx, ch.ChainID, from, c.opts.MaxLeavesPerPass-len(a.Leaves)+1)
		if err != nil {
			return 0, fmt.Errorf("evidence: checkpoint: read chain %s: %w", ch.ChainID, err)
		}
		for _, e := range evs {
			if e.ChainSeq <= tip.seq {
				if e.ChainSeq == tip.seq && !bytes.Equal(e.Hash, tip.hash) {
					c.opts.Logger.Error("evidence chain changed after it was checkpointed: not extending it",
						"chain_id", ch.ChainID.String(), "seq", e.ChainSeq)
					break
				}
				continue
			}
			if err := checkNext(tip, e); err != nil {
				c.opts.Logger.Error("evidence chain does not verify: not checkpointing past the break",
					"chain_id", ch.ChainID.String(), "seq", e.ChainSeq, "error", err.Error())
				break
			}
			hashes, err := tlog.StoredHashes(size, e.Hash, reader)
			if err != nil {
				return 0, fmt.Errorf("evidence: checkpoint: tree hashes: %w", err)
			}
			base := tlog.StoredHashIndex(0, size)
			for i, h := range hashes {
				a.Hashes[base+int64(i)] = h
			}
			a.Leaves = append(a.Leaves, Leaf{Index: size, EventID: e.ID, EventTime: e.Time, ChainID: e.ChainID, ChainSeq: e.ChainSeq})
			if e.Kind == KindDecision {
				hour := e.Time.UTC().Truncate(time.Hour)
				a.Rollup[RollupKey{Hour: hour, PrincipalID: e.PrincipalID, Tool: e.Tool, Decision: e.Decision}]++
				for i, id := range e.RuleIDs {
					if !slices.Contains(e.RuleIDs[:i], id) { // once per decision
						a.RuleRollup[RuleRollupKey{Hour: hour, RuleID: id}]++
					}
				}
			}
			size++
			tip = chainTip{seq: e.ChainSeq, hash: e.Hash}
			if len(a.Leaves) >= c.opts.MaxLeavesPerPass {
				break
			}
		}
		tips[ch.ChainID] = tip
	}
	if len(a.Leaves) == 0 {
		return size, nil
	}
	root, err := tlog.TreeHash(size, reader)
	if err != nil {
		return 0, fmt.Errorf("evidence: checkpoint: root: %w", err)
	}
	cp, err := SignCheckpoint(c.opts.Signer, size, root)
	if err != nil {
		return 0, err
	}
	a.Checkpoint = StoredCheckpoint{Size: size, Root: root, Note: cp.Note, CreatedAt: NormalizeTime(c.opts.Now())}
	if err := c.l.AppendTree(ctx, a); err != nil {
		c.ready = false
		return 0, fmt.Errorf("evidence: checkpoint: append tree of %d: %w", size, err)
	}
	c.size = size
	for id, t := range tips {
		c.heads[id] = t
	}
	if c.opts.Dir != "" {
		if err := WriteCheckpointFile(c.opts.Dir, cp); err != nil {
			// The checkpoint is committed; the copy is retried with the next.
			c.opts.Logger.Error("evidence: copy checkpoint outside the database", "error", err.Error())
		}
	}
	return size, nil
}

// checkNext checks that e extends the chain whose last leaf is tip.
func checkNext(tip chainTip, e Event) error {
	if e.ChainSeq != tip.seq+1 {
		return fmt.Errorf("%w: sequence %d follows %d", ErrChainBroken, e.ChainSeq, tip.seq)
	}
	if tip.seq == 0 {
		if e.Kind != KindChainStart {
			return fmt.Errorf("%w: chain starts with %q", ErrChainBroken, e.Kind)
		}
	} else if !bytes.Equal(e.PrevHash, tip.hash) {
		return fmt.Errorf("%w: prev_hash does not match", ErrChainBroken)
	}
	ok, err := hashMatches(e.PrevHash, e)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrChainBroken, err)
	}
	if !ok {
		return fmt.Errorf("%w: content does not match its hash", ErrChainBroken)
	}
	return nil
}

// load reads the tree's size and each chain's last leaf.
func (c *Checkpointer) load(ctx context.Context) error {
	size, heads, err := c.l.TreeHeads(ctx)
	if err != nil {
		return fmt.Errorf("evidence: checkpoint: tree heads: %w", err)
	}
	c.heads = make(map[uuid.UUID]chainTip, len(heads))
	for id, seq := range heads {
		evs, err := c.l.ChainEventsFrom(ctx, id, seq, 1)
		if err != nil {
			return fmt.Errorf("evidence: checkpoint: chain %s head: %w", id, err)
		}
		tip := chainTip{seq: seq}
		if len(evs) == 1 && evs[0].ChainSeq == seq {
			tip.hash = evs[0].Hash
		}
		c.heads[id] = tip
	}
	c.size, c.ready = size, true
	return nil
}

// WriteCheckpointFile copies a checkpoint outside the database:
// dir/checkpoint-<size> and dir/latest, each written to a temporary file,
// synced and renamed, so a reader never sees half a checkpoint.
func WriteCheckpointFile(dir string, cp Checkpoint) error {
	if err := os.MkdirAll(dir, 0o700); err != nil { // checkpoints are evidence: the gateway's alone
		return fmt.Errorf("evidence: checkpoint dir: %w", err)
	}
	for _, name := range []string{"checkpoint-" + strconv.FormatInt(cp.Size, 10), "latest"} {
		if err := writeAtomic(filepath.Join(dir, name), []byte(cp.Note)); err != nil {
			return err
		}
	}
	return nil
}

func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-checkpoint-*")
	if err != nil {
		return fmt.Errorf("evidence: write %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("evidence: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("evidence: sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("evidence: write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("evidence: write %s: %w", path, err)
	}
	return nil
}
