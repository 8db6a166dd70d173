package evidence

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/mod/sumdb/note"
)

// Anchors are copies of the evidence kept outside the database, which a
// verifier holds the store against: what the store alone cannot show is a
// rollback to an earlier, consistent copy of itself, or the deletion of
// events no signed checkpoint covers yet. Two kinds, both signed with the
// checkpoint key, both written to evidence.checkpoint_dir:
//
//   - checkpoints (checkpoint-<size>, latest): the signed tree heads. The
//     store's tree must extend each one.
//   - chain heads (heads/<instance>.head): every gateway process's newest
//     committed chain event (instance, chain, sequence, hash), written
//     about once a second and once more at shutdown. The store must hold
//     that event, or, if retention dropped it, its leaf. A head covers the
//     events a crash leaves between two checkpoints.

// headTag is the second line of a chain head note. A checkpoint's second
// line is its size, so neither parses as the other.
const headTag = "portcullis chain head v1"

// ChainHeadNote is one signed chain head.
type ChainHeadNote struct {
	Origin     string
	InstanceID string
	ChainID    uuid.UUID
	Seq        int64
	Hash       []byte
	Time       time.Time
	Note       string
}

// SignChainHead signs a chain head with the checkpoint signer.
func SignChainHead(signer note.Signer, instanceID string, chainID uuid.UUID, seq int64, hash []byte, at time.Time) (ChainHeadNote, error) {
	if strings.ContainsAny(instanceID, "\n\r") || instanceID == "" {
		return ChainHeadNote{}, fmt.Errorf("evidence: chain head: instance id %q cannot be signed", instanceID)
	}
	if len(hash) != HashSize || seq < 1 {
		return ChainHeadNote{}, fmt.Errorf("evidence: chain head of %s: seq %d, %d-byte hash", chainID, seq, len(hash))
	}
	at = NormalizeTime(at)
	text := signer.Name() + "\n" + headTag + "\ninstance " + instanceID + "\nchain " + chainID.String() +
		"\nseq " + strconv.FormatInt(seq, 10) + "\nhash " + hex.EncodeToString(hash) + "\ntime " + at.Format(time.RFC3339Nano) + "\n"
	msg, err := note.Sign(&note.Note{Text: text}, signer)
	if err != nil {
		return ChainHeadNote{}, fmt.Errorf("evidence: sign chain head: %w", err)
	}
	return ChainHeadNote{Origin: signer.Name(), InstanceID: instanceID, ChainID: chainID, Seq: seq,
		Hash: append([]byte(nil), hash...), Time: at, Note: string(msg)}, nil
}

// OpenChainHead verifies a signed chain head note with the verifier key and
// parses it.
func OpenChainHead(signed []byte, verifierKey string) (ChainHeadNote, error) {
	v, err := note.NewVerifier(strings.TrimSpace(verifierKey))
	if err != nil {
		return ChainHeadNote{}, fmt.Errorf("evidence: verifier key: %w", err)
	}
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil {
		return ChainHeadNote{}, fmt.Errorf("%w: chain head signature: %v", ErrProofInvalid, err)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) != 8 || lines[7] != "" || lines[1] != headTag {
		return ChainHeadNote{}, fmt.Errorf("%w: not a chain head note", ErrProofInvalid)
	}
	if lines[0] != v.Name() {
		return ChainHeadNote{}, fmt.Errorf("%w: chain head origin %q is not the key's log %q", ErrProofInvalid, lines[0], v.Name())
	}
	field := func(i int, name string) (string, error) {
		val, ok := strings.CutPrefix(lines[i], name+" ")
		if !ok {
			return "", fmt.Errorf("%w: chain head line %d is not %q", ErrProofInvalid, i+1, name)
		}
		return val, nil
	}
	h := ChainHeadNote{Origin: lines[0], Note: string(signed)}
	var s string
	if h.InstanceID, err = field(2, "instance"); err != nil {
		return ChainHeadNote{}, err
	}
	if s, err = field(3, "chain"); err != nil {
		return ChainHeadNote{}, err
	}
	if h.ChainID, err = uuid.Parse(s); err != nil {
		return ChainHeadNote{}, fmt.Errorf("%w: chain head chain %q", ErrProofInvalid, s)
	}
	if s, err = field(4, "seq"); err != nil {
		return ChainHeadNote{}, err
	}
	if h.Seq, err = strconv.ParseInt(s, 10, 64); err != nil || h.Seq < 1 {
		return ChainHeadNote{}, fmt.Errorf("%w: chain head seq %q", ErrProofInvalid, s)
	}
	if s, err = field(5, "hash"); err != nil {
		return ChainHeadNote{}, err
	}
	if h.Hash, err = hex.DecodeString(s); err != nil || len(h.Hash) != HashSize {
		return ChainHeadNote{}, fmt.Errorf("%w: chain head hash %q", ErrProofInvalid, s)
	}
	if s, err = field(6, "time"); err != nil {
		return ChainHeadNote{}, err
	}
	if h.Time, err = time.Parse(time.RFC3339Nano, s); err != nil {
		return ChainHeadNote{}, fmt.Errorf("%w: chain head time %q", ErrProofInvalid, s)
	}
	return h, nil
}

