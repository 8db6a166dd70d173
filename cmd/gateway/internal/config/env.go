package config

import (
	"reflect"
	"sort"
	"strings"

	"github.com/agnivade/levenshtein"
)

// otherEnv are the PORTCULLIS_* variables that are not config keys but are
// read by the gateway (PORTCULLIS_CONFIG, PORTCULLIS_DENO) or by the SDKs and
// examples that often share its environment (PORTCULLIS_URL,
// PORTCULLIS_API_KEY).
var otherEnv = []string{"PORTCULLIS_CONFIG", "PORTCULLIS_DENO", "PORTCULLIS_URL", "PORTCULLIS_API_KEY"}

// otherEnvPrefixes are families of variables read by the test command and
// the test suites (docs/testing.md), never by the gateway.
var otherEnvPrefixes = []string{"PORTCULLIS_TEST_", "PORTCULLIS_REQUIRE_"}

// KnownEnv lists every PORTCULLIS_* variable the gateway reads, sorted: one
// per config key (ApplyEnv) and otherEnv.
func KnownEnv() []string {
	names := append([]string(nil), otherEnv...)
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			name := prefix + "_" + strings.ToUpper(tag)
			if ft := t.Field(i).Type; ft.Kind() == reflect.Struct {
				walk(ft, name)
				continue
			}
			names = append(names, name)
		}
	}
	walk(reflect.TypeOf(Config{}), "PORTCULLIS")
	sort.Strings(names)
	return names
}

// UnknownVar is a PORTCULLIS_* variable the gateway does not read, and the
// known name nearest to it ("" when none is close: likely not a typo).
type UnknownVar struct {
	Name    string
	Nearest string
}

// UnknownEnv returns the PORTCULLIS_* variables of environ that the gateway
// does not read, sorted by name. A typo such as PORTCULLIS_LISTN would
// otherwise be ignored silently and the gateway would run with the default.
func UnknownEnv(environ []string) []UnknownVar {
	known := KnownEnv()
	isKnown := map[string]bool{}
	for _, k := range known {
		isKnown[k] = true
	}
	var out []UnknownVar
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "PORTCULLIS_") || isKnown[name] || hasAnyPrefix(name, otherEnvPrefixes) {
			continue
		}
		out = append(out, UnknownVar{Name: name, Nearest: nearest(name, known)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// nearest is the known name with the smallest edit distance to name, when
// that distance is small for its length (at most a third of the part after
// PORTCULLIS_, and at most 4).
func nearest(name string, known []string) string {
	best, bestD := "", 0
	for _, k := range known {
		d := levenshtein.ComputeDistance(name, k)
		if best == "" || d < bestD {
			best, bestD = k, d
		}
	}
	limit := min(4, max(1, (len(name)-len("PORTCULLIS_"))/3))
	if bestD > limit {
		return ""
	}
	return best
}
