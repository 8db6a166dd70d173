package policies

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/portcullis/portcullis/wire"
)

// Explain evaluates in like Decide, tracing the evaluation, and says which
// rules produced each denial reason. It is for dry runs and authoring only:
// tracing costs several times a plain evaluation, so the call path never
// uses it.
func (e *Engine) Explain(ctx context.Context, in wire.PolicyInput) (wire.Decision, []wire.ReasonSource, error) {
	c := e.live.Load()
	if c == nil {
		return wire.Decision{}, nil, ErrNoPolicy
	}
	if in.Time.IsZero() {
		in.Time = e.now()
	}
	input, err := inputValue(in)
	if err != nil {
		return wire.Decision{}, nil, fmt.Errorf("policy input: %w", err)
	}
	tr := &reasonTracer{produced: map[string]map[string]bool{}}
	// No seeded cache: every rule is evaluated, so the trace is complete.
	rs, err := c.query.Eval(ctx, rego.EvalParsedInput(input), rego.EvalTime(in.Time),
		rego.EvalGenerateJSON(keepAST), rego.EvalQueryTracer(tr))
	if err != nil {
		return wire.Decision{}, nil, fmt.Errorf("evaluate policy %s: %w", c.info.Revision, err)
	}
	var d wire.Decision
	switch {
	case len(rs) == 0 || len(rs[0].Expressions) == 0:
		d = deny("policy returned no decision")
	case len(rs) > 1:
		d = deny("policy returned more than one decision")
	default:
		if d, err = decisionOf(rs[0].Expressions[0].Value); err != nil {
			return wire.Decision{}, nil, fmt.Errorf("evaluate policy %s: %w", c.info.Revision, err)
		}
	}
	d.PolicyRevision = c.info.Revision
	out := make([]wire.ReasonSource, 0, len(d.Reasons))
	for _, r := range d.Reasons {
		rules := make([]string, 0, len(tr.produced[r]))
		for rule := range tr.produced[r] {
			rules = append(rules, rule)
		}
		sort.Strings(rules)
		out = append(out, wire.ReasonSource{Reason: r, Rules: rules})
	}
	return d, out, nil
}

// reasonTracer records, for every string a rule evaluated to (a partial
// set rule's key, or a complete rule's value), which rule and where.
type reasonTracer struct {
	mu       sync.Mutex
	produced map[string]map[string]bool // string -> "data.pkg.rule (file:row)"
}

func (*reasonTracer) Enabled() bool { return true }

func (*reasonTracer) Config() topdown.TraceConfig { return topdown.TraceConfig{} }

func (t *reasonTracer) TraceEvent(evt topdown.Event) {
	if evt.Op != topdown.ExitOp {
		return
	}
	rule, ok := evt.Node.(*ast.Rule)
	if !ok || rule.Module == nil {
		return
	}
	var produced *ast.Term
	switch {
	case rule.Head.Key != nil && rule.Head.Value == nil:
		produced = evt.Plug(rule.Head.Key)
	case rule.Head.Value != nil:
		produced = evt.Plug(rule.Head.Value)
	}
	if produced == nil {
		return
	}
	// A reason is a string the rule evaluated to, either itself (a
	// "reasons contains msg" rule) or inside the object it built (a
	// decision rule with a literal reasons array).
	var strs []string
	ast.WalkTerms(produced, func(x *ast.Term) bool {
		if s, ok := x.Value.(ast.String); ok && len(strs) < 64 {
			strs = append(strs, string(s))
		}
		return false
	})
	if len(strs) == 0 {
		return
	}
	name := fmt.Sprintf("%s.%s", rule.Module.Package.Path, rule.Head.Ref().GroundPrefix())
	if loc := rule.Location; loc != nil {
		name = fmt.Sprintf("%s (%s:%d)", name, loc.File, loc.Row)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range strs {
		if t.produced[s] == nil {
			t.produced[s] = map[string]bool{}
		}
		t.produced[s][name] = true
	}
}
