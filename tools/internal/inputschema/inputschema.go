// Package inputschema makes a built-in tool's JSON Schema the one source of
// its input's shape: the same document is advertised (GET /v1/tools, MCP
// tools/list) and enforced, by a JSON Schema validator
// (github.com/santhosh-tekuri/jsonschema), before the tool's own decoder
// applies the rules a schema cannot say (absolute paths, NUL bytes, env
// names, ...). A schema is compiled once, when the tool package loads.
//
// The advertised document is generated from the tool's source schema in one
// step: every optional top-level property also accepts JSON null, which
// counts as absent (OpenAI strict mode sends absent optional fields as null),
// so that what models are shown is exactly what the gateway accepts.
package inputschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/portcullis/portcullis/tools/internal/strictjson"
	"github.com/portcullis/portcullis/wire"
)

// Schema is one tool's input schema: the advertised document and its
// compiled validator.
type Schema struct {
	doc      json.RawMessage
	tree     map[string]any // doc, decoded: for the wording of errors
	compiled *jsonschema.Schema
}

var printer = message.NewPrinter(language.English)

// MustCompile generates the advertised schema from src (see the package
// comment) and compiles it; name identifies it in errors. It panics on a
// schema that does not compile: schemas are constants, and a test compiles
// every tool's.
func MustCompile(name, src string) *Schema {
	s, err := Compile(name, src)
	if err != nil {
		panic(err)
	}
	return s
}

// Compile is MustCompile returning the error.
func Compile(name, src string) (*Schema, error) {
	ordered, err := parseOrdered(src)
	if err != nil {
		return nil, fmt.Errorf("inputschema %s: %w", name, err)
	}
	nullableOptionals(ordered)
	var buf bytes.Buffer
	if err := encodeOrdered(&buf, ordered); err != nil {
		return nil, fmt.Errorf("inputschema %s: %w", name, err)
	}
	doc := buf.Bytes()
	var tree map[string]any
	if err := json.Unmarshal(doc, &tree); err != nil {
		return nil, fmt.Errorf("inputschema %s: %w", name, err)
	}
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("inputschema %s: %w", name, err)
	}
	url := "mem://portcullis/tools/" + name + ".json"
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(url, parsed); err != nil {
		return nil, fmt.Errorf("inputschema %s: %w", name, err)
	}
	compiled, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("inputschema %s: %w", name, err)
	}
	return &Schema{doc: doc, tree: tree, compiled: compiled}, nil
}

// JSON is the advertised schema.
func (s *Schema) JSON() json.RawMessage { return s.doc }

// nullableOptionals lets every optional top-level property be null too.
func nullableOptionals(tree *object) {
	props, _ := tree.get("properties").(*object)
	required, _ := tree.get("required").([]any)
	if props == nil {
		return
	}
	for _, name := range props.keys {
		prop, ok := props.get(name).(*object)
		if !ok || slices.Contains(required, any(name)) {
			continue
		}
		switch t := prop.get("type").(type) {
		case string:
			if t != "null" {
				prop.set("type", []any{t, "null"})
			}
		case []any:
			if !slices.Contains(t, any("null")) {
				prop.set("type", append(t, "null"))
			}
		case nil:
			if alts, ok := prop.get("anyOf").([]any); ok && !slices.ContainsFunc(alts, isNullSchema) {
				prop.set("anyOf", append(alts, &object{keys: []string{"type"}, vals: map[string]any{"type": "null"}}))
			}
		}
		if e, ok := prop.get("enum").([]any); ok && !slices.Contains(e, nil) {
			prop.set("enum", append(e, nil))
		}
	}
}

func isNullSchema(v any) bool {
	m, ok := v.(*object)
	return ok && len(m.keys) == 1 && m.get("type") == "null"
}

// Decode reads raw strictly (strictjson.Decode: one UTF-8 object, no
// duplicate keys, nothing after it) and validates it against the schema.
// Every error is a *wire.Error naming the field at fault: invalid_input, or
// too_large for a maxLength, maxItems or maxProperties bound.
func (s *Schema) Decode(raw []byte) (strictjson.Object, error) {
	obj, err := strictjson.Decode(raw, "input")
	if err != nil {
		return obj, err
	}
	return obj, s.Validate(raw)
}

// Validate validates raw, already known to be one JSON object.
func (s *Schema) Validate(raw []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return strictjson.Invalid("input", "input is not valid JSON: %v", err)
	}
	err = s.compiled.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return strictjson.Invalid("input", "input does not match the tool's schema: %v", err)
	}
	return s.wireError(pick(ve), v)
}