// headsDir is the subdirectory of checkpoint_dir that holds chain heads.
const headsDir = "heads"

// headFileName names an instance's head file: the instance id with every
// byte outside [A-Za-z0-9._-] replaced, and a digest so two ids that
// differ only there never share a file.
func headFileName(instanceID string) string {
	var b strings.Builder
	for _, r := range instanceID {
		if r < 128 && (r == '.' || r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 64 {
		name = name[:64]
	}
	sum := ArgsDigest([]byte(instanceID))
	return name + "-" + sum[:12] + ".head"
}

// WriteChainHeadFile copies a chain head outside the database:
// dir/heads/<instance>.head, written atomically (temporary file, fsync,
// rename).
func WriteChainHeadFile(dir string, h ChainHeadNote) error {
	d := filepath.Join(dir, headsDir)
	if err := os.MkdirAll(d, 0o750); err != nil {
		return fmt.Errorf("evidence: chain head dir: %w", err)
	}
	return writeAtomic(filepath.Join(d, headFileName(h.InstanceID)), []byte(h.Note))
}

// AnchorFiles are the signed notes found in a checkpoint directory.
type AnchorFiles struct {
	Dir         string
	Checkpoints [][]byte
	Heads       [][]byte
	// Names are the files read, relative to Dir, for the report.
	Names []string
}

// ReadAnchorDir reads a checkpoint directory: every checkpoint-<size> and
// latest, and every heads/*.head. A missing directory is an error wrapping
// fs.ErrNotExist. Identical notes are read once.
func ReadAnchorDir(dir string) (AnchorFiles, error) {
	a := AnchorFiles{Dir: dir}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return a, fmt.Errorf("evidence: checkpoint dir: %w", err)
	}
	seen := map[string]bool{}
	add := func(rel string, heads bool) error {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			return fmt.Errorf("evidence: anchor %s: %w", rel, err)
		}
		if seen[string(b)] {
			return nil
		}
		seen[string(b)] = true
		a.Names = append(a.Names, rel)
		if heads {
			a.Heads = append(a.Heads, b)
		} else {
			a.Checkpoints = append(a.Checkpoints, b)
		}
		return nil
	}
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || !(name == "latest" || strings.HasPrefix(name, "checkpoint-")) {
			continue
		}
		if err := add(name, false); err != nil {
			return a, err
		}
	}
	hents, err := os.ReadDir(filepath.Join(dir, headsDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return a, fmt.Errorf("evidence: chain heads: %w", err)
	}
	for _, e := range hents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".head") {
			if err := add(filepath.Join(headsDir, e.Name()), true); err != nil {
				return a, err
			}
		}
	}
	return a, nil
}

