package fstool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/portcullis/portcullis/tools/internal/strictjson"
	"github.com/portcullis/portcullis/wire"
)

// MaxFrontmatterKeys bounds one updateFrontmatter.
const MaxFrontmatterKeys = 100

// decodeFrontmatterArg reads the updateFrontmatter object; numbers keep
// their integer form (a JSON 3 stays YAML 3, not 3.0).
func decodeFrontmatterArg(raw json.RawMessage, field string) (map[string]any, error) {
	if _, err := strictjson.Decode(raw, field); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, strictjson.Invalid(field, "%s must be an object of front-matter operations: %v", field, err)
	}
	if len(m) == 0 || len(m) > MaxFrontmatterKeys {
		return nil, strictjson.Invalid(field, "%s must hold 1 to %d operations", field, MaxFrontmatterKeys)
	}
	m = normalizeNumbers(m).(map[string]any)
	if _, err := parseFrontmatterOps(m); err != nil {
		return nil, err
	}
	return m, nil
}

// fmOpKind is what an updateFrontmatter entry does to its key.
type fmOpKind int

const (
	fmSet    fmOpKind = iota // "key": value, or "key.set": value; null removes
	fmAppend                 // "key.append": [values]: add to a list, strings once
	fmMerge                  // "key.merge": {...}: shallow merge into a mapping
)

// fmOp is one updateFrontmatter entry: seed 001's operations are the key
// followed by ".append", ".set" or ".merge" (stepsCompleted.append,
// decisionLog.append, artifacts.append, variables.set, currentNodeId.set);
// a key without a suffix is set.
type fmOp struct {
	entry string // as the caller wrote it, for errors
	key   string
	kind  fmOpKind
	value any
}

// parseFrontmatterOps reads the entries of an updateFrontmatter object,
// in key order. A ".set" whose value is an object merges into a mapping
// (seed 001: "variables.set: shallow merge into variables"); a plain key
// replaces its value whole.
func parseFrontmatterOps(m map[string]any) ([]fmOp, error) {
	ops := make([]fmOp, 0, len(m))
	seen := map[string]string{}
	for _, entry := range slices.Sorted(maps.Keys(m)) {
		field := "updateFrontmatter." + entry
		if entry == "" || strings.ContainsAny(entry, "\x00\n") {
			return nil, strictjson.Invalid("updateFrontmatter", "front-matter key %q is empty or holds a newline or NUL", entry)
		}
		op := fmOp{entry: entry, key: entry, kind: fmSet, value: m[entry]}
		if k, ok := strings.CutSuffix(entry, ".append"); ok && k != "" {
			op.key, op.kind = k, fmAppend
			if _, ok := op.value.([]any); !ok {
				return nil, strictjson.Invalid(field, "%s must be a list of values to append", entry)
			}
		} else if k, ok := strings.CutSuffix(entry, ".merge"); ok && k != "" {
			op.key, op.kind = k, fmMerge
			if _, ok := op.value.(map[string]any); !ok {
				return nil, strictjson.Invalid(field, "%s must be an object of keys to merge (null removes one)", entry)
			}
		} else if k, ok := strings.CutSuffix(entry, ".set"); ok && k != "" {
			op.key = k
			if _, ok := op.value.(map[string]any); ok {
				op.kind = fmMerge
			}
		}
		if prev, dup := seen[op.key]; dup {
			return nil, strictjson.Invalid(field, "%s and %s both change the front-matter key %q; give one operation per key", prev, entry, op.key)
		}
		seen[op.key] = entry
		ops = append(ops, op)
	}
	return ops, nil
}

func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalizeNumbers(e)
		}
	}
	return v
}

// updateFrontmatter sets keys in the YAML front matter of a Markdown
// document ("---" line, YAML mapping, "---" or "..." line), creating it if
// absent. Other keys keep their order, comments and style; a nil value
// removes its key. The body is left byte for byte.
func updateFrontmatter(doc string, updates map[string]any) (string, error) {
	var yamlText, body string
	var node yaml.Node
	if rest, ok := cutLine(doc, "---"); ok {
		end := -1
		for i := 0; i < len(rest); {
			j := strings.IndexByte(rest[i:], '\n')
			line := rest[i:]
			if j >= 0 {
				line = rest[i : i+j]
			}
			if t := strings.TrimRight(line, "\r"); t == "---" || t == "..." {
				end = i
				body = rest[min(len(rest), i+len(line)+1):]
				break
			}
			if j < 0 {
				break
			}
			i += j + 1
		}
		if end < 0 {
			return "", invalidFrontmatter("the front matter starting on line 1 has no closing \"---\" line", 1)
		}
		yamlText = rest[:end]
		if err := yaml.Unmarshal([]byte(yamlText), &node); err != nil {
			return "", invalidFrontmatter(fmt.Sprintf("the front matter is not valid YAML: %v", yamlErrorText(err)), yamlErrorLine(err))
		}
	} else {
		body = doc
	}
	var m *yaml.Node
	switch {
	case node.Kind == 0: // no or empty front matter
		m = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		node = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{m}}
	case node.Kind == yaml.DocumentNode && len(node.Content) == 1 && node.Content[0].Kind == yaml.MappingNode:
		m = node.Content[0]
	default:
		return "", invalidFrontmatter("the front matter is not a YAML mapping of keys to values", 2)
	}
	// YAML requires unique keys; yaml.v3 only enforces that when decoding
	// into a map. With a key twice, which one an update should change — and
	// which one a reader sees — is ambiguous, so refuse instead of guessing.
	seen := make(map[string]bool, len(m.Content)/2)
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode {
			if seen[k.Value] {
				return "", invalidFrontmatter(fmt.Sprintf("the front matter has the key %q more than once", k.Value), k.Line+1)
			}
			seen[k.Value] = true
		}
	}
	ops, err := parseFrontmatterOps(updates)
	if err != nil {
		return "", err
	}
	for _, op := range ops {
		if err := applyFrontmatterOp(m, op); err != nil {
			return "", err
		}
	}
	var out bytes.Buffer
	out.WriteString("---\n")
	if len(m.Content) > 0 {
		enc := yaml.NewEncoder(&out)
		enc.SetIndent(2)
		if err := enc.Encode(&node); err != nil {
			return "", frontmatterError(fmt.Sprintf("writing the front matter: %v", err))
		}
		_ = enc.Close()
	}
	out.WriteString("---\n")
	out.WriteString(body)
	return out.String(), nil
}

