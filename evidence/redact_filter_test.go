package evidence

import "testing"

// TestPatternFiltersChangeNothing: the need filters only skip patterns that
// cannot match; redaction with them equals redaction without them.
func TestPatternFiltersChangeNothing(t *testing.T) {
	t.Parallel()
	ref := func(s string) string {
		for _, p := range secretPatterns {
			if p.re.MatchString(s) {
				s = p.re.ReplaceAllString(s, p.repl)
			}
		}
		return s
	}
	for _, s := range []string{
		"", "plain text", "grant:role/agent/Exec allows git log",
		"password=hunter2", "PASSWORD: hunter2", "Pa\u017F\u017Fword=hunter2", "api_\u212Aey=abc", "db_dsn=postgres://u:p@h/db",
		"Authorization: Bearer abcdef.ghi", "BASIC dXNlcjpwYXNz", "tOkEn abcdefgh", "use sk-proj-abcdefghijklmnop1234",
		"postgres://app:s3cret@db:5432/x", "--token value", "{\"secret\": \"x\"}", "key:value", "no colon token here",
	} {
		if got, want := redactPatterns(s), ref(s); got != want {
			t.Errorf("%q: filtered %q, unfiltered %q", s, got, want)
		}
	}
}
