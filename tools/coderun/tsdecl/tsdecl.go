// Package tsdecl turns tool definitions (name, description, JSON Schema of
// the input) into TypeScript: the typed stubs code.run installs on its
// `tools` object (`await tools.fs.read({path})` for tools.call("fs.read",
// ...)) and the matching .d.ts that GET /v1/tools.d.ts serves, so editors
// and models see the signatures. Both come from the same Stubs list, so a
// declared stub always exists at run time and the other way round.
package tsdecl

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/portcullis/portcullis/wire"
)

// Stub is one typed stub: the tool name and the property path it has under
// `tools` (the name split at dots).
type Stub struct {
	Name string
	Path []string
}

// segment is a path segment that may become a property: a JS-friendly
// name (a '-' is allowed, quoted in the declarations), never one that
// would touch an object's prototype machinery.
var segment = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$-]{0,63}$`)

var reserved = map[string]bool{"__proto__": true, "prototype": true, "constructor": true, "call": true, "then": true}

// Stubs returns the tools that get a typed stub, sorted by name. A tool
// gets none (it stays reachable through tools.call) when a segment of its
// name is not a plain identifier or is reserved (tools.call itself, then,
// __proto__ ...), or when its path collides with another tool's
// namespace ("a" and "a.b"): the earlier name in sort order wins.
func Stubs(specs []wire.FunctionSpec) []Stub {
	names := make([]string, 0, len(specs))
	for _, s := range specs {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	leaves := map[string]bool{}     // "a.b" is a stub
	namespaces := map[string]bool{} // "a" holds stubs
	var out []Stub
next:
	for _, n := range names {
		path := strings.Split(n, ".")
		for _, seg := range path {
			if !segment.MatchString(seg) || reserved[seg] {
				continue next
			}
		}
		if namespaces[n] {
			continue
		}
		for i := 1; i < len(path); i++ {
			if leaves[strings.Join(path[:i], ".")] {
				continue next
			}
		}
		leaves[n] = true
		for i := 1; i < len(path); i++ {
			namespaces[strings.Join(path[:i], ".")] = true
		}
		out = append(out, Stub{Name: n, Path: path})
	}
	return out
}

// StubsJS is the ES module code.run loads before the user's code: it
// hands the stub names to the bridge prelude (install), which builds the
// frozen tools.<ns>.<name> functions.
func StubsJS(stubs []Stub) []byte {
	names := make([]string, len(stubs))
	for i, s := range stubs {
		names[i] = s.Name
	}
	b, _ := json.Marshal(names)
	return fmt.Appendf(nil, "import { install } from \"./bridge.js\";\ninstall(%s);\n", b)
}

// header declares what every stub returns: tools.call's answer.
const header = `// Portcullis code.run: the tools object, for the tools this caller may
// call now (the policy's purpose "list"). Every call, typed stub or
// tools.call, goes through the gateway's policy and gets its own receipt.

/** The answer to a tool call made from code.run. */
interface ToolResult<T = any> {
  /** true when the tool ran and succeeded. */
  success: boolean;
  /** The tool's data; null when it failed before producing any. */
  data: T | null;
  /** The error, with its contract code (permission_denied, fs_denied ...). */
  error: { code: string; message: string; details?: Record<string, unknown> } | null;
  metadata: Record<string, unknown>;
  /** The nested call's receipt (parent_receipt_id: this run's). */
  receipt_id: string;
  /** The HTTP status the call would have had. */
  status: number;
  decision: { allow: boolean; reasons: string[]; policy_revision: string } | null;
}

