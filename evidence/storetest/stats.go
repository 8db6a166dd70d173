package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// testStatsToolDecisionRules: stats buckets count decisions per (tool,
// decision) and per rule id from the checkpointer's rollups; a decision
// counts once under each of its distinct rule ids, top cuts by_rule to the
// most frequent ids with the rest under wire.StatsOtherRules, and
// decisions not checkpointed yet are in no count.
// sumBuckets adds up every bucket of st.
func sumBuckets(st wire.EvidenceStats) wire.StatsBucket {
	out := wire.StatsBucket{ByToolDecision: map[string]map[string]int64{}, ByRule: map[string]int64{}, ByTool: map[string]int64{}}
	for _, b := range st.Buckets {
		out.Total += b.Total
		for tool, m := range b.ByToolDecision {
			if out.ByToolDecision[tool] == nil {
				out.ByToolDecision[tool] = map[string]int64{}
			}
			for dec, n := range m {
				out.ByToolDecision[tool][dec] += n
			}
		}
		for tool, n := range b.ByTool {
			out.ByTool[tool] += n
		}
		for r, n := range b.ByRule {
			out.ByRule[r] += n
		}
	}
	return out
}

func testStatsToolDecisionRules(t *testing.T, s evidence.Store) {
	ctx := ctxFor(t)
	l := ledger(t, s)
	k := newKeys(t, "test.portcullis/stats")
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-s"})
	type call struct {
		tool, decision string
		rules          []string
	}
	calls := []call{
		{"Exec", wire.DecisionAllow, []string{"grant:role/agent/Exec"}},
		{"Exec", wire.DecisionAllow, []string{"grant:role/agent/Exec"}},
		{"Exec", wire.DecisionAllow, nil},
		{"Exec", wire.DecisionDeny, []string{"exec.shape_mismatch", "exec.argv0_dir", "exec.shape_mismatch"}},
		{"Read", wire.DecisionAllow, []string{"grant:role/agent/Read"}},
		{"Read", wire.DecisionDeny, []string{"fs.outside_root"}},
		{"Read", wire.DecisionDeny, []string{"fs.outside_root", "fs.symlink"}},
		{"Write", wire.DecisionInvalid, nil},
	}
	// One instant for every call: top is per bucket, so calls written
	// across midnight (or an hour boundary) UTC would split the counts.
	now := time.Now().UTC()
	for i, c := range calls {
		d := decision(t, fmt.Sprintf("stats-%d", i))
		d.Tool, d.Decision, d.RuleIDs, d.Time = c.tool, c.decision, c.rules, now
		if err := w.Append(ctx, d); err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	closeWriter(t, w)
	cp, err := evidence.NewCheckpointer(l, evidence.CheckpointerOptions{Signer: k.signer})
	if err != nil {
		t.Fatal(err)
	}
	pass(t, cp, int64(1+len(calls)))
	// Not checkpointed: counted nowhere.
	later := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-s2"})
	d := decision(t, "later")
	d.RuleIDs = []string{"later.rule"}
	if err := later.Append(ctx, d); err != nil {
		t.Fatal(err)
	}
	closeWriter(t, later)

	a := evidence.NewAuditor(l, k.verifier)
	q := evidence.StatsQuery{Since: now.Add(-48 * time.Hour), Until: now.Add(time.Hour), Interval: "day"}
	st, err := a.Stats(ctx, q)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.Top != evidence.DefaultStatsTop {
		t.Errorf("Stats top = %d, want the default %d", st.Top, evidence.DefaultStatsTop)
	}
	got := sumBuckets(st)
	wantTD := map[string]map[string]int64{
		"Exec":  {wire.DecisionAllow: 3, wire.DecisionDeny: 1},
		"Read":  {wire.DecisionAllow: 1, wire.DecisionDeny: 2},
		"Write": {wire.DecisionInvalid: 1},
	}
	if got.Total != int64(len(calls)) {
		t.Errorf("total = %d, want %d", got.Total, len(calls))
	}
	if diff := cmp.Diff(wantTD, got.ByToolDecision); diff != "" {
		t.Errorf("by_tool_decision (-want +got):\n%s", diff)
	}
	for tool, m := range got.ByToolDecision {
		var n int64
		for _, v := range m {
			n += v
		}
		if n != got.ByTool[tool] {
			t.Errorf("by_tool_decision[%s] sums to %d, by_tool says %d", tool, n, got.ByTool[tool])
		}
	}
	wantRules := map[string]int64{
		"grant:role/agent/Exec": 2, "exec.shape_mismatch": 1, "exec.argv0_dir": 1,
		"grant:role/agent/Read": 1, "fs.outside_root": 2, "fs.symlink": 1,
	}
	if diff := cmp.Diff(wantRules, got.ByRule); diff != "" {
		t.Errorf("by_rule (-want +got):\n%s", diff)
	}

	// top=2: the two most frequent ids (ties broken by id), the rest summed.
	q.Top = 2
	st, err = a.Stats(ctx, q)
	if err != nil {
		t.Fatalf("Stats top=2: %v", err)
	}
	if len(st.Buckets) != 1 || st.Top != 2 {
		t.Fatalf("Stats top=2 = %+v, want one day bucket", st)
	}
	wantTop := map[string]int64{"fs.outside_root": 2, "grant:role/agent/Exec": 2, wire.StatsOtherRules: 4}
	if diff := cmp.Diff(wantTop, st.Buckets[0].ByRule); diff != "" {
		t.Errorf("by_rule with top=2 (-want +got):\n%s", diff)
	}
	for _, top := range []int{-1, evidence.MaxStatsTop + 1} {
		q.Top = top
		if _, err := a.Stats(ctx, q); err == nil {
			t.Errorf("Stats(top=%d) succeeded, want ErrBadFilter", top)
		}
	}

	// Hour buckets carry the same counts.
	st, err = a.Stats(ctx, evidence.StatsQuery{Since: now.Add(-2 * time.Hour), Until: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got := sumBuckets(st); !cmp.Equal(wantTD, got.ByToolDecision) || !cmp.Equal(wantRules, got.ByRule) {
		t.Errorf("hour buckets = %+v %+v", got.ByToolDecision, got.ByRule)
	}
}

// RuleRollupBackfill proves migration 00006 counts decisions checkpointed
// before it existed: on a store open returns (at the latest schema) it
// writes and checkpoints decisions with rule ids, then rolls the schema
// back to before 00006 by hand (drops the rule rollup, forgets the
// version) and writes one more decision, not checkpointed. It then closes
// the store and calls open again for the same database, which migrates;
// by_rule must then count the old decisions once, and the new one once
// the checkpointer reaches it.
func RuleRollupBackfill(t *testing.T, open func(t *testing.T) (evidence.Store, error)) {
	ctx := ctxFor(t)
	s, err := open(t)
	if err != nil {
		t.Fatal(err)
	}
	down, ok := s.(Downgrader)
	if !ok {
		t.Fatalf("%T cannot migrate down", s)
	}
	k := newKeys(t, "test.portcullis/backfill")
	w := evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-b"})
	for i, rules := range [][]string{{"a.rule", "b.rule", "a.rule"}, {"a.rule"}, nil} {
		d := decision(t, fmt.Sprintf("old-%d", i))
		d.RuleIDs = rules
		if err := w.Append(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	closeWriter(t, w)
	c, err := evidence.NewCheckpointer(ledger(t, s), evidence.CheckpointerOptions{Signer: k.signer})
	if err != nil {
		t.Fatal(err)
	}
	pass(t, c, 4)
	// Back to the schema before the rule rollup (migration 6), with every
	// later migration undone too, as a store of that age would be.
	if err := down.MigrateDownTo(ctx, 5); err != nil {
		t.Fatalf("migrate down to 5: %v", err)
	}
	w = evidence.NewWriter(s, evidence.WriterOptions{InstanceID: "inst-b"})
	d := decision(t, "new")
	d.RuleIDs = []string{"b.rule", "c.rule"}
	if err := w.Append(ctx, d); err != nil {
		t.Fatal(err)
	}
	closeWriter(t, w)

	if c, ok := s.(interface{ Close() error }); ok {
		_ = c.Close()
	}
	if s, err = open(t); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if c, ok := s.(interface{ Close() error }); ok {
		t.Cleanup(func() { _ = c.Close() })
	}
	l := ledger(t, s)
	a := evidence.NewAuditor(l, k.verifier)
	now := time.Now().UTC()
	q := evidence.StatsQuery{Since: now.Add(-48 * time.Hour), Until: now.Add(time.Hour), Interval: "day"}
	rules := func() map[string]int64 {
		st, err := a.Stats(ctx, q)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		out := map[string]int64{}
		for _, b := range st.Buckets {
			for r, n := range b.ByRule {
				out[r] += n
			}
		}
		return out
	}
	if diff := cmp.Diff(map[string]int64{"a.rule": 2, "b.rule": 1}, rules()); diff != "" {
		t.Errorf("by_rule after the migration backfill (-want +got):\n%s", diff)
	}
	c, err = evidence.NewCheckpointer(l, evidence.CheckpointerOptions{Signer: k.signer})
	if err != nil {
		t.Fatal(err)
	}
	pass(t, c, 6) // the second writer opened a new chain: its chain_start and the decision
	if diff := cmp.Diff(map[string]int64{"a.rule": 2, "b.rule": 2, "c.rule": 1}, rules()); diff != "" {
		t.Errorf("by_rule after the next checkpoint (-want +got):\n%s", diff)
	}
}
