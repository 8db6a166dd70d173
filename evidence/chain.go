package evidence

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
)

// HashSize is the size of chain hashes (SHA-256).
const HashSize = sha256.Size

// canonicalTag starts every canonical encoding so a hash of this version of
// the encoding can never be confused with another.
const canonicalTag = "portcullis/evidence/v3"

// legacyTag is the tag of the v2 encoding, which hashed the chain fields and
// the previous hash together with the content in one pass. Chains written
// before v3 still verify (see hashMatches).
const legacyTag = "portcullis/evidence/v2"

// ChainLink is the body (Args) of a chain_start event: the head of the
// previous chain of the same instance, so chains of successive processes
// link into one verifiable history. PrevChainID is empty for an instance's
// first chain; PrevHash is then 32 zero bytes.
type ChainLink struct {
	PrevChainID  string `json:"prev_chain_id"`
	PrevChainSeq int64  `json:"prev_chain_seq"`
	PrevHash     string `json:"prev_hash"`
}

// CanonicalEncoding is the deterministic byte encoding of an event's
// content, everything but its place in a chain. Every field is framed as an
// 8-byte big-endian length followed by its bytes, in this order:
//
//	"portcullis/evidence/v3", id (16 bytes), receipt_id (16), kind,
//	time (8-byte big-endian Unix microseconds, UTC), instance_id,
//	principal_id, session_id, call_id, tool, decision,
//	reasons (an 8-byte count, then each reason framed), policy_revision,
//	args_sha256, args (the exact stored JSON bytes, empty when absent),
//	scope (encoding/json of wire.Scope, empty when nil), trace_id,
//	parent_receipt_id (16 bytes, empty when nil), error_code,
//	outcome (encoding/json of wire.Outcome, empty when nil),
//	body (the exact stored JSON bytes, empty when absent),
//	then, only when the event has rule ids: "rule_ids", an 8-byte
//	count, and each rule id framed.
//
// Rule ids came after the v3 tag was cut: an event without them encodes
// exactly as before, so chains written before they existed still verify,
// and an event with them has a strictly longer encoding, so no event with
// rule ids encodes like one without.
//
// encoding/json of the wire structs is deterministic (fixed field order,
// sorted map keys) and stable across a store round trip, so hashes
// recompute from stored rows. ContentDigest hashes it; ChainHash links the
// digest into the chain.
func CanonicalEncoding(e Event) ([]byte, error) {
	return appendContent(make([]byte, 0, 512), canonicalTag, e)
}

// appendContent appends the framed content fields of e, starting with tag.
func appendContent(b []byte, tag string, e Event) ([]byte, error) {
	b = appendField(b, []byte(tag))
	b = appendField(b, e.ID[:])
	b = appendField(b, e.ReceiptID[:])
	b = appendString(b, e.Kind)
	b = appendField(b, binary.BigEndian.AppendUint64(nil, uint64(e.Time.UnixMicro())))
	b = appendString(b, e.InstanceID)
	b = appendString(b, e.PrincipalID)
	b = appendString(b, e.SessionID)
	b = appendString(b, e.CallID)
	b = appendString(b, e.Tool)
	b = appendString(b, e.Decision)
	b = binary.BigEndian.AppendUint64(b, uint64(len(e.Reasons)))
	for _, r := range e.Reasons {
		b = appendString(b, r)
	}
	b = appendString(b, e.PolicyRevision)
	b = appendString(b, e.ArgsSHA256)
	b = appendField(b, e.Args)
	if e.Scope != nil {
		js, err := json.Marshal(e.Scope)
		if err != nil {
			return nil, fmt.Errorf("encode scope of event %s: %w", e.ID, err)
		}
		b = appendField(b, js)
	} else {
		b = appendField(b, nil)
	}
	b = appendString(b, e.TraceID)
	if e.ParentReceiptID != nil {
		b = appendField(b, e.ParentReceiptID[:])
	} else {
		b = appendField(b, nil)
	}
	b = appendString(b, e.ErrorCode)
	if e.Outcome != nil {
		js, err := json.Marshal(e.Outcome)
		if err != nil {
			return nil, fmt.Errorf("encode outcome of event %s: %w", e.ID, err)
		}
		b = appendField(b, js)
	} else {
		b = appendField(b, nil)
	}
	b = appendField(b, e.Body)
	if len(e.RuleIDs) > 0 {
		b = appendString(b, "rule_ids")
		b = binary.BigEndian.AppendUint64(b, uint64(len(e.RuleIDs)))
		for _, r := range e.RuleIDs {
			b = appendString(b, r)
		}
	}
	return b, nil
}

func appendField(b, p []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(p)))
	return append(b, p...)
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// Digest is the SHA-256 of an event's canonical encoding.
type Digest [HashSize]byte

// ContentDigest is SHA-256(CanonicalEncoding(e)). It depends on the event
// alone, not on its place in a chain, so the Writer computes it in the
// appending goroutine, concurrently with other appends, and its commit loop
// only links digests (ChainLinkHash).
func ContentDigest(e Event) (Digest, error) {
	enc, err := CanonicalEncoding(e)
	if err != nil {
		return Digest{}, err
	}
	return sha256.Sum256(enc), nil
}

// ChainLinkHash links a content digest into a chain:
//
//	SHA-256(prev_hash (32 bytes) || chain_id (16) || chain_seq (8-byte big-endian) || digest (32))
//
// Every input has a fixed size, so the 88 bytes need no framing; the
// digest's own encoding starts with the version tag. prevHash must be a
// SHA-256 (the previous event's hash, or for a chain_start the previous
// chain's head, 32 zero bytes when there is none).
func ChainLinkHash(prevHash []byte, chainID uuid.UUID, seq int64, d Digest) ([]byte, error) {
	if len(prevHash) != HashSize {
		return nil, fmt.Errorf("prev_hash of chain %s seq %d is %d bytes, want %d", chainID, seq, len(prevHash), HashSize)
	}
	return linkHash(make([]byte, 0, HashSize), prevHash, chainID, seq, d), nil
}