`

// Declarations is the .d.ts for specs: the ToolResult interface and a
// `tools` constant with call() and one typed function per Stubs entry,
// its parameter type read from the tool's JSON Schema and its description
// as the doc comment.
func Declarations(specs []wire.FunctionSpec) string {
	bySpec := map[string]wire.FunctionSpec{}
	for _, s := range specs {
		bySpec[s.Name] = s
	}
	root := &node{children: map[string]*node{}}
	for _, st := range Stubs(specs) {
		n := root
		for _, seg := range st.Path[:len(st.Path)-1] {
			c := n.children[seg]
			if c == nil {
				c = &node{children: map[string]*node{}}
				n.children[seg] = c
			}
			n = c
		}
		spec := bySpec[st.Name]
		n.children[st.Path[len(st.Path)-1]] = &node{spec: &spec}
	}
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("declare const tools: {\n")
	b.WriteString("  /** Calls any tool by name, e.g. tools.call(\"fs.read\", {path: \"/srv/x\"}). */\n")
	b.WriteString("  call(tool: string, input?: Record<string, unknown>): Promise<ToolResult>;\n")
	root.write(&b, "  ")
	b.WriteString("};\n")
	return b.String()
}

type node struct {
	spec     *wire.FunctionSpec // a stub; nil for a namespace
	children map[string]*node
}

func (n *node) write(b *strings.Builder, indent string) {
	keys := make([]string, 0, len(n.children))
	for k := range n.children {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		c := n.children[k]
		if c.spec != nil {
			doc(b, indent, c.spec.Description, "Calls "+c.spec.Name+".")
			fmt.Fprintf(b, "%s%s(input: %s): Promise<ToolResult>;\n", indent, prop(k), inputType(c.spec.Parameters, indent))
			continue
		}
		fmt.Fprintf(b, "%s%s: {\n", indent, prop(k))
		c.write(b, indent+"  ")
		fmt.Fprintf(b, "%s};\n", indent)
	}
}

var ident = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// prop is a property name as TypeScript needs it: bare or quoted.
func prop(k string) string {
	if ident.MatchString(k) {
		return k
	}
	return strconv.Quote(k)
}

// doc writes a JSDoc comment; "*/" inside the text cannot end it early.
func doc(b *strings.Builder, indent string, text ...string) {
	var lines []string
	for _, t := range text {
		t = strings.TrimSpace(strings.ReplaceAll(t, "*/", "*\\/"))
		if t != "" {
			lines = append(lines, strings.Split(t, "\n")...)
		}
	}
	if len(lines) == 0 {
		return
	}
	if len(lines) == 1 {
		fmt.Fprintf(b, "%s/** %s */\n", indent, lines[0])
		return
	}
	fmt.Fprintf(b, "%s/**\n", indent)
	for _, l := range lines {
		fmt.Fprintf(b, "%s * %s\n", indent, strings.TrimRight(l, " "))
	}
	fmt.Fprintf(b, "%s */\n", indent)
}

// inputType is the parameter type of one stub; a tool whose schema cannot
// be read takes any object.
func inputType(raw json.RawMessage, indent string) string {
	var s any
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return "Record<string, unknown>"
	}
	t := tsType(s, indent, 0)
	if t == "unknown" {
		return "Record<string, unknown>"
	}
	return t
}

// maxDepth bounds how deep a schema is followed (a tool's schema is
// untrusted input for upstream tools).
const maxDepth = 8

// tsType maps a JSON Schema to a TypeScript type: type (or a list of
// types), enum, const, anyOf/oneOf, items, properties with required, and
// additionalProperties. What it does not understand is unknown.
func tsType(v any, indent string, depth int) string {
	s, ok := v.(map[string]any)
	if !ok || depth > maxDepth {
		return "unknown"
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return literals(e)
	}
	if c, ok := s["const"]; ok {
		return literals([]any{c})
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[k].([]any); ok && len(alts) > 0 {
			parts := make([]string, 0, len(alts))
			for _, a := range alts {
				parts = append(parts, tsType(a, indent, depth+1))
			}
			return union(parts)
		}
	}
	switch t := s["type"].(type) {
	case string:
		return typeOf(t, s, indent, depth)
	case []any:
		parts := make([]string, 0, len(t))
		for _, x := range t {
			if name, ok := x.(string); ok {
				parts = append(parts, typeOf(name, s, indent, depth))
			}
		}
		return union(parts)
	}
	if _, ok := s["properties"]; ok {
		return typeOf("object", s, indent, depth)
	}
	return "unknown"
}

func typeOf(t string, s map[string]any, indent string, depth int) string {
	switch t {
	case "string":
		return "string"
	case "integer", "number":
		return "number"
	case "boolean":
		return "boolean"
	case "null":
		return "null"
	case "array":
		item := tsType(s["items"], indent, depth+1)
		if strings.ContainsAny(item, " |") {
			item = "(" + item + ")"
		}
		return item + "[]"
	case "object":
		return objectType(s, indent, depth)
	}
	return "unknown"
}

func objectType(s map[string]any, indent string, depth int) string {
	props, _ := s["properties"].(map[string]any)
	required := map[string]bool{}
	if r, ok := s["required"].([]any); ok {
		for _, x := range r {
			if name, ok := x.(string); ok {
				required[name] = true
			}
		}
	}
	extra := "unknown"
	closed := false
	switch ap := s["additionalProperties"].(type) {
	case bool:
		closed = !ap
	case map[string]any:
		extra = tsType(ap, indent, depth+1)
	}
	if len(props) == 0 {
		if closed {
			return "Record<string, never>"
		}
		return "Record<string, " + extra + ">"
	}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	inner := indent + "  "
	var b strings.Builder
	b.WriteString("{\n")
	for _, k := range keys {
		p, _ := props[k].(map[string]any)
		if d, ok := p["description"].(string); ok {
			doc(&b, inner, d)
		}
		opt := "?"
		if required[k] {
			opt = ""
		}
		fmt.Fprintf(&b, "%s%s%s: %s;\n", inner, prop(k), opt, tsType(props[k], inner, depth+1))
	}
	if !closed && extra != "unknown" {
		fmt.Fprintf(&b, "%s[key: string]: %s;\n", inner, extra)
	}
	b.WriteString(indent + "}")
	return b.String()
}

// literals is a union of JSON literal types ("a" | 1 | true).
func literals(vals []any) string {
	parts := make([]string, 0, len(vals))
	for _, v := range vals {
		b, err := json.Marshal(v)
		if err != nil {
			return "unknown"
		}
		switch v.(type) {
		case string, float64, bool, nil:
			parts = append(parts, string(b))
		default:
			return "unknown"
		}
	}
	return union(parts)
}

func union(parts []string) string {
	parts = slices.Compact(parts)
	if len(parts) == 0 || slices.Contains(parts, "unknown") {
		return "unknown"
	}
	return strings.Join(parts, " | ")
}
