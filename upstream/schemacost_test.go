package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bombSchema is n definitions each referring to the next twice (through
// an anyOf whose first branch always fails): about 130 bytes a level, and
// 2^n subschema evaluations for any input.
func bombSchema(n int) map[string]any {
	defs := map[string]any{}
	for i := range n {
		next := map[string]any{"$ref": fmt.Sprintf("#/$defs/l%d", i+1)}
		defs[fmt.Sprintf("l%d", i)] = map[string]any{"anyOf": []any{map[string]any{"allOf": []any{next, false}}, next}}
	}
	defs[fmt.Sprintf("l%d", n)] = map[string]any{"type": "object"}
	return map[string]any{"$defs": defs, "$ref": "#/$defs/l0"}
}

// recursingProps is an object of n properties that are the object again.
func recursingProps(n int) map[string]any {
	props := map[string]any{}
	for i := range n {
		props[fmt.Sprintf("p%d", i)] = map[string]any{"$ref": "#"}
	}
	return map[string]any{"type": "object", "properties": props}
}

// anchored is s entered through an anchor on its first level.
func anchored(s map[string]any) map[string]any {
	defs := s["$defs"].(map[string]any)
	defs["l0"].(map[string]any)["$anchor"] = "start"
	return map[string]any{"$defs": defs, "$ref": "#start"}
}

// TestNewToolRefusesSchemaBombs: an upstream inputSchema whose validation
// work grows exponentially with its size (validating {} against 22 levels
// took 31 s of a core; 30 levels, hours) is not served; ordinary schemas,
// recursive ones (trees, expression languages, any JSON value) and ones
// that reuse definitions are. A recursive schema that applies itself twice
// at one place of the input (2^depth for nested input) is not served.
func TestNewToolRefusesSchemaBombs(t *testing.T) {
	t.Parallel()
	tree := map[string]any{"$defs": map[string]any{"node": map[string]any{"type": "object", "properties": map[string]any{
		"value": map[string]any{"type": "string"},
		"left":  map[string]any{"$ref": "#/$defs/node"}, "right": map[string]any{"$ref": "#/$defs/node"},
		"and": map[string]any{"type": "array", "items": map[string]any{"$ref": "#/$defs/node"}},
		"or":  map[string]any{"type": "array", "items": map[string]any{"$ref": "#"}},
	}}}, "$ref": "#/$defs/node"}
	reuse := map[string]any{"$defs": map[string]any{"addr": map[string]any{"type": "object", "properties": map[string]any{
		"street": map[string]any{"type": "string"}, "city": map[string]any{"type": "string"}}}},
		"type": "object", "properties": map[string]any{}}
	for i := range 50 {
		reuse["properties"].(map[string]any)[fmt.Sprintf("a%d", i)] = map[string]any{"$ref": "#/$defs/addr"}
	}
	// Any JSON value: an object's members and an array's items are
	// values again (one branch applies to any one instance).
	jsonValue := map[string]any{"anyOf": []any{
		map[string]any{"type": []any{"string", "number", "boolean", "null"}},
		map[string]any{"type": "object", "additionalProperties": map[string]any{"$ref": "#"}},
		map[string]any{"type": "array", "items": map[string]any{"$ref": "#"}},
	}}
	// A recursive bomb: every level of the input's nesting under "a"
	// doubles the work (a 22-deep input: 2^22 evaluations).
	next := map[string]any{"$ref": "#"}
	recursive := map[string]any{"type": "object", "properties": map[string]any{
		"a": map[string]any{"anyOf": []any{map[string]any{"allOf": []any{next, false}}, next}}}}
	// The same through a definition reached twice, and through two
	// wildcards of one kind.
	twice := map[string]any{"$defs": map[string]any{"x": map[string]any{"properties": map[string]any{"a": map[string]any{"$ref": "#"}}}},
		"allOf": []any{map[string]any{"$ref": "#/$defs/x"}, map[string]any{"$ref": "#/$defs/x"}}}
	wild := map[string]any{"properties": map[string]any{"a": map[string]any{"$ref": "#"}}, "additionalProperties": map[string]any{"$ref": "#"},
		"patternProperties": map[string]any{"^a": map[string]any{"$ref": "#"}}}
	for _, tc := range []struct {
		name   string
		schema map[string]any
		served bool
	}{
		{"any JSON value", jsonValue, true},
		{"20 properties recursing", recursingProps(20), true},
		{"300 properties recursing: too many to judge", recursingProps(300), false},
		{"recursive bomb", recursive, false},
		{"recursive bomb through a definition reached twice", twice, false},
		{"recursive bomb through overlapping wildcards", wild, false},
		{"plain", map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "string"}}}, true},
		{"recursive tree", tree, true},
		{"50 uses of one definition", reuse, true},
		{"10-level bomb (about 1,000 evaluations)", bombSchema(10), true},
		{"12-level bomb", bombSchema(12), false},
		{"17-level bomb", bombSchema(17), false},
		{"40-level bomb", bombSchema(40), false},
		{"bomb through an anchor", anchored(bombSchema(40)), false},
		{"small bomb through an anchor", anchored(bombSchema(8)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, _ := json.Marshal(tc.schema)
			tool, err := newTool(testConn("every"), &mcp.Tool{Name: "t", InputSchema: tc.schema})
			if (err == nil) != tc.served {
				t.Fatalf("schema of %d bytes: served %v (%v), want %v", len(b), err == nil, err, tc.served)
			}
			if err == nil {
				if _, err := tool.Prepare(context.Background(), json.RawMessage(`{}`)); err != nil {
					t.Logf("input {}: %v", err)
				}
			}
		})
	}
}
