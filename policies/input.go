package policies

import (
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/portcullis/portcullis/wire"
)

// inputValue builds the policy input as an AST value directly: it skips the
// JSON round trip rego.EvalInput would do on every call (see BenchmarkInput).
// Time is an RFC 3339 string in UTC, as the contract shows it.
func inputValue(in wire.PolicyInput) (ast.Value, error) {
	attrs, err := ast.InterfaceToValue(nonNil(in.Principal.Attributes))
	if err != nil {
		return nil, fmt.Errorf("principal.attributes: %w", err)
	}
	args, err := ast.InterfaceToValue(nonNil(in.Args))
	if err != nil {
		return nil, fmt.Errorf("args: %w", err)
	}
	resolved, err := ast.InterfaceToValue(nonNil(in.Resolved))
	if err != nil {
		return nil, fmt.Errorf("resolved: %w", err)
	}
	roles := make([]*ast.Term, len(in.Principal.Roles))
	for i, r := range in.Principal.Roles {
		roles[i] = ast.StringTerm(r)
	}
	principal := ast.NewObject(
		ast.Item(keyTerm("id"), ast.StringTerm(in.Principal.ID)),
		ast.Item(keyTerm("roles"), ast.ArrayTerm(roles...)),
		ast.Item(keyTerm("attributes"), ast.NewTerm(attrs)),
	)
	return ast.NewObject(
		ast.Item(keyTerm("principal"), ast.NewTerm(principal)),
		ast.Item(keyTerm("tool"), ast.StringTerm(in.Tool)),
		ast.Item(keyTerm("purpose"), ast.StringTerm(in.Purpose)),
		ast.Item(keyTerm("args"), ast.NewTerm(args)),
		ast.Item(keyTerm("resolved"), ast.NewTerm(resolved)),
		ast.Item(keyTerm("session_id"), ast.StringTerm(in.SessionID)),
		ast.Item(keyTerm("call_id"), ast.StringTerm(in.CallID)),
		ast.Item(keyTerm("time"), ast.StringTerm(in.Time.UTC().Format(time.RFC3339Nano))),
	), nil
}

// keyTerms holds the object keys of the input document and the decision,
// built once: ast.InternedTerm allocates a new term for every string OPA
// does not intern itself, which was ~36 allocations per decision. The map
// and its terms are never written after package initialisation; terms are
// shared between objects the way OPA shares its own interned terms.
var keyTerms = func() map[string]*ast.Term {
	m := map[string]*ast.Term{}
	for _, k := range []string{
		// input
		"principal", "id", "roles", "attributes", "tool", "purpose", "args", "resolved",
		"session_id", "call_id", "time",
		// decision
		"allow", "reasons", "fs_deny", "rule_ids", "fs_grants", "network", "env", "limits", "exec",
		"path", "mode", "alias", "allow_autorun", "posture", "pass", "set", "at", "args", "index", "value",
		"timeout_s", "cpu_seconds", "memory_bytes", "fsize_bytes", "nofile", "max_output_bytes",
	} {
		m[k] = ast.StringTerm(k)
	}
	return m
}()

// keyTerm is the shared term of a known key, else ast.InternedTerm(k).
func keyTerm(k string) *ast.Term {
	if t, ok := keyTerms[k]; ok {
		return t
	}
	return ast.InternedTerm(k)
}

func nonNil(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
