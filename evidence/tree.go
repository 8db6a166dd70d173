package evidence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/portcullis/portcullis/wire"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// The Merkle tree (RFC 6962, via golang.org/x/mod/sumdb/tlog) holds every
// chained event as one leaf, chain by chain in chain order. A leaf's data
// is the event's chain hash, which commits to the event's content, its
// chain position and everything before it in its chain, so one inclusion
// proof of a leaf pins the event exactly. The tree's signed checkpoints are
// the anchors: copied out of the database, they let an auditor prove later
// that nothing checkpointed was changed, removed or reordered.

// ErrProofInvalid means a checkpoint, its signature or an inclusion proof
// does not verify.
var ErrProofInvalid = errors.New("evidence: proof does not verify")

// LeafHash is the RFC 6962 leaf hash of an event: SHA-256(0x00 || hash).
func LeafHash(eventHash []byte) tlog.Hash { return tlog.RecordHash(eventHash) }

// Checkpoint is one signed tree head.
type Checkpoint struct {
	// Origin names the log: the signing key's name.
	Origin string
	// Size is the number of leaves.
	Size int64
	// Root is the RFC 6962 root hash of the first Size leaves.
	Root tlog.Hash
	// Note is the signed note, C2SP tlog-checkpoint text followed by the
	// signature lines, exactly as signed.
	Note string
}

// checkpointText is the C2SP tlog-checkpoint body: origin, size, root.
func checkpointText(origin string, size int64, root tlog.Hash) string {
	return origin + "\n" + strconv.FormatInt(size, 10) + "\n" + base64.StdEncoding.EncodeToString(root[:]) + "\n"
}

// SignCheckpoint signs the tree head with the note signer; the origin line
// is the signer's name, so a verifier key names its log.
func SignCheckpoint(signer note.Signer, size int64, root tlog.Hash) (Checkpoint, error) {
	msg, err := note.Sign(&note.Note{Text: checkpointText(signer.Name(), size, root)}, signer)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("evidence: sign checkpoint: %w", err)
	}
	return Checkpoint{Origin: signer.Name(), Size: size, Root: root, Note: string(msg)}, nil
}

// OpenCheckpoint verifies a signed checkpoint note with the verifier key
// (note verifier format "name+hash+key") and parses it. A note that is not
// signed by that key, or whose origin is not the key's name, is refused.
func OpenCheckpoint(signed []byte, verifierKey string) (Checkpoint, error) {
	v, err := note.NewVerifier(strings.TrimSpace(verifierKey))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("evidence: verifier key: %w", err)
	}
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint signature: %v", ErrProofInvalid, err)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) < 4 || lines[len(lines)-1] != "" {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint body is not origin, size, root", ErrProofInvalid)
	}
	if lines[0] != v.Name() {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint origin %q is not the key's log %q", ErrProofInvalid, lines[0], v.Name())
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint size %q", ErrProofInvalid, lines[1])
	}
	raw, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(raw) != tlog.HashSize {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint root %q", ErrProofInvalid, lines[2])
	}
	var root tlog.Hash
	copy(root[:], raw)
	return Checkpoint{Origin: lines[0], Size: size, Root: root, Note: string(signed)}, nil
}

// InclusionProof proves that one event is leaf LeafIndex of the tree a
// signed checkpoint commits to. It is the wire type, so what
// GET /v1/receipts/{id}/proof returns decodes straight into it.
type InclusionProof = wire.InclusionProof

// VerifyInclusion checks an inclusion proof offline: the checkpoint is
// signed by verifierKey, the leaf hash is the hash of the event hash, and
// the audit path leads from the leaf to the checkpoint's root. It needs
// nothing but the proof and the key, so an SDK can copy it. A nil error
// means the event with that chain hash is in the signed log.
func VerifyInclusion(p InclusionProof, verifierKey string) error {
	cp, err := OpenCheckpoint([]byte(p.Checkpoint), verifierKey)
	if err != nil {
		return err
	}
	if cp.Size != p.TreeSize {
		return fmt.Errorf("%w: proof says tree size %d, checkpoint %d", ErrProofInvalid, p.TreeSize, cp.Size)
	}
	if p.LeafIndex < 0 || p.LeafIndex >= cp.Size {
		return fmt.Errorf("%w: leaf %d outside a tree of %d", ErrProofInvalid, p.LeafIndex, cp.Size)
	}
	eh, err := decodeHex(p.EventHash)
	if err != nil || len(eh) != HashSize {
		return fmt.Errorf("%w: event_hash is not a SHA-256 hex", ErrProofInvalid)
	}
	leaf := LeafHash(eh)
	if lh, err := decodeHex(p.LeafHash); err != nil || !bytes.Equal(lh, leaf[:]) {
		return fmt.Errorf("%w: leaf_hash is not the hash of event_hash", ErrProofInvalid)
	}
	path := make(tlog.RecordProof, len(p.Proof))
	for i, s := range p.Proof {
		b, err := decodeHex(s)
		if err != nil || len(b) != tlog.HashSize {
			return fmt.Errorf("%w: proof[%d] is not a hash", ErrProofInvalid, i)
		}
		copy(path[i][:], b)
	}
	if err := tlog.CheckRecord(path, cp.Size, cp.Root, p.LeafIndex, leaf); err != nil {
		return fmt.Errorf("%w: leaf %d: %v", ErrProofInvalid, p.LeafIndex, err)
	}
	return nil
}