// HeadRecorderOptions configure a HeadRecorder.
type HeadRecorderOptions struct {
	Signer note.Signer
	// Dir is evidence.checkpoint_dir.
	Dir string
	// Interval between writes when the head moved (default 1s).
	Interval time.Duration
	Logger   *slog.Logger
	Now      func() time.Time
}

// HeadRecorder copies a Writer's chain head to the checkpoint directory
// whenever it moved, at most once per Interval, and once more when
// stopped, after the Writer closed. The events a crash leaves after the
// last write (at most about one Interval of them) are not covered.
type HeadRecorder struct {
	w    *Writer
	opts HeadRecorderOptions
	last atomic.Pointer[chainHead]
	mu   sync.Mutex // one write at a time
}

// NewHeadRecorder checks the options.
func NewHeadRecorder(w *Writer, opts HeadRecorderOptions) (*HeadRecorder, error) {
	if opts.Signer == nil || opts.Dir == "" {
		return nil, errors.New("evidence: head recorder needs a signer and a directory")
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &HeadRecorder{w: w, opts: opts}, nil
}

// Run writes the head every Interval when it moved, until ctx ends.
func (r *HeadRecorder) Run(ctx context.Context) {
	Every(ctx, r.opts.Interval, func() {
		if err := r.Record(); err != nil {
			r.opts.Logger.Error("evidence: copy chain head outside the database", "error", err.Error())
		}
	})
}

// Record writes the writer's current head if it moved since the last
// write.
func (r *HeadRecorder) Record() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, seq, hash, ok := r.w.Head()
	if !ok {
		return nil
	}
	h := &chainHead{chainID: id, seq: seq, hash: hash}
	if last := r.last.Load(); last != nil && last.chainID == h.chainID && last.seq == h.seq {
		return nil
	}
	n, err := SignChainHead(r.opts.Signer, r.w.InstanceID(), h.chainID, h.seq, h.hash, r.opts.Now())
	if err != nil {
		return err
	}
	if err := WriteChainHeadFile(r.opts.Dir, n); err != nil {
		return err
	}
	r.last.Store(h)
	return nil
}

// chainHead is a Writer's last committed chain event.
type chainHead struct {
	chainID uuid.UUID
	seq     int64
	hash    []byte
}

// verifyHeads holds chain heads against the chain hashes Verify computed
// and the leaves it walked (headLeaves: the leaf hash of each (chain, seq)
// a head names, found in the tree, with whether retention dropped its
// event).
func verifyHeads(r *Report, heads []ChainHeadNote, hashes map[uuid.UUID][][]byte, leaves map[seqKey]headLeaf) {
	for _, h := range heads {
		hs := hashes[h.ChainID]
		at := fmt.Sprintf("chain head of instance %q copied out at %s", h.InstanceID, h.Time.Format(time.RFC3339))
		if h.Seq <= int64(len(hs)) && hs[h.Seq-1] != nil {
			if !bytes.Equal(hs[h.Seq-1], h.Hash) {
				r.add("chain_head", "%s: chain %s seq %d has another hash in the store: the chain was rewritten", at, h.ChainID, h.Seq)
			}
			continue
		}
		if lf, ok := leaves[seqKey{h.ChainID, h.Seq}]; ok && lf.retained {
			if lf.leaf != LeafHash(h.Hash) {
				r.add("chain_head", "%s: chain %s seq %d has another hash in the tree", at, h.ChainID, h.Seq)
			}
			continue
		}
		stored := int64(len(hs))
		for stored > 0 && hs[stored-1] == nil {
			stored--
		}
		if stored == 0 {
			r.add("deleted_tail", "%s: chain %s reached sequence %d, but the store holds none of its events", at, h.ChainID, h.Seq)
		} else {
			r.add("deleted_tail", "%s: chain %s reached sequence %d, but the store ends at %d: events were deleted or the store rolled back", at, h.ChainID, h.Seq, stored)
		}
	}
}

type headLeaf struct {
	leaf     [32]byte
	retained bool
}
