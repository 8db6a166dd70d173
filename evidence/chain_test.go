package evidence_test

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// goldenEvent is the fixed event whose hashes the golden tests pin.
func goldenEvent() evidence.Event {
	id := uuid.MustParse("01968a3c-0000-7000-8000-000000000001")
	parent := uuid.MustParse("01968a3c-0000-7000-8000-000000000002")
	code := 0
	return evidence.Event{ID: id, ReceiptID: id, Kind: evidence.KindDecision,
		Time: time.Date(2026, 11, 22, 10, 0, 0, 123456000, time.UTC), InstanceID: "gw-1", PrincipalID: "agent-alpha",
		SessionID: "run-42", CallID: "call_abc", Tool: "Exec", Decision: "allow", Reasons: []string{"ok"},
		PolicyRevision: "rev", ArgsSHA256: "ab", Args: json.RawMessage(`{"argv":["/bin/true"]}`),
		Scope: &wire.Scope{Network: wire.Network{Posture: "off"}}, TraceID: "t", ParentReceiptID: &parent,
		Outcome: &wire.Outcome{Status: "succeeded", ExitCode: &code}, ChainID: parent, ChainSeq: 2}
}

// TestLegacyV2Hash pins the v2 chain hash (the golden value of the build
// before v3), so chains written by it keep verifying.
func TestLegacyV2Hash(t *testing.T) {
	t.Parallel()
	h, err := evidence.LegacyChainHash(make([]byte, 32), goldenEvent())
	if err != nil {
		t.Fatal(err)
	}
	const want = "a69ad1f0f8020d35c79a69eb425d6ace150c61fe54f7cf79ddd7edd2ce390f94"
	if got := hex.EncodeToString(h); got != want {
		t.Errorf("v2 hash = %s, want %s", got, want)
	}
}

// TestChainHashIsDigestLink: the chain hash is exactly the link of the
// content digest, and the digest ignores the event's place in the chain
// (that is what lets the Writer compute it before sequencing).
func TestChainHashIsDigestLink(t *testing.T) {
	t.Parallel()
	e := goldenEvent()
	prev := make([]byte, 32)
	prev[0] = 7
	d, err := evidence.ContentDigest(e)
	if err != nil {
		t.Fatal(err)
	}
	moved := e
	moved.ChainID, moved.ChainSeq = uuid.New(), 99
	if d2, _ := evidence.ContentDigest(moved); d2 != d {
		t.Error("content digest depends on chain_id/chain_seq")
	}
	link, err := evidence.ChainLinkHash(prev, e.ChainID, e.ChainSeq, d)
	if err != nil {
		t.Fatal(err)
	}
	full, err := evidence.ChainHash(prev, e)
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(link) != hex.EncodeToString(full) {
		t.Errorf("ChainHash %x != ChainLinkHash(ContentDigest) %x", full, link)
	}
	if _, err := evidence.ChainLinkHash(prev[:31], e.ChainID, e.ChainSeq, d); err == nil {
		t.Error("ChainLinkHash accepted a 31-byte prev_hash")
	}
	// The place in the chain is still covered by the hash.
	for name, m := range map[string]func(*evidence.Event){
		"chain_id":  func(e *evidence.Event) { e.ChainID = uuid.New() },
		"chain_seq": func(e *evidence.Event) { e.ChainSeq++ },
	} {
		c := e
		m(&c)
		if h, _ := evidence.ChainHash(prev, c); hex.EncodeToString(h) == hex.EncodeToString(full) {
			t.Errorf("changing %s does not change the chain hash", name)
		}
	}
}

// legacyChain builds a two-event chain hashed the v2 way.
func legacyChain(t *testing.T) []evidence.Event {
	t.Helper()
	chain := uuid.MustParse("01968a3c-0000-7000-8000-0000000000aa")
	zero := make([]byte, 32)
	link, _ := json.Marshal(evidence.ChainLink{PrevHash: hex.EncodeToString(zero)})
	start := evidence.Event{ID: chain, ReceiptID: chain, Kind: evidence.KindChainStart, InstanceID: "old",
		Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Args: link, ChainID: chain, ChainSeq: 1, PrevHash: zero}
	var err error
	if start.Hash, err = evidence.LegacyChainHash(zero, start); err != nil {
		t.Fatal(err)
	}
	e := goldenEvent()
	e.ChainID, e.ChainSeq, e.PrevHash = chain, 2, start.Hash
	if e.Hash, err = evidence.LegacyChainHash(start.Hash, e); err != nil {
		t.Fatal(err)
	}
	return []evidence.Event{start, e}
}

// TestVerifyChainLegacy: a chain written with the v2 hash still verifies,
// and tampering with it is still found.
func TestVerifyChainLegacy(t *testing.T) {
	t.Parallel()
	if err := evidence.VerifyChain(legacyChain(t)); err != nil {
		t.Fatalf("VerifyChain(v2 chain) = %v", err)
	}
	evs := legacyChain(t)
	evs[1].Tool = "Other"
	if err := evidence.VerifyChain(evs); !errors.Is(err, evidence.ErrChainBroken) {
		t.Errorf("VerifyChain(altered v2 chain) = %v, want ErrChainBroken", err)
	}
}
