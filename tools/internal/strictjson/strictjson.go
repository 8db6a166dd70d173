// Package strictjson decodes tool input the way every Portcullis tool must:
// one JSON object, valid UTF-8, no duplicate keys (encoding/json keeps the
// last one silently, which would let a policy and the tool see different
// values), nothing after it, and every failure a *wire.Error naming the
// field. It is shared by every tool backend (exec, fs.*, http.get, code.run).
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/portcullis/portcullis/wire"
)

// Object is a JSON object's members, in order.
type Object struct {
	Keys   []string
	Values map[string]json.RawMessage
	field  string
}

// Invalid is an invalid_input error naming field.
func Invalid(field, format string, a ...any) *wire.Error {
	return wire.FieldError(wire.CodeInvalidInput, field, format, a...)
}

// TooLarge is a too_large error naming field.
func TooLarge(field, format string, a ...any) *wire.Error {
	return wire.FieldError(wire.CodeTooLarge, field, format, a...)
}

// Decode reads one JSON object strictly; field names it in errors ("input"
// for the top level, else the member's name, used as a prefix for its keys).
func Decode(raw []byte, field string) (Object, error) {
	obj := Object{Values: map[string]json.RawMessage{}, field: field}
	if !utf8.Valid(raw) {
		return obj, Invalid(field, "%s must be valid UTF-8 JSON", field)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return obj, Invalid(field, "%s must be a JSON object", field)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return obj, Invalid(field, "%s is not valid JSON: %v", field, err)
		}
		key, ok := tok.(string)
		if !ok {
			return obj, Invalid(field, "%s must be a JSON object", field)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return obj, Invalid(field, "%s is not valid JSON: %v", field, err)
		}
		if _, dup := obj.Values[key]; dup {
			return obj, Invalid(obj.name(key), "duplicate key %q: each key may appear once", key)
		}
		obj.Keys = append(obj.Keys, key)
		obj.Values[key] = v
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return obj, Invalid(field, "%s is not a complete JSON object", field)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return obj, Invalid(field, "%s has data after the JSON object", field)
	}
	return obj, nil
}

func (o Object) name(key string) string {
	if o.field == "input" {
		return key
	}
	return o.field + "." + key
}

// Get returns a member, treating JSON null as absent (OpenAI strict mode
// sends optional fields as null).
func (o Object) Get(key string) (json.RawMessage, bool) {
	v, ok := o.Values[key]
	if !ok || IsNull(v) {
		return nil, false
	}
	return v, true
}

// IsNull reports whether v is JSON null.
func IsNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// String decodes a string member, refusing NUL bytes, lone-surrogate
// escapes (which encoding/json silently turns into U+FFFD) and more than
// maxBytes bytes (too_large).
func String(v json.RawMessage, field string, maxBytes int) (string, error) {
	var s string
	if err := json.Unmarshal(v, &s); err != nil || IsNull(v) {
		return "", Invalid(field, "%s must be a string", field)
	}
	if err := CheckString(field, s, v, maxBytes); err != nil {
		return "", err
	}
	return s, nil
}

// CheckString applies String's checks to s, already decoded from raw: for
// callers that word their own "must be a string" error.
func CheckString(field, s string, raw json.RawMessage, maxBytes int) error {
	if len(s) > maxBytes {
		return TooLarge(field, "%s is %d bytes; at most %d are accepted", field, len(s), maxBytes)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return Invalid(field, "%s contains a NUL byte; strings must not contain NUL", field)
	}
	if strings.ContainsRune(s, utf8.RuneError) && !bytes.Contains(raw, []byte("\uFFFD")) && !bytes.Contains(bytes.ToLower(raw), []byte(`\ufffd`)) {
		return Invalid(field, "%s is not valid UTF-8 (or holds a lone surrogate escape); send valid UTF-8 text", field)
	}
	return nil
}

// Int accepts a JSON number with an integral value in [lo, hi].
func Int(v json.RawMessage, field string, lo, hi int) (int, error) {
	bad := Invalid(field, "%s must be an integer from %d to %d", field, lo, hi)
	s := string(bytes.TrimSpace(v))
	if s == "" || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) {
		return 0, bad
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		return 0, bad
	}
	return int(f), nil
}

// Args decodes raw the way encoding/json decodes into any: what policy sees
// as input.args.
func Args(raw []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, Invalid("input", "input must be a JSON object: %v", err)
	}
	return m, nil
}
