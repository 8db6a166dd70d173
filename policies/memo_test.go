package policies

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/portcullis/portcullis/wire"
)

// TestMemoFields: the memo keys on exactly what the rules read of input,
// and on all of it when a rule reads input whole or by a computed key.
func TestMemoFields(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, rego string
		want       []string // nil: whole input
		off        bool
	}{
		{"fields", `decision := {"allow": input.tool == "Exec", "reasons": [input.principal.id]}`, []string{"principal", "tool"}, false},
		{"nested refs", `decision := {"allow": input.args[input.purpose] == 1}`, []string{"args", "purpose"}, false},
		{"whole input", `decision := {"allow": count(input) > 0}`, nil, false},
		{"computed key", `k := "tool"
decision := {"allow": input[k] == "Exec"}`, nil, false},
		{"through a function", `f(x) := input.call_id == x
decision := {"allow": f("c")}`, []string{"call_id"}, false},
		{"clock", `decision := {"allow": time.now_ns() > 0, "reasons": [input.tool]}`, []string{"time", "tool"}, false},
		{"random", `decision := {"allow": rand.intn("x", 2) == 0}`, nil, true},
		{"with input in a test", `decision := {"allow": input.tool == "Exec"}
test_allow if { decision.allow with input as {"tool": "Exec"} }`, []string{"tool"}, false},
		{"with input from input", `d2 if { decision.allow with input as object.union(input, {"tool": "x"}) }
decision := {"allow": input.tool == "Exec"}`, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := loaded(t, policyFS(c.rego))
			m := e.live.Load().memo
			if c.off {
				if m != nil {
					t.Fatalf("memo on for a non-deterministic policy (fields %v)", m.fields)
				}
				return
			}
			if m == nil {
				t.Fatal("memo off")
			}
			if (c.want == nil) != (m.fields == nil) || !slices.Equal(m.fields, c.want) {
				t.Errorf("fields = %q (nil: whole), want %q", m.fields, c.want)
			}
		})
	}
}

// TestMemoAnswers: a remembered answer is given only for an input equal in
// every field the policy reads, and is the same as evaluating; a hit is
// never shared with another caller's changes.
func TestMemoAnswers(t *testing.T) {
	t.Parallel()
	const policy = `
decision := {"allow": true, "reasons": [sprintf("%s ran %v", [input.principal.id, input.args.argv])], "fs_grants": [{"path": "/usr", "mode": "r"}]} if input.tool == "Exec"
default decision := {"allow": false, "reasons": ["no"]}`
	e := loaded(t, policyFS(policy))
	ctx := context.Background()
	// The reference: the same bundle, never remembering.
	fresh := NewEngine(Options{MemoSize: -1, Now: func() time.Time { return fixedNow }})
	if _, err := fresh.Load(ctx, policyFS(policy), "test"); err != nil {
		t.Fatal(err)
	}
	if _, _, on := fresh.MemoStats(); on {
		t.Fatal("MemoSize -1 still remembers")
	}
	in := execInput("/usr/bin/git", "log")
	first, err := e.Decide(ctx, in)
	if err != nil || !first.Allow {
		t.Fatalf("Decide = %+v %v", first, err)
	}
	// A caller changes what it was given.
	first.Reasons[0] = "changed"
	first.FSGrants[0].Path = "/"
	first.Reasons = append(first.Reasons, "more")

	// call_id, session_id and time are not read: a hit.
	in.CallID, in.SessionID, in.Time = "other", "other", in.Time.Add(time.Hour)
	again, err := e.Decide(ctx, in)
	if err != nil || len(again.Reasons) != 1 || again.Reasons[0] != "agent-alpha ran [\"/usr/bin/git\", \"log\"]" || again.FSGrants[0].Path != "/usr" {
		t.Fatalf("hit = %+v %v: not the policy's answer", again, err)
	}
	if hits, misses, on := e.MemoStats(); !on || hits != 1 || misses != 1 {
		t.Errorf("MemoStats = %d hits %d misses %v, want 1 and 1", hits, misses, on)
	}

	// Any read field that differs is evaluated afresh.
	for _, change := range []func(){
		func() { in.Args["argv"] = []any{"/usr/bin/git", "push"} },
		func() { in.Principal.ID = "agent-beta" },
		func() { in.Tool = "fs.read" },
		func() { in.Args["timeout_s"] = 31 },
	} {
		change()
		got, err := e.Decide(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		want, err := fresh.Decide(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if got.Allow != want.Allow || strings.Join(got.Reasons, "|") != strings.Join(want.Reasons, "|") {
			t.Errorf("after a change: memo %+v, evaluation %+v", got, want)
		}
	}
	if hits, _, _ := e.MemoStats(); hits != 1 {
		t.Errorf("%d hits: a changed input was answered from memory", hits)
	}
}

// TestMemoNewBundle: a reload starts with no memory.
func TestMemoNewBundle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := loaded(t, policyFS(`decision := {"allow": input.tool == "Exec"}`))
	in := execInput("/usr/bin/true")
	if d, _ := e.Decide(ctx, in); !d.Allow {
		t.Fatal("first bundle denied")
	}
	if _, err := e.Load(ctx, policyFS(`decision := {"allow": input.tool == "nothing"}`), "test"); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.Decide(ctx, in); d.Allow {
		t.Error("the new bundle's decision came from the old bundle's memory")
	}
}

// TestMemoShippedPolicy: the shipped policy reads neither call_id nor
// time, so repeated calls hit.
func TestMemoShippedPolicy(t *testing.T) {
	t.Parallel()
	e := loaded(t, Shipped())
	m := e.live.Load().memo
	if m == nil || m.fields == nil {
		t.Fatalf("shipped policy not memoized by field: %+v", m)
	}
	for _, f := range m.fields {
		if f == "call_id" || f == "time" {
			t.Errorf("shipped policy reads input.%s: every call misses", f)
		}
	}
	in := execInput("/usr/bin/git", "log")
	k1, ok := m.keyOf(&in)
	in.CallID, in.Time = "x", in.Time.Add(time.Minute)
	if k2, _ := m.keyOf(&in); !ok || k1 != k2 {
		t.Error("keys differ in fields the policy does not read")
	}
	in.Args["argv"] = []any{"/usr/bin/git", "status"}
	if k3, _ := m.keyOf(&in); k3 == k1 {
		t.Error("keys equal for different args")
	}
}

// TestMemoKnowsEveryInputField: the memo can write every top-level field
// of the input document, so a policy reading a new one is keyed on it
// rather than answered for another input.
func TestMemoKnowsEveryInputField(t *testing.T) {
	t.Parallel()
	v, err := inputValue(execInput("/usr/bin/true"))
	if err != nil {
		t.Fatal(err)
	}
	obj := v.(ast.Object)
	for _, k := range obj.Keys() {
		name := string(k.Value.(ast.String))
		if _, ok := inputFields[name]; !ok {
			t.Errorf("input.%s is not in inputFields: a policy reading it would be remembered without it", name)
		}
	}
	if obj.Len() != len(inputFields) {
		t.Errorf("inputFields has %d fields, the input %d", len(inputFields), obj.Len())
	}
	// A field the memo cannot write turns it off for the call.
	m := &memo{fields: []string{"tool", "upstream"}}
	if _, ok := m.keyOf(&wire.PolicyInput{}); ok {
		t.Error("keyOf wrote a key without a field the policy reads")
	}
}
