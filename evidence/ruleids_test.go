package evidence_test

import (
	"bytes"
	"testing"

	"github.com/portcullis/portcullis/evidence"
)

// TestCanonicalEncodingRuleIDs: rule ids are covered by the chain hash
// without changing the encoding of events that have none (chains written
// before rule ids keep verifying), and they are framed, so ids cannot be
// regrouped or reordered without changing the hash.
func TestCanonicalEncodingRuleIDs(t *testing.T) {
	t.Parallel()
	base := goldenEvent()
	enc := func(ids []string) []byte {
		t.Helper()
		e := base
		e.RuleIDs = ids
		b, err := evidence.CanonicalEncoding(e)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	none := enc(nil)
	if !bytes.Equal(none, enc([]string{})) {
		t.Error("an empty rule id list encodes differently from none")
	}
	with := enc([]string{"a", "b"})
	if !bytes.HasPrefix(with, none) || len(with) <= len(none) {
		t.Error("rule ids do not extend the encoding of the event without them")
	}
	seen := map[string]bool{string(none): true, string(with): true}
	for _, ids := range [][]string{{"ab"}, {"b", "a"}, {"a"}, {"a", "b", "c"}} {
		b := string(enc(ids))
		if seen[b] {
			t.Errorf("rule ids %q encode like another list", ids)
		}
		seen[b] = true
	}
}
