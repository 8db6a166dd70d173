package policies

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/portcullis/portcullis/wire"
)

// DefaultMemoSize is how many answers one loaded bundle remembers.
const DefaultMemoSize = 4096

// A decision is a pure function of the bundle (policy and data, fixed
// once loaded) and the input: the capabilities refuse http.send, net.*
// and opa.runtime, and the only input-independent variable, the clock
// (time.now_ns), reads the input's time. So the engine can remember the
// policy's answer for an input and give it again without evaluating:
// that is what memo does, per loaded bundle (a new bundle starts empty).
//
// It is keyed by exactly the parts of the input the policy can read. At
// load, every rule of the bundle is searched for references to input: a
// rule reading input.tool or input.args.argv makes "tool" and "args" part
// of the key; one reading input as a whole (or with a computed key)
// makes all of it the key. call_id, session_id and time vary with every
// call; a policy that never reads them gets hits across calls. A policy
// calling time.now_ns keys on time, and one calling any other
// non-deterministic built-in (rand.intn, uuid.rfc4122 ...) is never
// remembered. What is remembered is the policy's answer as an AST value,
// which is immutable; each hit builds a fresh wire.Decision from it, so
// no caller can change what another is given.
type memo struct {
	fields []string // sorted top-level input keys the policy reads; nil: all
	cache  *lru.Cache[string, memoEntry]
	hits   atomic.Uint64
	misses atomic.Uint64
}

// memoEntry is one remembered evaluation: the decision's value, or the
// count of results when there was not exactly one.
type memoEntry struct {
	value   any
	results int
}

// newMemo is the memo of a compiled bundle, or nil when its decisions
// cannot be remembered (a non-deterministic built-in) or size is
// negative (off).
func newMemo(c *ast.Compiler, size int) *memo {
	if size < 0 {
		return nil
	}
	if size == 0 {
		size = DefaultMemoSize
	}
	u := inputUse{fields: map[string]bool{}}
	for _, m := range c.Modules {
		for _, r := range m.Rules {
			if isTestRule(r) {
				continue // run by `opa test` and at load, never by a decision
			}
			ast.NewGenericVisitor(u.visit).Walk(r)
		}
	}
	if u.impure {
		return nil
	}
	cache, err := lru.New[string, memoEntry](size)
	if err != nil {
		return nil
	}
	m := &memo{cache: cache}
	if !u.whole {
		m.fields = make([]string, 0, len(u.fields))
		for f := range u.fields {
			m.fields = append(m.fields, f)
		}
		slices.Sort(m.fields)
	}
	return m
}

func isTestRule(r *ast.Rule) bool {
	name := r.Head.Ref()[0].Value.String()
	return strings.HasPrefix(name, "test_") || strings.HasPrefix(name, "todo_test_")
}

// inputUse is what a walk of rules found them reading of input.
type inputUse struct {
	fields map[string]bool
	whole  bool // input itself, or input[<computed>]
	impure bool // a non-deterministic built-in other than the clock
}

func (u *inputUse) visit(x any) bool {
	switch x := x.(type) {
	case *ast.With:
		// `with input as v` replaces input for the rules it wraps: the
		// target is written, not read. Only its value is read.
		ast.NewGenericVisitor(u.visit).Walk(x.Value)
		return true
	case ast.Ref:
		if x[0].Value.Compare(ast.InputRootDocument.Value) == 0 {
			if len(x) > 1 {
				if s, ok := x[1].Value.(ast.String); ok {
					u.fields[string(s)] = true
				} else {
					u.whole = true
				}
			} else {
				u.whole = true
			}
			for _, t := range x[1:] {
				ast.NewGenericVisitor(u.visit).Walk(t)
			}
			return true
		}
		if b, ok := ast.BuiltinMap[x.String()]; ok && b.Nondeterministic {
			if b.Name == ast.NowNanos.Name {
				u.fields["time"] = true // the clock is the input's time (rego.EvalTime)
			} else {
				u.impure = true
			}
		}
	case ast.Var:
		if x.Equal(ast.InputRootDocument.Value) {
			u.whole = true
		}
	}
	return false
}

