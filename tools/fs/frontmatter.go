package fstool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/portcullis/portcullis/tools/internal/strictjson"
	"github.com/portcullis/portcullis/wire"
)

// MaxFrontmatterKeys bounds one updateFrontmatter.
const MaxFrontmatterKeys = 100

// decodeFrontmatterArg reads the updateFrontmatter object; numbers keep
// their integer form (a JSON 3 stays YAML 3, not 3.0).
func decodeFrontmatterArg(raw json.RawMessage) (map[string]any, error) {
	if _, err := strictjson.Decode(raw, "updateFrontmatter"); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, strictjson.Invalid("updateFrontmatter", "updateFrontmatter must be an object of front-matter keys: %v", err)
	}
	if len(m) == 0 || len(m) > MaxFrontmatterKeys {
		return nil, strictjson.Invalid("updateFrontmatter", "updateFrontmatter must set 1 to %d keys", MaxFrontmatterKeys)
	}
	for k := range m {
		if k == "" || strings.ContainsAny(k, "\x00\n") {
			return nil, strictjson.Invalid("updateFrontmatter", "front-matter key %q is empty or holds a newline or NUL", k)
		}
	}
	return normalizeNumbers(m).(map[string]any), nil
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
			return "", frontmatterError("the front matter starting on line 1 has no closing \"---\" line")
		}
		yamlText = rest[:end]
		if err := yaml.Unmarshal([]byte(yamlText), &node); err != nil {
			return "", frontmatterError(fmt.Sprintf("the front matter is not valid YAML: %v", err))
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
		return "", frontmatterError("the front matter is not a YAML mapping of keys to values")
	}
	// YAML requires unique keys; yaml.v3 only enforces that when decoding
	// into a map. With a key twice, which one an update should change — and
	// which one a reader sees — is ambiguous, so refuse instead of guessing.
	seen := make(map[string]bool, len(m.Content)/2)
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode {
			if seen[k.Value] {
				return "", frontmatterError(fmt.Sprintf("the front matter has the key %q more than once (line %d)", k.Value, k.Line))
			}
			seen[k.Value] = true
		}
	}
	keys := make([]string, 0, len(updates))
	for k := range updates {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		idx := -1
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == k {
				idx = i
				break
			}
		}
		if updates[k] == nil {
			if idx >= 0 {
				m.Content = append(m.Content[:idx], m.Content[idx+2:]...)
			}
			continue
		}
		val, err := yamlValue(updates[k])
		if err != nil {
			return "", frontmatterError(fmt.Sprintf("value of %q cannot be written as YAML: %v", k, err))
		}
		if idx >= 0 {
			m.Content[idx+1] = val
		} else {
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, val)
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
		for _, k := range sortedKeys(x) {
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

func frontmatterError(msg string) error {
	return &wire.Error{Code: wire.CodePreconditionFailed, Message: msg + "; nothing was changed",
		Details: map[string]any{"field": "updateFrontmatter"}}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
