package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

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
	"pass": true, "pwd": true, "passcode": true, "privkey": true, "private_token": true,
}

// secretPatterns find secret-looking substrings in free text. Each match is
// rewritten by its replacement (regexp expansion syntax). need, when set,
// is a cheap necessary condition on the text and its lower-case form: the
// patterns without a literal prefix cost microseconds each, and every
// receipt runs them over every string it keeps.
var secretPatterns = []struct {
	re   *regexp.Regexp
	repl string
	need func(s, lower string) bool
}{
	// PEM private keys, with or without their END line.
	{regexp.MustCompile(`-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|\z)`), Redacted, nil},
	// Vendor tokens with distinctive prefixes.
	{regexp.MustCompile(`sk-ant-[A-Za-z0-9_\-]{8,}`), Redacted, nil},
	{regexp.MustCompile(`\bsk-[A-Za-z0-9_\-]{16,}`), Redacted, func(s, _ string) bool { return strings.Contains(s, "sk-") }},
	{regexp.MustCompile(`github_pat_[A-Za-z0-9_]{16,}`), Redacted, nil},
	{regexp.MustCompile(`gh[pousr]_[A-Za-z0-9]{16,}`), Redacted, nil},
	{regexp.MustCompile(`(?:AKIA|ASIA)[A-Z0-9]{16}`), Redacted, nil},
	{regexp.MustCompile(`xox[abposr]-[A-Za-z0-9\-]{8,}`), Redacted, nil},
	{regexp.MustCompile(`glpat-[A-Za-z0-9_\-]{16,}`), Redacted, nil},
	// JSON Web Tokens.
	{regexp.MustCompile(`eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*`), Redacted, nil},
	// Credentials in URLs: scheme://user:password@host.
	{regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*):[^/\s@]*@`), "${1}:" + Redacted + "@", func(s, _ string) bool { return strings.Contains(s, "://") }},
	// HTTP authorization schemes.
	{regexp.MustCompile(`(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9\-._~+/]{6,}=*`), "${1}${2}" + Redacted, func(_, l string) bool { return containsAny(l, "bearer", "basic", "token") }},
	// name=value and name: value where the name is secret-shaped
	// (--token=…, OPENAI_API_KEY=…, "password": "…").
	{regexp.MustCompile(`(?i)([A-Za-z0-9_.\-]*(?:pass|pwd|secret|token|key|auth|cookie|credential|dsn|database_url)[A-Za-z0-9_.\-]*["']?\s*[:=]\s*["']?)[^\s"'&;,]+`), "${1}" + Redacted, func(s, l string) bool {
		return strings.ContainsAny(s, ":=") && containsAny(l, "pass", "pwd", "secret", "token", "key", "auth", "cookie", "credential", "dsn", "database_url")
	}},
	// --password value in one string (shell text, code).
	{regexp.MustCompile(`(?i)(--?[A-Za-z0-9_\-]*(?:pass|pwd|secret|token|key|auth|credential)[A-Za-z0-9_\-]*\s+)[^\s\-][^\s]*`), "${1}" + Redacted, nil},
}

// flagRe recognizes an argv flag with its value in the next element.
var flagRe = regexp.MustCompile(`^--?([A-Za-z][A-Za-z0-9_\-]*)$`)

// Redact returns a deep copy of a tool call's arguments that is safe to keep
// as evidence: secrets must never become durable, because evidence is kept
// for years and read by auditors. Values of "env" objects and of
// secret-shaped fields are replaced by "[REDACTED]"; secret-looking
// substrings (vendor API keys, bearer tokens, JWTs, PEM private keys, URL
// passwords, NAME=value with a secret-shaped NAME, --password value) are
// replaced in place, in object keys as in values (a caller can put a token
// in a key as easily as in a value); strings longer than MaxArgsString
// bytes become "[TRUNCATED sha256=<hex> bytes=N]". The input is never
// modified. Receipts store args through BoundedArgs, which applies the same
// rules and also bounds the total size.
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

// SecretField reports whether a field of that name holds a secret. A
// camelCase name is also read as snake_case (privateKey as private_key), and
// any name holding "passphrase" is one.
func SecretField(name string) bool {
	if wire.SecretName(name) {
		return true
	}
	snake := snakeCase(name)
	if snake != name && wire.SecretName(snake) {
		return true
	}
	for _, v := range []string{name, snake} {
		n := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(v), "-", "_"))
		if secretFieldNames[n] || strings.Contains(n, "passphrase") {
			return true
		}
	}
	return false
}

// snakeCase puts an underscore where a lower-case letter or digit meets an
// upper-case one: "privateKey" becomes "private_Key".
func snakeCase(s string) string {
	var b strings.Builder
	prevLowerOrDigit := false
	for _, r := range s {
		upper := r >= 'A' && r <= 'Z'
		if upper && prevLowerOrDigit {
			b.WriteByte('_')
		}
		b.WriteRune(r)
		prevLowerOrDigit = (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9')
	}
	return b.String()
}

// pairNameKeys and pairValueKeys spell a secret split across members of
// one object: {"name": "DB_PASSWORD", "value": "…"} (Kubernetes env
// entries, HAR headers, form fields). Compared in lower case.
var (
	pairNameKeys  = map[string]bool{"name": true, "key": true, "header": true, "field": true}
	pairValueKeys = map[string]bool{"value": true, "values": true, "val": true}
)

// namesSecret reports whether m names a secret in a name-like member, so
// that its value-like members are redacted whole.
func namesSecret(m map[string]any) bool {
	for k, v := range m {
		if s, ok := v.(string); ok && pairNameKeys[strings.ToLower(k)] && SecretField(s) {
			return true
		}
	}
	return false
}

// secretMember reports whether member k of m is redacted whole: a
// secret-shaped name, or the value of an object that names a secret.
func secretMember(m map[string]any, k string, paired bool) bool {
	return SecretField(k) || (paired && pairValueKeys[strings.ToLower(k)])
}

// userFlags take "user:password" as their next argv element (curl -u,
// --user, --proxy-user, -U): the part after the first colon is redacted.
var userFlags = map[string]bool{"-u": true, "--user": true, "-U": true, "--proxy-user": true}

// redactUserPass keeps "user:" of a "user:password" flag value.
func redactUserPass(s string) string {
	if user, _, ok := strings.Cut(s, ":"); ok {
		return redactString(user, true) + ":" + Redacted
	}
	return redactString(s, true)
}

// secretPair reports whether l is a [name, value] pair whose name is
// secret-shaped (["Authorization", "…"]): its second element is redacted.
func secretPair(l []any) bool {
	if len(l) != 2 {
		return false
	}
	s, ok := l[0].(string)
	return ok && SecretField(s)
}

func redactValue(v any, trunc bool) any {
	switch x := v.(type) {
	case nil, bool, float64, float32, int, int64, int32, uint, uint64, uint32, json.Number:
		return x
	case string:
		return redactString(x, trunc)
	case map[string]any:
		out := make(map[string]any, len(x))
		paired := namesSecret(x)
		for k, val := range x {
			var v any
			switch {
			case secretMember(x, k, paired):
				v = Redacted
			case strings.EqualFold(k, "env"):
				v = redactEnv(val)
			default:
				v = redactValue(val, trunc)
			}
			out[uniqueKey(out, RedactString(k))] = v
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

// uniqueKey returns k, or k with a " #n" suffix when redaction made two keys
// equal, so no redacted member silently replaces another.
func uniqueKey(m map[string]any, k string) string {
	if _, taken := m[k]; !taken {
		return k
	}
	for n := 2; ; n++ {
		c := fmt.Sprintf("%s #%d", k, n)
		if _, taken := m[c]; !taken {
			return c
		}
	}
}

// redactList redacts each element and, argv style, the element after a
// secret-shaped flag (--password hunter2).
func redactList(l []any, trunc bool) []any {
	out := make([]any, len(l))
	secretNext := false
	if secretPair(l) {
		return []any{redactValue(l[0], trunc), Redacted}
	}
	userNext := false
	for i, v := range l {
		s, isString := v.(string)
		if userNext && isString {
			userNext = false
			out[i] = redactUserPass(s)
			continue
		}
		userNext = isString && userFlags[s]
		if secretNext {
			secretNext = false
			if isString {
				out[i] = Redacted
				continue
			}
		}
		if isString {
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
			out[uniqueKey(out, RedactString(k))] = Redacted
		}
		return out
	case map[string]string:
		out := make(map[string]any, len(x))
		for k := range x {
			out[uniqueKey(out, RedactString(k))] = Redacted
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
	return redactPatterns(s)
}

// redactPatterns applies secretPatterns to s.
func redactPatterns(s string) string {
	lower := foldLower(s)
	for _, p := range secretPatterns {
		if p.need != nil && lower != "" && !p.need(s, lower) {
			continue
		}
		// MatchString does not allocate; ReplaceAllString always does,
		// even when nothing matches (the usual case).
		if p.re.MatchString(s) {
			s = p.re.ReplaceAllString(s, p.repl)
			lower = foldLower(s)
		}
	}
	return s
}

// foldLower is s in lower case for the need filters, or "" (filters off)
// when s holds U+017F (ſ), the one non-ASCII letter that (?i) folds to an
// ASCII one and strings.ToLower does not (the Kelvin sign it does).
func foldLower(s string) string {
	if strings.ContainsRune(s, 'ſ') {
		return ""
	}
	return strings.ToLower(s)
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// Bounds on what one receipt keeps of a call's arguments. A refused or
// invalid call's input is whatever the caller sent (up to the request body
// limit) and never ran, so its receipt keeps at most MaxRefusedArgsBytes of
// it; an allowed call's args are what ran and are worth more to an auditor,
// so they may take up to MaxArgsBytes. Past the bound the receipt keeps the
// first ArgsPrefixBytes of the redacted canonical JSON, the size and the
// SHA-256 of the caller's whole input, under the TruncatedArgsKey marker.
const (
	MaxArgsBytes        = 64 << 10
	MaxRefusedArgsBytes = 4 << 10
	ArgsPrefixBytes     = 4 << 10
	// TruncatedArgsKey is the one member of a receipt's args when they
	// were cut: {"[TRUNCATED]": {"args_bytes", "args_sha256", "prefix"}}.
	TruncatedArgsKey = "[TRUNCATED]"
	// MaxReasonBytes bounds one reason as evidence keeps it, and
	// MaxReasons their number.
	MaxReasonBytes = 1024
	MaxReasons     = 32
)

// TruncatedArgs is the body of the TruncatedArgsKey marker.
type TruncatedArgs struct {
	// ArgsBytes is the size of the caller's whole input, in bytes.
	ArgsBytes int `json:"args_bytes"`
	// ArgsSHA256 is ArgsDigest of the whole input (the receipt's
	// args_sha256).
	ArgsSHA256 string `json:"args_sha256"`
	// Prefix is the start of the redacted args' canonical JSON, cut on a
	// character boundary.
	Prefix string `json:"prefix"`
}

// BoundedArgs is the JSON a receipt stores for a call's args: the redacted
// args (Redact's rules) as canonical JSON (members sorted by key), or, when
// that would exceed limit bytes, the TruncatedArgsKey marker holding the
// first ArgsPrefixBytes of it plus the size and digest of raw, the caller's
// whole input. Redaction happens before the cut, value by value, so a
// secret is replaced whole before any prefix is taken. The work is bounded
// by the output: encoding stops at the bound, so a 5 MB input costs a
// decode, not a redaction of 5 MB. Args that hold the marker key
// themselves are always stored as a marker, so a caller cannot forge one.
// nil args are "null".
func BoundedArgs(args map[string]any, raw []byte, limit int) json.RawMessage {
	if args == nil {
		return json.RawMessage("null")
	}
	budget := max(limit, ArgsPrefixBytes)
	e := &boundedEncoder{max: budget}
	e.value(args)
	_, forged := args[TruncatedArgsKey]
	if !e.full && !forged && len(e.buf) <= limit {
		return json.RawMessage(e.buf)
	}
	prefix := e.buf
	if len(prefix) > ArgsPrefixBytes {
		prefix = prefix[:ArgsPrefixBytes]
	}
	for len(prefix) > 0 && !utf8.Valid(prefix) {
		prefix = prefix[:len(prefix)-1] // a character cut in two
	}
	b, err := json.Marshal(map[string]TruncatedArgs{TruncatedArgsKey: {
		ArgsBytes: len(raw), ArgsSHA256: ArgsDigest(raw), Prefix: string(prefix),
	}})
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// boundedEncoder writes redacted canonical JSON and stops once it holds
// more than max bytes (full is then set and the rest is skipped).
type boundedEncoder struct {
	buf  []byte
	max  int
	full bool
}

func (e *boundedEncoder) raw(b []byte) {
	if e.full {
		return
	}
	e.buf = append(e.buf, b...)
	if len(e.buf) > e.max {
		e.full = true
	}
}

func (e *boundedEncoder) scalar(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(Redacted)
	}
	e.raw(b)
}

// value encodes v with Redact's rules; redactValue is the reference.
func (e *boundedEncoder) value(v any) {
	if e.full {
		return
	}
	switch x := v.(type) {
	case nil, bool, float64, float32, int, int64, int32, uint, uint64, uint32, json.Number:
		e.scalar(x)
	case string:
		e.scalar(RedactString(x))
	case map[string]any:
		paired := namesSecret(x)
		e.object(x, func(k string) {
			switch {
			case secretMember(x, k, paired):
				e.scalar(Redacted)
			case strings.EqualFold(k, "env"):
				e.env(x[k])
			default:
				e.value(x[k])
			}
		})
	case []any:
		e.raw([]byte{'['})
		secretNext, userNext := false, false
		pair := secretPair(x)
		for i, el := range x {
			if e.full {
				return
			}
			if i > 0 {
				e.raw([]byte{','})
			}
			if pair && i == 1 {
				e.scalar(Redacted)
				continue
			}
			s, isString := el.(string)
			if userNext && isString {
				userNext = false
				e.scalar(redactUserPass(s))
				continue
			}
			userNext = isString && userFlags[s]
			switch {
			case secretNext && isString:
				e.scalar(Redacted)
				secretNext = false
				continue
			case isString:
				if m := flagRe.FindStringSubmatch(s); m != nil && SecretField(m[1]) {
					secretNext = true
					e.value(el)
					continue
				}
			}
			secretNext = false
			e.value(el)
		}
		e.raw([]byte{']'})
	default:
		// Typed maps and lists, structs: their generic JSON form.
		b, err := json.Marshal(x)
		var generic any
		if err != nil || json.Unmarshal(b, &generic) != nil {
			e.scalar(Redacted)
			return
		}
		e.value(generic)
	}
}

// env encodes an environment as redactEnv does: names kept, values not.
func (e *boundedEncoder) env(v any) {
	m, ok := v.(map[string]any)
	if !ok {
		e.scalar(redactEnv(v)) // lists, typed maps: small in practice
		return
	}
	e.object(m, func(string) { e.scalar(Redacted) })
}

// object encodes m's members in key order, each name redacted (a name
// that redacts to one already written gets " #2", " #3" ...) and its value
// written by member. It stops, unclosed, when the encoder is full.
func (e *boundedEncoder) object(m map[string]any, member func(k string)) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	e.raw([]byte{'{'})
	seen := map[string]bool{}
	for i, k := range keys {
		if e.full {
			return
		}
		if i > 0 {
			e.raw([]byte{','})
		}
		name := RedactString(k)
		for n := 2; seen[name]; n++ {
			name = fmt.Sprintf("%s #%d", RedactString(k), n)
		}
		seen[name] = true
		e.scalar(name)
		e.raw([]byte{':'})
		member(k)
	}
	e.raw([]byte{'}'})
}

// RedactText makes free text (a refusal's reason, which may quote the
// caller's input) safe and small enough for evidence: secret-looking
// substrings are replaced as in RedactString, then the text is cut to at
// most max bytes on a character boundary, ending in "…" when cut. Text far
// beyond max is first cut to 16×max, so the cost stays bounded; a secret
// straddling that first cut lies past the final one.
func RedactText(s string, max int) string {
	if pre := 16 * max; len(s) > pre {
		s = strings.ToValidUTF8(s[:pre], "")
	}
	s = redactPatterns(s)
	if len(s) <= max {
		return s
	}
	const ell = "…"
	cut := max - len(ell)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ell
}

// BoundReasons is reasons as a receipt keeps them: each through RedactText
// with MaxReasonBytes, at most MaxReasons of them (the last then says how
// many more there were). Never nil.
func BoundReasons(reasons []string) []string {
	out := make([]string, 0, min(len(reasons), MaxReasons))
	for i, r := range reasons {
		if i == MaxReasons-1 && len(reasons) > MaxReasons {
			out = append(out, fmt.Sprintf("… and %d more reasons", len(reasons)-i))
			break
		}
		out = append(out, RedactText(r, MaxReasonBytes))
	}
	return out
}