// yamlValue encodes a decoded JSON value as a YAML node. yaml.v3 drops
// leading line breaks when it picks a block style for a string ("\na"
// becomes "a", "\n" becomes ""), and refuses some (a tab before a line
// break): such strings are written double-quoted, with escapes, so the
// value read back is always the value set.
func yamlValue(v any) (*yaml.Node, error) {
	switch x := v.(type) {
	case string:
		var n yaml.Node
		if err := n.Encode(x); err == nil {
			var back string
			if n.Decode(&back) == nil && back == x {
				return &n, nil
			}
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: x}, nil
	case map[string]any:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			vn, err := yamlValue(x[k])
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, vn)
		}
		return n, nil
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, e := range x {
			en, err := yamlValue(e)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, en)
		}
		return n, nil
	}
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return nil, err
	}
	return &n, nil
}

// cutLine reports whether s starts with the line want and returns the rest.
func cutLine(s, want string) (string, bool) {
	for _, nl := range []string{"\n", "\r\n"} {
		if rest, ok := strings.CutPrefix(s, want+nl); ok {
			return rest, true
		}
	}
	return "", false
}

// applyFrontmatterOp does one operation on the front matter's mapping.
func applyFrontmatterOp(m *yaml.Node, op fmOp) error {
	idx := -1
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == op.key {
			idx = i
			break
		}
	}
	var cur *yaml.Node
	if idx >= 0 {
		cur = m.Content[idx+1]
		if cur.Kind == yaml.ScalarNode && cur.Tag == "!!null" {
			cur = nil // "key:" with no value is empty, whatever the operation
		}
	}
	put := func(n *yaml.Node) {
		if idx >= 0 {
			m.Content[idx+1] = n
		} else {
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: op.key}, n)
		}
	}
	switch op.kind {
	case fmAppend:
		if cur == nil {
			cur = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			put(cur)
		} else if cur.Kind != yaml.SequenceNode {
			return frontmatterError(fmt.Sprintf("%s: %q is not a list in the front matter (line %d)", op.entry, op.key, cur.Line+1))
		}
		for _, v := range op.value.([]any) {
			if s, ok := v.(string); ok && seqHasString(cur, s) {
				continue // strings are appended once (stepsCompleted, artifacts)
			}
			n, err := yamlValue(v)
			if err != nil {
				return frontmatterError(fmt.Sprintf("a value of %s cannot be written as YAML: %v", op.entry, err))
			}
			cur.Content = append(cur.Content, n)
		}
	case fmMerge:
		if cur == nil {
			cur = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			put(cur)
		} else if cur.Kind != yaml.MappingNode {
			return frontmatterError(fmt.Sprintf("%s: %q is not a mapping in the front matter (line %d)", op.entry, op.key, cur.Line+1))
		}
		vals := op.value.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(vals)) {
			if err := applyFrontmatterOp(cur, fmOp{entry: op.entry + "." + k, key: k, kind: fmSet, value: vals[k]}); err != nil {
				return err
			}
		}
	default:
		if op.value == nil {
			if idx >= 0 {
				m.Content = append(m.Content[:idx], m.Content[idx+2:]...)
			}
			return nil
		}
		val, err := yamlValue(op.value)
		if err != nil {
			return frontmatterError(fmt.Sprintf("value of %q cannot be written as YAML: %v", op.entry, err))
		}
		put(val)
	}
	return nil
}

// seqHasString reports whether the sequence holds the string s.
func seqHasString(seq *yaml.Node, s string) bool {
	for _, e := range seq.Content {
		if e.Kind == yaml.ScalarNode && e.Tag == "!!str" && e.Value == s {
			return true
		}
	}
	return false
}

// invalidFrontmatter is the file's front matter failing to parse: its own
// code (seed 001's E_INVALID_FRONTMATTER) and the line of the file at
// fault, counting the opening "---" as line 1 (0: unknown).
func invalidFrontmatter(msg string, line int) error {
	d := map[string]any{"field": "updateFrontmatter"}
	if line > 0 {
		d["line"] = line
		msg += fmt.Sprintf(" (line %d of the file)", line)
	}
	return &wire.Error{Code: wire.CodeInvalidFrontmatter, Message: msg + "; nothing was changed", Details: d}
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// yamlErrorLine is the file line of a yaml.v3 error (its lines count from
// the first line of the front matter, which is the file's second line).
func yamlErrorLine(err error) int {
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		if n, e := strconv.Atoi(m[1]); e == nil {
			return n + 1
		}
	}
	return 0
}

// yamlErrorText drops yaml.v3's "yaml: line N: " prefix; the line is
// reported as a file line instead.
func yamlErrorText(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	if loc := yamlLineRE.FindStringIndex(s); loc != nil && loc[0] == 0 {
		s = strings.TrimPrefix(s[loc[1]:], ": ")
	}
	return s
}

func frontmatterError(msg string) error {
	return &wire.Error{Code: wire.CodePreconditionFailed, Message: msg + "; nothing was changed",
		Details: map[string]any{"field": "updateFrontmatter"}}
}