// inputFields are the top-level keys of the input document (inputValue),
// each with how the memo key writes it. A policy reading a key not listed
// here is not remembered (keyOf fails): a key the memo cannot write must
// not be left out of it. TestMemoKnowsEveryInputField holds this list to
// inputValue.
var inputFields = map[string]func(buf []byte, in *wire.PolicyInput) ([]byte, error){
	"principal": func(buf []byte, in *wire.PolicyInput) ([]byte, error) {
		return appendJSON(buf, struct {
			ID         string         `json:"id"`
			Roles      []string       `json:"roles"`
			Attributes map[string]any `json:"attributes"`
		}{in.Principal.ID, in.Principal.Roles, nonNil(in.Principal.Attributes)})
	},
	"tool":       func(buf []byte, in *wire.PolicyInput) ([]byte, error) { return appendJSON(buf, in.Tool) },
	"purpose":    func(buf []byte, in *wire.PolicyInput) ([]byte, error) { return appendJSON(buf, in.Purpose) },
	"args":       func(buf []byte, in *wire.PolicyInput) ([]byte, error) { return appendJSON(buf, nonNil(in.Args)) },
	"resolved":   func(buf []byte, in *wire.PolicyInput) ([]byte, error) { return appendJSON(buf, nonNil(in.Resolved)) },
	"session_id": func(buf []byte, in *wire.PolicyInput) ([]byte, error) { return appendJSON(buf, in.SessionID) },
	"call_id":    func(buf []byte, in *wire.PolicyInput) ([]byte, error) { return appendJSON(buf, in.CallID) },
	"time": func(buf []byte, in *wire.PolicyInput) ([]byte, error) {
		return in.Time.UTC().AppendFormat(buf, time.RFC3339Nano), nil
	},
}

// appendJSON appends v's JSON: maps with their keys sorted, so equal
// values (as the policy sees them: JSON) write equal bytes.
func appendJSON(buf []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(buf, b...), err
}

// keyOf is the memo key of in: each field the policy reads, named, with
// its value's JSON. False when a read field cannot be written (memo off
// for this call).
func (m *memo) keyOf(in *wire.PolicyInput) (string, bool) {
	if m.fields == nil {
		b, err := json.Marshal(in)
		return string(b), err == nil
	}
	buf := make([]byte, 0, 512)
	for _, f := range m.fields {
		write, ok := inputFields[f]
		if !ok {
			return "", false
		}
		buf = append(buf, f...)
		buf = append(buf, 0)
		var err error
		if buf, err = write(buf, in); err != nil {
			return "", false
		}
		buf = append(buf, 0)
	}
	return string(buf), true
}

// eval is the compiled bundle's answer for in, remembered when it can be.
func (c *compiled) eval(ctx context.Context, in *wire.PolicyInput) (memoEntry, error) {
	key, ok := "", false
	if c.memo != nil {
		if key, ok = c.memo.keyOf(in); ok {
			if e, hit := c.memo.cache.Get(key); hit {
				c.memo.hits.Add(1)
				return e, nil
			}
			c.memo.misses.Add(1)
		}
	}
	input, err := inputValue(*in)
	if err != nil {
		return memoEntry{}, fmt.Errorf("policy input: %w", err)
	}
	opts := []rego.EvalOption{rego.EvalParsedInput(input), rego.EvalTime(in.Time), rego.EvalGenerateJSON(keepAST)}
	if c.index != nil {
		opts = append(opts, rego.EvalVirtualCache(newSeededCache(c.index)))
	}
	rs, err := c.query.Eval(ctx, opts...)
	if err != nil {
		return memoEntry{}, fmt.Errorf("evaluate policy %s: %w", c.info.Revision, err)
	}
	e := memoEntry{results: len(rs)}
	if len(rs) == 1 {
		if len(rs[0].Expressions) == 0 {
			e.results = 0
		} else {
			e.value = rs[0].Expressions[0].Value
		}
	}
	if ok {
		c.memo.cache.Add(key, e)
	}
	return e, nil
}

// MemoStats counts the live bundle's remembered answers used (hits) and
// evaluations done (misses); on is false when its decisions are not
// remembered.
func (e *Engine) MemoStats() (hits, misses uint64, on bool) {
	c := e.live.Load()
	if c == nil || c.memo == nil {
		return 0, 0, false
	}
	return c.memo.hits.Load(), c.memo.misses.Load(), true
}
