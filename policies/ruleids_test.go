package policies

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestShippedRuleIDsThroughEngine: the shipped policy's rule ids reach the
// Decision through the engine (fast path and general parser alike), and
// dry-run explanations still name the rule behind each reason.
func TestShippedRuleIDsThroughEngine(t *testing.T) {
	t.Parallel()
	e := loaded(t, Shipped())
	ctx := context.Background()
	d, err := e.Decide(ctx, execInput("/usr/bin/git", "log", "--oneline"))
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allow || !slices.Equal(d.RuleIDs, []string{"grant:role/agent/Exec", "exec.shape.git.log"}) {
		t.Errorf("allowed git log: allow=%v rule_ids=%q reasons=%q", d.Allow, d.RuleIDs, d.Reasons)
	}
	in := execInput("/usr/bin/rm", "-rf", "/")
	d, err = e.Decide(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allow || !slices.Equal(d.RuleIDs, []string{"exec.shape_mismatch"}) {
		t.Errorf("denied rm: allow=%v rule_ids=%q", d.Allow, d.RuleIDs)
	}
	xd, ex, err := e.Explain(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(xd.RuleIDs, d.RuleIDs) || len(ex) != 1 {
		t.Fatalf("explain: rule_ids=%q explanation=%+v", xd.RuleIDs, ex)
	}
	found := false
	for _, r := range ex[0].Rules {
		found = found || strings.HasPrefix(r, "data.portcullis.exec.denials (") && strings.Contains(r, "exec.rego:")
	}
	if !found || !strings.Contains(ex[0].Rules[0], "data.portcullis.decision") {
		t.Errorf("explanation rules = %q, want data.portcullis.decision first and the exec.rego denials rule", ex[0].Rules)
	}
}
