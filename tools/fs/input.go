package fstool

import (
	"strings"

	"github.com/portcullis/portcullis/tools/internal/strictjson"
)

// has reports whether key is present and not JSON null (OpenAI strict mode
// sends absent optional fields as null).
func has(obj strictjson.Object, key string) bool {
	_, ok := obj.Get(key)
	return ok
}

// str decodes a string field (see strictjson.String), naming it key.
func str(obj strictjson.Object, key string, maxLen int) (string, error) {
	return strictjson.String(obj.Values[key], key, maxLen)
}

// optInt returns the field's value, or def when absent or null.
func optInt(obj strictjson.Object, key string, def, lo, hi int) (int, error) {
	v, ok := obj.Get(key)
	if !ok {
		return def, nil
	}
	return strictjson.Int(v, key, lo, hi)
}

// sha256Hex accepts 64 lowercase or uppercase hex digits and returns them
// lowercased.
func sha256Hex(field, s string) (string, error) {
	if len(s) != 64 {
		return "", strictjson.Invalid(field, "%s must be 64 hex digits (a SHA-256), or \"\" to require that the file does not exist", field)
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return "", strictjson.Invalid(field, "%s must be 64 hex digits (a SHA-256), or \"\" to require that the file does not exist", field)
		}
	}
	return strings.ToLower(s), nil
}
