package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/portcullis/portcullis/wire"
)

// Markers that replace what must not enter evidence.
const (
	Redacted      = "[REDACTED]"
	MaxArgsString = 4096 // longer strings are replaced by a digest marker
)

// secretFieldNames are field names redacted on top of wire.SecretName, which
// is tuned for environment variables.
var secretFieldNames = map[string]bool{
	"authorization": true, "proxy_authorization": true, "password": true, "passwd": true,
	"passphrase": true, "token": true, "cookie": true, "set_cookie": true, "secret": true,
	"api_key": true, "apikey": true, "x_api_key": true, "private_key": true, "client_secret": true,
	"access_token": true, "refresh_token": true, "id_token": true, "credentials": true, "auth": true,
}

// secretPatterns find secret-looking substrings in free text. Each match is
// rewritten by its replacement (regexp expansion syntax).
var secretPatterns = []struct {
	re   *regexp.Regexp
	repl string
}{
	// PEM private keys, with or without their END line.
	{regexp.MustCompile(`-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|\z)`), Redacted},
	// Vendor tokens with distinctive prefixes.
	{regexp.MustCompile(`sk-ant-[A-Za-z0-9_\-]{8,}`), Redacted},
	{regexp.MustCompile(`\bsk-[A-Za-z0-9_\-]{16,}`), Redacted},
	{regexp.MustCompile(`github_pat_[A-Za-z0-9_]{16,}`), Redacted},
	{regexp.MustCompile(`gh[pousr]_[A-Za-z0-9]{16,}`), Redacted},
	{regexp.MustCompile(`(?:AKIA|ASIA)[A-Z0-9]{16}`), Redacted},
	{regexp.MustCompile(`xox[abposr]-[A-Za-z0-9\-]{8,}`), Redacted},
	{regexp.MustCompile(`glpat-[A-Za-z0-9_\-]{16,}`), Redacted},
	// JSON Web Tokens.
	{regexp.MustCompile(`eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*`), Redacted},
	// Credentials in URLs: scheme://user:password@host.
	{regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*):[^/\s@]*@`), "${1}:" + Redacted + "@"},
	// HTTP authorization schemes.
	{regexp.MustCompile(`(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9\-._~+/]{6,}=*`), "${1}${2}" + Redacted},
	// name=value and name: value where the name is secret-shaped
	// (--token=…, OPENAI_API_KEY=…, "password": "…").
	{regexp.MustCompile(`(?i)([A-Za-z0-9_.\-]*(?:pass|pwd|secret|token|key|auth|cookie|credential|dsn|database_url)[A-Za-z0-9_.\-]*["']?\s*[:=]\s*["']?)[^\s"'&;,]+`), "${1}" + Redacted},
	// --password value in one string (shell text, code).
	{regexp.MustCompile(`(?i)(--?[A-Za-z0-9_\-]*(?:pass|pwd|secret|token|key|auth|credential)[A-Za-z0-9_\-]*\s+)[^\s\-][^\s]*`), "${1}" + Redacted},
}

// flagRe recognizes an argv flag with its value in the next element.
var flagRe = regexp.MustCompile(`^--?([A-Za-z][A-Za-z0-9_\-]*)$`)

// Redact returns a deep copy of a tool call's arguments that is safe to keep
// as evidence: secrets must never become durable, because evidence is kept
// for years and read by auditors. Values of "env" objects and of
// secret-shaped fields are replaced by "[REDACTED]"; secret-looking
// substrings (vendor API keys, bearer tokens, JWTs, PEM private keys, URL
// passwords, NAME=value with a secret-shaped NAME, --password value) are
// replaced in place; strings longer than MaxArgsString bytes become
// "[TRUNCATED sha256=<hex> bytes=N]". The input is never modified.
func Redact(args map[string]any) map[string]any {
	if args == nil {
		return nil
	}
	out, _ := redactValue(args, true).(map[string]any)
	return out
}

// RedactOutput returns a deep copy of a tool's output (any JSON value) with
// the same redaction as Redact but no cut of long strings: the copy is
// kept for the caller to read back (read_tool_result), bounded as a whole
// by its store instead. The input is never modified.
func RedactOutput(v any) any { return redactValue(v, false) }

// ArgsDigest is the SHA-256 hex of the caller's raw input bytes: it lets an
// auditor holding the original prove which input a receipt is about, though
// evidence keeps only the redacted copy.
func ArgsDigest(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// SecretField reports whether a field of that name holds a secret.
func SecretField(name string) bool {
	if wire.SecretName(name) {
		return true
	}
	n := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(name), "-", "_"))
	return secretFieldNames[n]
}

func redactValue(v any, trunc bool) any {
	switch x := v.(type) {
	case nil, bool, float64, float32, int, int64, int32, uint, uint64, uint32, json.Number:
		return x
	case string:
		return redactString(x, trunc)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			switch {
			case SecretField(k):
				out[k] = Redacted
			case strings.EqualFold(k, "env"):
				out[k] = redactEnv(val)
			default:
				out[k] = redactValue(val, trunc)
			}
		}
		return out
	case map[string]string:
		m := make(map[string]any, len(x))
		for k, s := range x {
			m[k] = s
		}
		return redactValue(m, trunc)
	case []any:
		return redactList(x, trunc)
	case []string:
		l := make([]any, len(x))
		for i, s := range x {
			l[i] = s
		}
		return redactList(l, trunc)
	default:
		// Anything else is brought to its JSON form first, so no type
		// slips through unredacted.
		b, err := json.Marshal(x)
		if err != nil {
			return Redacted
		}
		var generic any
		if err := json.Unmarshal(b, &generic); err != nil {
			return Redacted
		}
		return redactValue(generic, trunc)
	}
}

// redactList redacts each element and, argv style, the element after a
// secret-shaped flag (--password hunter2).
func redactList(l []any, trunc bool) []any {
	out := make([]any, len(l))
	secretNext := false
	for i, v := range l {
		if secretNext {
			secretNext = false
			if _, ok := v.(string); ok {
				out[i] = Redacted
				continue
			}
		}
		if s, ok := v.(string); ok {
			if m := flagRe.FindStringSubmatch(s); m != nil && SecretField(m[1]) {
				secretNext = true
			}
		}
		out[i] = redactValue(v, trunc)
	}
	return out
}

// redactEnv keeps an environment's names but none of its values.
func redactEnv(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k := range x {
			out[k] = Redacted
		}
		return out
	case map[string]string:
		out := make(map[string]any, len(x))
		for k := range x {
			out[k] = Redacted
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if k, _, found := strings.Cut(s, "="); ok && found {
				out[i] = RedactString(k) + "=" + Redacted
			} else {
				out[i] = Redacted
			}
		}
		return out
	case nil:
		return nil
	default:
		return Redacted
	}
}

// RedactString rewrites secret-looking substrings of s and replaces strings
// longer than MaxArgsString bytes by a digest marker.
func RedactString(s string) string { return redactString(s, true) }

func redactString(s string, trunc bool) string {
	if trunc && len(s) > MaxArgsString {
		sum := sha256.Sum256([]byte(s))
		return fmt.Sprintf("[TRUNCATED sha256=%s bytes=%d]", hex.EncodeToString(sum[:]), len(s))
	}
	for _, p := range secretPatterns {
		// MatchString does not allocate; ReplaceAllString always does,
		// even when nothing matches (the usual case).
		if p.re.MatchString(s) {
			s = p.re.ReplaceAllString(s, p.repl)
		}
	}
	return s
}
