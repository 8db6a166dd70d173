package inputschema

import (
	"errors"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/wire"
)

const src = `{
  "type": "object",
  "properties": {
    "argv": {"type": "array", "description": "Program & args <argv>.", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": 4},
    "name": {"type": "string", "maxLength": 4},
    "mode": {"type": "string", "enum": ["a", "b"]},
    "n": {"type": "integer", "minimum": 1, "maximum": 10, "description": "A count."},
    "env": {"type": "object", "additionalProperties": {"type": "string"}},
    "patch": {"anyOf": [{"type": "string"}, {"type": "object", "properties": {"op": {"const": "x"}}, "required": ["op"], "additionalProperties": false}]}
  },
  "required": ["argv"],
  "additionalProperties": false
}`

func TestAdvertised(t *testing.T) {
	t.Parallel()
	s := MustCompile("test", src)
	got := string(s.JSON())
	for _, want := range []string{
		`"argv":{"type":"array","description":"Program & args <argv>."`, // required: unchanged, order and text kept
		`"name":{"type":["string","null"],"maxLength":4}`,
		`"mode":{"type":["string","null"],"enum":["a","b",null]}`,
		`"patch":{"anyOf":[{"type":"string"},{"type":"object"`,
		`,{"type":"null"}]}`,
		`"required":["argv"],"additionalProperties":false}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("advertised schema lacks %s:\n%s", want, got)
		}
	}
	if _, err := Compile("bad", `{"type": 7}`); err == nil {
		t.Error("a schema that does not compile was accepted")
	}
	if _, err := Compile("bad", `[]`); err == nil {
		t.Error("a non-object schema was accepted")
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	s := MustCompile("test", src)
	tests := []struct {
		name, input string
		code        wire.Code
		field, msg  string
	}{
		{"ok", `{"argv":["x"]}`, "", "", ""},
		{"optional nulls are absent", `{"argv":["x"],"name":null,"mode":null,"n":null,"env":null,"patch":null}`, "", "", ""},
		{"not an object", `[1]`, wire.CodeInvalidInput, "input", "JSON object"},
		{"duplicate key", `{"argv":["x"],"argv":["y"]}`, wire.CodeInvalidInput, "argv", "duplicate"},
		{"missing", `{}`, wire.CodeInvalidInput, "argv", "argv is required: Program & args"},
		{"required null", `{"argv":null}`, wire.CodeInvalidInput, "argv", "must be array, not null"},
		{"unknown beats missing", `{"zz":1}`, wire.CodeInvalidInput, "zz", `unknown field "zz": accepted fields are argv, env, mode, n, name, patch`},
		{"element type", `{"argv":["x",1]}`, wire.CodeInvalidInput, "argv[1]", "must be string, not number: Program"},
		{"element empty", `{"argv":["x",""]}`, wire.CodeInvalidInput, "argv[1]", "argv[1] is not accepted"},
		{"too many", `{"argv":["a","b","c","d","e"]}`, wire.CodeTooLarge, "argv", "too large"},
		{"too long", `{"argv":["a"],"name":"abcde"}`, wire.CodeTooLarge, "name", "too large"},
		{"enum", `{"argv":["a"],"mode":"c"}`, wire.CodeInvalidInput, "mode", "mode is not accepted"},
		{"range", `{"argv":["a"],"n":11}`, wire.CodeInvalidInput, "n", "A count."},
		{"fraction", `{"argv":["a"],"n":1.5}`, wire.CodeInvalidInput, "n", "integer, not number"},
		{"huge exponent", `{"argv":["a"],"n":1e400}`, wire.CodeInvalidInput, "n", ""},
		{"map value", `{"argv":["a"],"env":{"A":1}}`, wire.CodeInvalidInput, "env.A", "must be string"},
		{"anyOf branch", `{"argv":["a"],"patch":{"op":"x","extra":1}}`, wire.CodeInvalidInput, "patch.extra", `unknown field "extra": accepted fields are op`},
		{"anyOf none", `{"argv":["a"],"patch":7}`, wire.CodeInvalidInput, "patch", "none of the accepted forms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := s.Decode([]byte(tt.input))
			if tt.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var we *wire.Error
			if !errors.As(err, &we) {
				t.Fatalf("error %v is not a *wire.Error", err)
			}
			if we.Code != tt.code || we.Details["field"] != tt.field || !strings.Contains(we.Message, tt.msg) {
				t.Errorf("got %s field %q %q; want %s field %q containing %q", we.Code, we.Details["field"], we.Message, tt.code, tt.field, tt.msg)
			}
		})
	}
}

// BenchmarkDecode is what the schema adds to a call's request path: a
// strict decode plus validation of a small input.
func BenchmarkDecode(b *testing.B) {
	s := MustCompile("test", src)
	in := []byte(`{"argv":["/usr/bin/git","-C","/srv/work/repo","log"],"name":"ab","n":3,"env":{"GIT_PAGER":"cat"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Decode(in); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzDecode: any input is accepted or refused with invalid_input or
// too_large naming a field; nothing panics.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"argv":["x"]}`, `{}`, `{"zz":1}`, `{"argv":["a",1],"n":1e400}`,
		`{"argv":["a"],"patch":{"op":"x","extra":1}}`, `{"argv":["a"],"env":{"A":null}}`, `[]`, `null`, `{"argv":[[]]}`} {
		f.Add([]byte(s))
	}
	s := MustCompile("test", src)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := s.Decode(b)
		if err == nil {
			return
		}
		var we *wire.Error
		if !errors.As(err, &we) || (we.Code != wire.CodeInvalidInput && we.Code != wire.CodeTooLarge) {
			t.Fatalf("Decode(%q) error %v is not invalid_input/too_large", b, err)
		}
		// The field is a string; "" when the member at fault is named "".
		if _, ok := we.Details["field"].(string); !ok {
			t.Fatalf("Decode(%q) error names no field: %v", b, we)
		}
	})
}
