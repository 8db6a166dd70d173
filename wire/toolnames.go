package wire

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// Model-safe tool names.
//
// Tool names carry dots (fs.read, http.get, files.read_text_file), but the
// OpenAI and Anthropic tool APIs accept only function names matching
// ModelSafeNamePattern. GET /v1/tools therefore names each tool by
// ModelSafeName(tool) and returns the map back to the tool name; every
// endpoint that takes a tool name accepts either form.
//
// The mapping is a pure function, injective over all strings, so a name is
// never ambiguous and the SDKs, the gateway and a policy author all compute
// the same one. It keeps the common names readable:
//
//	A. a name that is already model-safe, has no "__", does not start with
//	   "_" and does not start with a built-in namespace and "_" stays as it
//	   is: Exec, read_tool_result.
//	B. <ns>.<x> for a built-in namespace ns (fs, code, http, exec, mcp, v1:
//	   the names an upstream may not take) becomes <ns>_<x>, when x is
//	   model-safe, has no "__" and does not start with "_": fs.read ->
//	   fs_read, fs.apply_patch -> fs_apply_patch, code.run -> code_run.
//	C. <upstream>.<x> for an upstream name (lower-case, [a-z][a-z0-9_-]*,
//	   not a built-in namespace, no "__", not ending in "_") becomes
//	   <upstream>__<x>, when x is model-safe: files.read_text_file ->
//	   files__read_text_file. The first "__" is always the separator.
//	D. anything else (characters outside the set, more than 64 bytes, a
//	   name the rules above would make ambiguous) becomes "_", a readable
//	   slug of the name, "_" and 16 base32 characters of its SHA-256:
//	   _github_get_issue_x3b6...  Only the gateway's names map reverses it.
//
// Rule A's outputs have no "__" and no namespace prefix, B's start with a
// namespace and "_" and have no "__", C's start with a lower-case letter
// and contain "__", D's start with "_": the four never meet, and within
// each rule the name is recovered from the output (D: up to the 80-bit
// digest, which the gateway also checks for collisions among the tools it
// serves). So a hypothetical tool literally named fs_read does not take
// fs.read's name: it falls under D.

// ModelSafeNamePattern is the function-name grammar of the OpenAI and
// Anthropic tool APIs, which every ModelSafeName output matches.
const ModelSafeNamePattern = `^[a-zA-Z0-9_-]{1,64}$`

// MaxModelSafeNameLen is the longest function name those APIs accept.
const MaxModelSafeNameLen = 64

// BuiltinNamespaces are the namespaces of the built-in tools, which
// upstream MCP servers may not take as their names (contract §8).
var BuiltinNamespaces = []string{"fs", "code", "http", "exec", "mcp", "v1"}

const hashedDigestChars = 16 // base32 characters: 80 bits

var hashEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// IsModelSafeName reports whether s matches ModelSafeNamePattern.
func IsModelSafeName(s string) bool {
	if len(s) == 0 || len(s) > MaxModelSafeNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !safeByte(s[i]) {
			return false
		}
	}
	return true
}

func safeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// ModelSafeName is tool's name for model APIs (see the rules above). It
// always matches ModelSafeNamePattern, and distinct tools get distinct
// names.
func ModelSafeName(tool string) string {
	if plainName(tool) {
		return tool // A
	}
	if ns, x, ok := strings.Cut(tool, "."); ok {
		if builtinNamespace(ns) && plainTail(x) && len(tool) <= MaxModelSafeNameLen {
			return ns + "_" + x // B
		}
		if upstreamPrefix(ns) && IsModelSafeName(x) && len(ns)+2+len(x) <= MaxModelSafeNameLen {
			return ns + "__" + x // C
		}
	}
	return hashedName(tool) // D
}

// ToolFromModelSafe is the tool name whose ModelSafeName is s, when s is
// one of rules A to C; hashed names (rule D) are known only to the
// gateway's names map, and ok is false for them and for anything that is
// no tool's model-safe name.
func ToolFromModelSafe(s string) (tool string, ok bool) {
	if !IsModelSafeName(s) || s[0] == '_' {
		return "", false
	}
	switch u, x, sep := strings.Cut(s, "__"); {
	case sep:
		tool = u + "." + x
	default:
		tool = s
		for _, ns := range BuiltinNamespaces {
			if rest, found := strings.CutPrefix(s, ns+"_"); found {
				tool = ns + "." + rest
				break
			}
		}
	}
	return tool, ModelSafeName(tool) == s
}

// plainName is rule A: model-safe as it is and outside the shapes of the
// other rules.
func plainName(s string) bool {
	if !IsModelSafeName(s) || s[0] == '_' || strings.Contains(s, "__") {
		return false
	}
	for _, ns := range BuiltinNamespaces {
		if strings.HasPrefix(s, ns+"_") {
			return false
		}
	}
	return true
}

// plainTail is what may follow "<ns>_" in rule B without meeting rule C
// ("__") or blurring the separator.
func plainTail(x string) bool {
	return IsModelSafeName(x) && x[0] != '_' && !strings.Contains(x, "__")
}

func builtinNamespace(s string) bool {
	for _, ns := range BuiltinNamespaces {
		if s == ns {
			return true
		}
	}
	return false
}

// upstreamPrefix is what may stand before rule C's "__": an upstream name
// whose end cannot be confused with the separator.
func upstreamPrefix(u string) bool {
	if u == "" || len(u) > 32 || u[0] < 'a' || u[0] > 'z' || builtinNamespace(u) ||
		strings.Contains(u, "__") || strings.HasSuffix(u, "_") {
		return false
	}
	for i := 0; i < len(u); i++ {
		c := u[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// hashedName is rule D: "_" + slug + "_" + digest, at most 64 bytes.
func hashedName(tool string) string {
	sum := sha256.Sum256([]byte(tool))
	digest := hashEncoding.EncodeToString(sum[:10])[:hashedDigestChars]
	maxSlug := MaxModelSafeNameLen - 2 - hashedDigestChars
	var b strings.Builder
	b.Grow(MaxModelSafeNameLen)
	b.WriteByte('_')
	n := 0
	under := true // no leading or doubled "_" in the slug
	for i := 0; i < len(tool) && n < maxSlug; i++ {
		c := tool[i]
		if c == '_' || !safeByte(c) {
			if !under {
				b.WriteByte('_')
				n++
				under = true
			}
			continue
		}
		b.WriteByte(c)
		n++
		under = false
	}
	if !under {
		b.WriteByte('_')
	}
	b.WriteString(digest)
	return b.String()
}