// pick returns the error to report: a leaf, descending into the one
// alternative of an anyOf/oneOf whose type matched, the first in order of
// instance location for a stable answer.
func pick(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	var leaves []*jsonschema.ValidationError
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		causes := e.Causes
		switch e.ErrorKind.(type) {
		case *kind.AnyOf, *kind.OneOf:
			causes = slices.DeleteFunc(slices.Clone(causes), func(c *jsonschema.ValidationError) bool {
				_, isType := c.ErrorKind.(*kind.Type)
				return isType && slices.Equal(c.InstanceLocation, e.InstanceLocation)
			})
			if len(causes) != 1 {
				leaves = append(leaves, e)
				return
			}
		}
		if len(causes) == 0 {
			leaves = append(leaves, e)
			return
		}
		for _, c := range causes {
			walk(c)
		}
	}
	walk(ve)
	slices.SortStableFunc(leaves, func(a, b *jsonschema.ValidationError) int {
		if c := strings.Compare(strings.Join(a.InstanceLocation, "\x00"), strings.Join(b.InstanceLocation, "\x00")); c != 0 {
			return c
		}
		return rank(a) - rank(b)
	})
	return leaves[0]
}

// rank orders errors at one location: an unknown field first (the old
// decoders' order: it says most about what the caller got wrong).
func rank(e *jsonschema.ValidationError) int {
	if _, ok := e.ErrorKind.(*kind.AdditionalProperties); ok {
		return 0
	}
	return 1
}

// wireError words e for the caller: the field in the contract's form
// (argv[1], env.HOME, patch.operation), what was wrong and what the schema
// accepts there.
func (s *Schema) wireError(e *jsonschema.ValidationError, instance any) *wire.Error {
	field := fieldName(e.InstanceLocation, instance)
	ptr := schemaPointer(e.SchemaURL) // the schema holding the failed keyword
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		f := join(field, k.Missing[0])
		return strictjson.Invalid(f, "%s is required%s", f, s.describe(append(slices.Clone(ptr), "properties", k.Missing[0])))
	case *kind.AdditionalProperties:
		f := join(field, k.Properties[0])
		return strictjson.Invalid(f, "unknown field %q: accepted fields are %s", k.Properties[0], strings.Join(s.propertyNames(ptr), ", "))
	case *kind.Type:
		return strictjson.Invalid(field, "%s must be %s, not %s%s", field, strings.Join(k.Want, " or "), k.Got, s.describe(ptr))
	case *kind.MaxLength, *kind.MaxItems, *kind.MaxProperties:
		return strictjson.TooLarge(field, "%s is too large: %s", field, k.LocalizedString(printer))
	case *kind.AnyOf, *kind.OneOf:
		return strictjson.Invalid(field, "%s has none of the accepted forms%s", field, s.describe(ptr))
	default:
		return strictjson.Invalid(field, "%s is not accepted: %s%s", field, e.ErrorKind.LocalizedString(printer), s.describe(ptr))
	}
}

// fieldName renders an instance location as the contract names fields:
// members joined with ".", array elements as [i]; the whole input is
// "input".
func fieldName(loc []string, instance any) string {
	var b strings.Builder
	v := instance
	for _, tok := range loc {
		switch x := v.(type) {
		case []any:
			b.WriteString("[" + tok + "]")
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(x) {
				v = x[i]
			}
		case map[string]any:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(tok)
			v = x[tok]
		}
	}
	if b.Len() == 0 {
		return "input"
	}
	return b.String()
}

func join(field, key string) string {
	if field == "input" {
		return key
	}
	return field + "." + key
}

// schemaPointer returns the JSON pointer tokens of a schema URL's fragment.
func schemaPointer(url string) []string {
	_, frag, _ := strings.Cut(url, "#")
	frag = strings.TrimPrefix(frag, "/")
	if frag == "" {
		return nil
	}
	toks := strings.Split(frag, "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks
}

// at returns the schema node at ptr in the advertised document.
func (s *Schema) at(ptr []string) map[string]any {
	var v any = s.tree
	for _, tok := range ptr {
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	m, _ := v.(map[string]any)
	return m
}

// describe is ": <description>" of the nearest schema at or above ptr that
// has one, or "".
func (s *Schema) describe(ptr []string) string {
	for n := len(ptr); n >= 1; n-- { // the root's description is the tool's, not a field's
		if d, ok := s.at(ptr[:n])["description"].(string); ok {
			return ": " + d
		}
	}
	return ""
}

// propertyNames lists the properties the schema at ptr declares, sorted.
func (s *Schema) propertyNames(ptr []string) []string {
	props, _ := s.at(ptr)["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}