// VerifierKeyFromSigningKey derives the public verifier key ("name+hash+
// key") from a note signing key ("PRIVATE+KEY+name+hash+key", Ed25519).
func VerifierKeyFromSigningKey(skey string) (string, error) {
	skey = strings.TrimSpace(skey)
	signer, err := note.NewSigner(skey)
	if err != nil {
		return "", fmt.Errorf("evidence: signing key: %w", err)
	}
	// PRIVATE+KEY+name+hash+key: the key is the fifth field (base64 may
	// itself contain '+').
	parts := strings.SplitN(skey, "+", 5)
	raw, err := base64.StdEncoding.DecodeString(parts[len(parts)-1])
	if err != nil || len(raw) != 1+ed25519.SeedSize {
		return "", errors.New("evidence: signing key: not an Ed25519 note key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	return note.NewEd25519VerifierKey(signer.Name(), pub)
}

// RootBuilder computes RFC 6962 roots of a growing list of leaves in
// O(log n) memory, so verification can recompute a tree of any size
// without holding it.
type RootBuilder struct {
	// stack holds the roots of the perfect subtrees of the leaves so far,
	// largest first; sizes are the binary digits of n.
	stack []tlog.Hash
	sizes []int64
	n     int64
}

// Add appends one leaf hash.
func (b *RootBuilder) Add(leaf tlog.Hash) {
	b.stack = append(b.stack, leaf)
	b.sizes = append(b.sizes, 1)
	b.n++
	for k := len(b.stack); k >= 2 && b.sizes[k-1] == b.sizes[k-2]; k = len(b.stack) {
		h := tlog.NodeHash(b.stack[k-2], b.stack[k-1])
		b.stack = append(b.stack[:k-2], h)
		b.sizes = append(b.sizes[:k-2], b.sizes[k-2]*2)
	}
}

// Size is the number of leaves added.
func (b *RootBuilder) Size() int64 { return b.n }

// Root is the RFC 6962 root of the leaves added so far (the hash of the
// empty string for none).
func (b *RootBuilder) Root() tlog.Hash {
	if len(b.stack) == 0 {
		return tlog.Hash(emptyRoot)
	}
	h := b.stack[len(b.stack)-1]
	for i := len(b.stack) - 2; i >= 0; i-- {
		h = tlog.NodeHash(b.stack[i], h)
	}
	return h
}

// emptyRoot is SHA-256 of the empty string, RFC 6962's root of no leaves.
var emptyRoot = [32]byte{0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
	0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55}

func decodeHex(s string) ([]byte, error) { return hex.DecodeString(s) }

// ProveEvent builds the inclusion proof of one event against the latest
// checkpoint. ErrNotFound means the event is not checkpointed yet.
func ProveEvent(ctx context.Context, l Ledger, eventID uuid.UUID) (InclusionProof, error) {
	leaf, err := l.LeafOf(ctx, eventID)
	if err != nil {
		return InclusionProof{}, err
	}
	cp, err := l.LatestCheckpoint(ctx)
	if err != nil {
		return InclusionProof{}, err
	}
	return proveLeaf(ctx, l, eventID, leaf, cp)
}

// proveLeaf proves one leaf against a given checkpoint, so several events
// can be proven against the same tree head.
func proveLeaf(ctx context.Context, l Ledger, eventID uuid.UUID, leaf Leaf, cp StoredCheckpoint) (InclusionProof, error) {
	if leaf.Index >= cp.Size {
		return InclusionProof{}, fmt.Errorf("event %s is not under a checkpoint yet: %w", eventID, ErrNotFound)
	}
	evs, err := l.ChainEventsFrom(ctx, leaf.ChainID, leaf.ChainSeq, 1)
	if err != nil {
		return InclusionProof{}, err
	}
	if len(evs) != 1 || evs[0].ID != eventID {
		return InclusionProof{}, fmt.Errorf("evidence: leaf %d names event %s, which the store no longer holds at chain %s seq %d",
			leaf.Index, eventID, leaf.ChainID, leaf.ChainSeq)
	}
	path, err := tlog.ProveRecord(cp.Size, leaf.Index, HashReader(ctx, l))
	if err != nil {
		return InclusionProof{}, fmt.Errorf("evidence: prove leaf %d in %d: %w", leaf.Index, cp.Size, err)
	}
	lh := LeafHash(evs[0].Hash)
	p := InclusionProof{
		Checkpoint: cp.Note, TreeSize: cp.Size, EventID: eventID.String(),
		EventHash: hex.EncodeToString(evs[0].Hash), LeafIndex: leaf.Index,
		LeafHash: hex.EncodeToString(lh[:]), Proof: make([]string, len(path)),
	}
	for i, h := range path {
		p.Proof[i] = hex.EncodeToString(h[:])
	}
	return p, nil
}
