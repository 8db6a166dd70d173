package policies

import (
	"context"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// IndexPackage is the package whose rules the engine evaluates once per
// loaded bundle rather than once per decision: the shipped policy keeps its
// views of data.portcullis.config there (bundle/portcullis/index.rego).
const IndexPackage = "data.portcullis.index"

var indexPath = ast.MustParseRef(IndexPackage)

// index holds the values of the index package's complete rules, computed at
// load. It is read-only once built and shared by every evaluation of the
// bundle: the store it was computed from never changes after load.
type index struct {
	// values maps a rule name to its value; a nil value records a rule
	// that is undefined.
	values map[string]*ast.Term
}

// buildIndex evaluates the complete rules (no arguments, no else-free
// multi-value heads) of IndexPackage that cannot depend on the input: a rule
// that reads input, reads the whole of data, or calls a non-deterministic
// built-in, directly or through the rules and functions it uses, is left
// out and stays evaluated per decision. It returns nil when there is
// nothing to precompute.
func buildIndex(ctx context.Context, c *ast.Compiler, store storage.Store) (*index, error) {
	groups := map[string][]*ast.Rule{}
	for _, m := range c.Modules {
		if !m.Package.Path.Equal(indexPath) {
			continue
		}
		for _, r := range m.Rules {
			href := r.Head.Ref()
			if len(href) != 1 || len(r.Head.Args) > 0 || r.Head.RuleKind() != ast.SingleValue {
				continue
			}
			name := string(href[0].Value.(ast.Var))
			groups[name] = append(groups[name], r)
		}
	}
	if len(groups) == 0 {
		return nil, nil
	}
	dc := depChecker{c: c, seen: map[*ast.Rule]bool{}}
	ix := &index{values: map[string]*ast.Term{}}
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return nil, fmt.Errorf("index: open store: %w", err)
	}
	defer store.Abort(ctx, txn)
	for name, rules := range groups {
		if !dc.pure(c.GetRulesForVirtualDocument(indexPath.Append(ast.StringTerm(name)))) || !dc.pure(rules) {
			continue
		}
		v, err := evalRule(ctx, c, store, txn, indexPath.Append(ast.StringTerm(name)))
		if err != nil {
			// Left to each decision, which reports the error as it would have.
			continue
		}
		ix.values[name] = v
	}
	return ix, nil
}

// evalRule evaluates ref once; nil means undefined.
func evalRule(ctx context.Context, c *ast.Compiler, store storage.Store, txn storage.Transaction, ref ast.Ref) (*ast.Term, error) {
	x := ast.Var("x")
	body, err := c.QueryCompiler().Compile(ast.NewBody(ast.Equality.Expr(ast.NewTerm(x), ast.NewTerm(ref))))
	if err != nil {
		return nil, err
	}
	rs, err := topdown.NewQuery(body).
		WithCompiler(c).
		WithStore(store).
		WithTransaction(txn).
		Run(ctx)
	if err != nil {
		return nil, err
	}
	switch len(rs) {
	case 0:
		return nil, nil
	case 1:
		return rs[0][x], nil
	default:
		return nil, fmt.Errorf("%v: %d results", ref, len(rs))
	}
}

// depChecker decides whether rules can depend on anything but data.
type depChecker struct {
	c    *ast.Compiler
	seen map[*ast.Rule]bool // true: pure; false: impure or being checked
}

func (d *depChecker) pure(rules []*ast.Rule) bool {
	for _, r := range rules {
		if !d.rule(r) {
			return false
		}
	}
	return true
}

func (d *depChecker) rule(r *ast.Rule) bool {
	if p, ok := d.seen[r]; ok {
		// A rule still being checked is reached again only through an
		// over-approximated dynamic ref: count it as impure.
		return p
	}
	d.seen[r] = false
	ok := true
	var dataVars, dataRefs int
	ast.WalkVars(r, func(v ast.Var) bool {
		switch {
		case v.Equal(ast.InputRootDocument.Value):
			ok = false
		case v.Equal(ast.DefaultRootDocument.Value):
			dataVars++
		}
		return !ok
	})
	if ok {
		ast.WalkRefs(r, func(ref ast.Ref) bool {
			switch {
			case ref.HasPrefix(ast.DefaultRootRef):
				dataRefs++
				if len(ref) < 2 || !d.pure(d.c.GetRulesDynamicWithOpts(ref, ast.RulesOptions{IncludeHiddenModules: true})) {
					ok = false
				}
			default:
				if b, found := ast.BuiltinMap[ref.String()]; found && b.Nondeterministic {
					ok = false
				}
			}
			return !ok
		})
	}
	// data standing alone (not heading a ref) is all of data, every rule included.
	ok = ok && dataVars == dataRefs
	d.seen[r] = ok
	return ok
}

// seededCache is the virtual document cache of one evaluation: it answers
// the index package's precomputed rules from the shared index, unless a
// `with` modifier is in effect (a frame is pushed), and caches everything
// else per evaluation as OPA's own cache does.
type seededCache struct {
	topdown.VirtualCache
	ix    *index
	depth int
}

var _ topdown.VirtualCache = (*seededCache)(nil)

func newSeededCache(ix *index) *seededCache {
	return &seededCache{VirtualCache: topdown.NewVirtualCache(), ix: ix}
}

func (s *seededCache) Push() {
	s.depth++
	s.VirtualCache.Push()
}

func (s *seededCache) Pop() {
	s.depth--
	s.VirtualCache.Pop()
}

func (s *seededCache) Get(ref ast.Ref) (*ast.Term, bool) {
	if s.depth == 0 && len(ref) == len(indexPath)+1 && ref.HasPrefix(indexPath) {
		if name, ok := ref[len(indexPath)].Value.(ast.String); ok {
			if v, ok := s.ix.values[string(name)]; ok {
				return v, v == nil
			}
		}
	}
	return s.VirtualCache.Get(ref)
}
