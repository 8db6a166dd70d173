package evidence_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// BenchmarkChainWork measures, per event, the hashing the Writer does for
// the chain, split by where it runs (the events are BenchmarkWriter's):
//
//   - digest: ContentDigest, in the appending goroutine (v3);
//   - link: ChainLinkHash, in the single commit loop (v3);
//   - v2-serial: the whole v2 chain hash, which the commit loop did before
//     v3.
//
// The commit loop is the writer's serial path: what it spends per event
// bounds receipts/s whatever the number of callers.
//
//	go test ./evidence -run '^$' -bench ChainWork -count 6
func BenchmarkChainWork(b *testing.B) {
	code := 0
	d := evidence.Event{ID: uuid.Must(uuid.NewV7()), Kind: evidence.KindDecision, Decision: wire.DecisionAllow, PrincipalID: "dev-agent",
		SessionID: "bench", CallID: "call", Tool: "Exec", Reasons: []string{}, PolicyRevision: "sha256:83d53ba08794",
		ArgsSHA256: "f6ca1fb5180f5968667c55b8b89f1a956fb41182f7e1b807c7a51da44bc928b9",
		Args:       json.RawMessage(`{"argv":["/usr/bin/echo","hello from portcullis"],"cwd":"/work"}`),
		Scope:      &wire.Scope{Backend: "process", EnvNames: []string{"HOME", "LANG", "PATH"}},
		TraceID:    "db0ab1cdb937f17a131ecad2fd8cb5aa", ChainID: uuid.Must(uuid.NewV7()), ChainSeq: 7}
	d.ReceiptID = d.ID
	o := evidence.Event{ID: uuid.Must(uuid.NewV7()), ReceiptID: d.ID, Kind: evidence.KindOutcome,
		Outcome: &wire.Outcome{Status: wire.StatusSucceeded, ExitCode: &code, Backend: "process", DurationMS: 8,
			OutputSHA256: "2cfce64efb92b310cf0628c0901580ba6b4762152a224099acff125dc678a4ff"},
		ChainID: d.ChainID, ChainSeq: 8}
	events := []evidence.Event{d, o}
	prev := make([]byte, evidence.HashSize)
	b.Run("digest", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := evidence.ContentDigest(events[i%2]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("link", func(b *testing.B) {
		dg, err := evidence.ContentDigest(d)
		if err != nil {
			b.Fatal(err)
		}
		for i := int64(0); b.Loop(); i++ {
			if prev, err = evidence.ChainLinkHash(prev, d.ChainID, i, dg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("v2-serial", func(b *testing.B) {
		var err error
		for i := 0; b.Loop(); i++ {
			if prev, err = evidence.LegacyChainHash(prev, events[i%2]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
