package policies

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"

	"github.com/open-policy-agent/opa/v1/ast"
)

// ToolSchema is what the gateway knows of one tool's policy input: the JSON
// Schema of its args (the tool's Parameters) and, optionally, of the
// resolved facts the gateway adds.
type ToolSchema struct {
	Name     string
	Args     json.RawMessage
	Resolved json.RawMessage
}

// toolName is what a tool name must look like to be a Rego ref segment.
var toolName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ToolSchemaRef is the Rego schema ref of a tool's input schema:
// schema.tools.Exec, or schema.tools["web-fetch"] for a name that is not
// an identifier.
func ToolSchemaRef(tool string) string {
	if toolName.MatchString(tool) {
		return "schema.tools." + tool
	}
	return fmt.Sprintf("schema.tools[%q]", tool)
}

// InputSchemas returns the JSON Schemas of the policy input, keyed by their
// Rego schema ref: "schema.input" (the envelope every call shares, applied
// to every rule) and "schema.tools.<Tool>" per tool, which authors name in a
// METADATA schemas annotation so that a rule reading an argument the tool
// does not have fails to load instead of silently never matching:
//
//	# METADATA
//	# schemas:
//	#   - input: schema.tools.Exec
func InputSchemas(tools []ToolSchema) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	env, err := json.Marshal(envelope(nil, nil, ""))
	if err != nil {
		return nil, err
	}
	out["schema.input"] = env
	for _, t := range tools {
		if t.Name == "" {
			return nil, fmt.Errorf("input schema: a tool has no name")
		}
		var args, resolved any
		if len(t.Args) > 0 {
			if err := json.Unmarshal(t.Args, &args); err != nil {
				return nil, fmt.Errorf("input schema: tool %s: args: %w", t.Name, err)
			}
		}
		if len(t.Resolved) > 0 {
			if err := json.Unmarshal(t.Resolved, &resolved); err != nil {
				return nil, fmt.Errorf("input schema: tool %s: resolved: %w", t.Name, err)
			}
		}
		b, err := json.Marshal(envelope(args, resolved, t.Name))
		if err != nil {
			return nil, err
		}
		out[ToolSchemaRef(t.Name)] = b
	}
	return out, nil
}

// SchemaSet turns InputSchemas' output into the compiler's schema set.
func SchemaSet(schemas map[string]json.RawMessage) (*ast.SchemaSet, error) {
	ss := ast.NewSchemaSet()
	keys := make([]string, 0, len(schemas))
	for k := range schemas {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ref, err := ast.ParseRef(k)
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", k, err)
		}
		var v any
		if err := json.Unmarshal(schemas[k], &v); err != nil {
			return nil, fmt.Errorf("schema %s: %w", k, err)
		}
		ss.Put(ref, v)
	}
	return ss, nil
}

// envelope is the schema of the policy input (CONTRACT.md §5). args and
// resolved stay open objects unless a tool's schema narrows them; tool is
// pinned to the tool's name when one is given.
func envelope(args, resolved any, tool string) map[string]any {
	str := map[string]any{"type": "string"}
	open := map[string]any{"type": "object", "additionalProperties": true}
	if args == nil {
		args = open
	}
	if resolved == nil {
		resolved = open
	}
	toolSchema := any(str)
	if tool != "" {
		toolSchema = map[string]any{"type": "string", "enum": []string{tool}}
	}
	return map[string]any{
		"$schema": "http://json-schema.org/draft-07/schema#",
		"type":    "object",
		"properties": map[string]any{
			"principal": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"id":         str,
					"roles":      map[string]any{"type": "array", "items": str},
					"attributes": open,
				},
				"additionalProperties": false,
			},
			"tool":       toolSchema,
			"purpose":    map[string]any{"type": "string", "enum": []string{"call", "dry_run", "list", "launch"}},
			"args":       args,
			"resolved":   resolved,
			"session_id": str,
			"call_id":    str,
			"time":       str,
		},
		"additionalProperties": false,
	}
}