// linkHash appends ChainLinkHash to dst; prevHash must be HashSize bytes.
func linkHash(dst, prevHash []byte, chainID uuid.UUID, seq int64, d Digest) []byte {
	var in [HashSize + 16 + 8 + HashSize]byte
	copy(in[:HashSize], prevHash)
	copy(in[HashSize:], chainID[:])
	binary.BigEndian.PutUint64(in[HashSize+16:], uint64(seq))
	copy(in[HashSize+24:], d[:])
	h := sha256.Sum256(in[:])
	return append(dst, h[:]...)
}

// ChainHash computes an event's chain hash from its content and its place
// in the chain (ChainID, ChainSeq): ChainLinkHash(prevHash, chain_id,
// chain_seq, ContentDigest(e)).
func ChainHash(prevHash []byte, e Event) ([]byte, error) {
	d, err := ContentDigest(e)
	if err != nil {
		return nil, err
	}
	return ChainLinkHash(prevHash, e.ChainID, e.ChainSeq, d)
}

// legacyChainHash is the v2 chain hash, SHA-256(prevHash || v2 encoding),
// where the v2 encoding is the v3 content fields under the v2 tag followed
// by chain_id and chain_seq framed. It was computed serially in the
// commit loop; v3 moved the content digest out of it.
func legacyChainHash(prevHash []byte, e Event) ([]byte, error) {
	b, err := appendContent(make([]byte, 0, 512), legacyTag, e)
	if err != nil {
		return nil, err
	}
	b = appendField(b, e.ChainID[:])
	b = appendField(b, binary.BigEndian.AppendUint64(nil, uint64(e.ChainSeq)))
	h := sha256.New()
	h.Write(prevHash)
	h.Write(b)
	return h.Sum(nil), nil
}

// hashMatches reports whether e's stored Hash is its chain hash after
// prevHash. A v3 hash is checked first; an event written before v3 is
// checked against the v2 hash. Both are SHA-256 over framed encodings with
// distinct tags, so accepting either gives a forger nothing: a change to
// the content still needs a SHA-256 second preimage.
func hashMatches(prevHash []byte, e Event) (bool, error) {
	h, err := ChainHash(prevHash, e)
	if err == nil && bytes.Equal(h, e.Hash) {
		return true, nil
	}
	lh, lerr := legacyChainHash(prevHash, e)
	if lerr == nil && bytes.Equal(lh, e.Hash) {
		return true, nil
	}
	if err == nil {
		err = lerr
	}
	return false, err
}

// VerifyChain recomputes one chain from its stored events, given in sequence
// order: the first is a chain_start whose body names the PrevHash it links
// to, sequence numbers run 1, 2, 3… without gaps, every PrevHash is the
// previous Hash and every Hash recomputes. Any mismatch wraps
// ErrChainBroken and names the first bad event.
func VerifyChain(events []Event) error {
	if len(events) == 0 {
		return fmt.Errorf("%w: no events", ErrChainBroken)
	}
	first := events[0]
	if first.Kind != KindChainStart {
		return fmt.Errorf("%w: chain %s starts with a %q event, not chain_start", ErrChainBroken, first.ChainID, first.Kind)
	}
	var link ChainLink
	if err := json.Unmarshal(first.Args, &link); err != nil {
		return fmt.Errorf("%w: chain %s: chain_start body: %v", ErrChainBroken, first.ChainID, err)
	}
	linked, err := hex.DecodeString(link.PrevHash)
	if err != nil || len(linked) != HashSize {
		return fmt.Errorf("%w: chain %s: chain_start prev_hash %q is not a SHA-256 hex", ErrChainBroken, first.ChainID, link.PrevHash)
	}
	if link.PrevChainID != "" {
		if _, err := uuid.Parse(link.PrevChainID); err != nil {
			return fmt.Errorf("%w: chain %s: chain_start prev_chain_id %q: %v", ErrChainBroken, first.ChainID, link.PrevChainID, err)
		}
	}
	prev := linked
	for i, e := range events {
		if e.ChainID != first.ChainID {
			return fmt.Errorf("%w: event %s at position %d belongs to chain %s, not %s", ErrChainBroken, e.ID, i, e.ChainID, first.ChainID)
		}
		if want := int64(i + 1); e.ChainSeq != want {
			return fmt.Errorf("%w: chain %s: event %s has sequence %d, want %d", ErrChainBroken, e.ChainID, e.ID, e.ChainSeq, want)
		}
		if i > 0 && e.Kind == KindChainStart {
			return fmt.Errorf("%w: chain %s: second chain_start %s at sequence %d", ErrChainBroken, e.ChainID, e.ID, e.ChainSeq)
		}
		if !bytes.Equal(e.PrevHash, prev) {
			return fmt.Errorf("%w: chain %s: event %s (seq %d) prev_hash does not match the previous hash", ErrChainBroken, e.ChainID, e.ID, e.ChainSeq)
		}
		ok, err := hashMatches(prev, e)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrChainBroken, err)
		}
		if !ok {
			return fmt.Errorf("%w: chain %s: event %s (seq %d) content does not match its hash", ErrChainBroken, e.ChainID, e.ID, e.ChainSeq)
		}
		prev = e.Hash
	}
	return nil
}
