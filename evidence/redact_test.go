package evidence_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/evidence"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", evidence.MaxArgsString+1)
	longSum := sha256.Sum256([]byte(long))
	const R = evidence.Redacted
	tests := []struct {
		name string
		in   map[string]any
		want map[string]any
	}{
		{"nil", nil, nil},
		{"plain values kept", map[string]any{"argv": []any{"/bin/echo", "hi"}, "n": 1.5, "ok": true, "z": nil},
			map[string]any{"argv": []any{"/bin/echo", "hi"}, "n": 1.5, "ok": true, "z": nil}},
		{"env values, keys kept", map[string]any{"env": map[string]any{"CI": "1", "HOME": "/h"}},
			map[string]any{"env": map[string]any{"CI": R, "HOME": R}}},
		{"env list", map[string]any{"env": []any{"A=1", "B"}}, map[string]any{"env": []any{"A=" + R, R}}},
		{"nested env", map[string]any{"opts": map[string]any{"Env": map[string]any{"X": "y"}}},
			map[string]any{"opts": map[string]any{"Env": map[string]any{"X": R}}}},
		{"secret field names", map[string]any{"password": "p", "Authorization": "x", "api_key": 1234.0,
			"GITHUB_TOKEN": "t", "cookie": "c", "headers": map[string]any{"X-Api-Key": "k", "Accept": "json"}},
			map[string]any{"password": R, "Authorization": R, "api_key": R, "GITHUB_TOKEN": R, "cookie": R,
				"headers": map[string]any{"X-Api-Key": R, "Accept": "json"}}},
		{"openai key", map[string]any{"s": "use sk-proj-abcdefghijklmnop1234 now"}, map[string]any{"s": "use " + R + " now"}},
		{"anthropic key", map[string]any{"s": "sk-ant-api03-AAAAbbbbCCCC"}, map[string]any{"s": R}},
		{"github tokens", map[string]any{"s": "ghp_0123456789abcdefghij0123 github_pat_11ABCDEFG0123456789_abcdef"},
			map[string]any{"s": R + " " + R}},
		{"aws key", map[string]any{"s": "id=AKIAIOSFODNN7EXAMPLE"}, map[string]any{"s": "id=" + R}},
		{"slack", map[string]any{"s": "xoxb-123456789012-abcdef"}, map[string]any{"s": R}},
		{"bearer", map[string]any{"s": "Authorization: Bearer abc.def-ghi"}, map[string]any{"s": "Authorization: " + R + " " + R}},
		{"bearer alone", map[string]any{"s": "bearer abcdef123456"}, map[string]any{"s": "bearer " + R}},
		{"jwt", map[string]any{"s": "tok eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig_nature-x"}, map[string]any{"s": "tok " + R}},
		{"pem", map[string]any{"key": "x", "s": "-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----\ntail"},
			map[string]any{"key": R, "s": R + "\ntail"}},
		{"pem without end", map[string]any{"s": "-----BEGIN PRIVATE KEY-----\nMIIE"}, map[string]any{"s": R}},
		{"url password", map[string]any{"s": "postgres://app:s3cret@db:5432/x"}, map[string]any{"s": "postgres://app:" + R + "@db:5432/x"}},
		{"argv flag=value", map[string]any{"argv": []any{"/usr/bin/tool", "--token=abc123", "--name=x", "OPENAI_API_KEY=zzz"}},
			map[string]any{"argv": []any{"/usr/bin/tool", "--token=" + R, "--name=x", "OPENAI_API_KEY=" + R}}},
		{"argv flag value", map[string]any{"argv": []any{"mysql", "--password", "hunter2", "-u", "root"}},
			map[string]any{"argv": []any{"mysql", "--password", R, "-u", "root"}}},
		{"shell text", map[string]any{"code": `curl --password hunter2 -d "secret=abc"`},
			map[string]any{"code": `curl --password ` + R + ` -d "secret=` + R + `"`}},
		{"json in string", map[string]any{"code": `{"password": "hunter2", "user": "bob"}`},
			map[string]any{"code": `{"password": "` + R + `", "user": "bob"}`}},
		{"long string", map[string]any{"content": long},
			map[string]any{"content": fmt.Sprintf("[TRUNCATED sha256=%s bytes=%d]", hex.EncodeToString(longSum[:]), len(long))}},
		{"typed values", map[string]any{"env": map[string]string{"A": "b"}, "list": []string{"--token", "t"}},
			map[string]any{"env": map[string]any{"A": R}, "list": []any{"--token", R}}},
		{"no false positive", map[string]any{"path": "/home/x/task-management-system-files", "tool": "Exec"},
			map[string]any{"path": "/home/x/task-management-system-files", "tool": "Exec"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var before []byte
			if tc.in != nil {
				before, _ = json.Marshal(tc.in)
			}
			got := evidence.Redact(tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Redact (-want +got):\n%s", diff)
			}
			if tc.in != nil {
				after, _ := json.Marshal(tc.in)
				if string(before) != string(after) {
					t.Errorf("Redact modified its input")
				}
			}
		})
	}
}

func TestArgsDigest(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", `{"argv":["/bin/true"]}`} {
		sum := sha256.Sum256([]byte(in))
		if got := evidence.ArgsDigest([]byte(in)); got != hex.EncodeToString(sum[:]) || len(got) != 64 {
			t.Errorf("ArgsDigest(%q) = %s", in, got)
		}
	}
}

// plantedSecrets are secret formats the fuzzer hides in arbitrary text.
var plantedSecrets = []string{
	"sk-ant-api03-%sQQQQQQQQ",
	"sk-proj-%sQQQQQQQQQQQQQQQQ",
	"ghp_%sQQQQQQQQQQQQQQQQQQQQ",
	"github_pat_%sQQQQQQQQQQQQQQQQ",
	"AKIAQQQQQQQQQQQQQQQQ",
	"xoxb-%sQQQQQQQQQQ",
	"eyJhbGciOi%s.eyJzdWIiOi%s.c2lnbmF0dXJl",
}

func FuzzRedact(f *testing.F) {
	f.Add(`{"argv":["/bin/echo","hi"],"env":{"A":"b"}}`, "prefix ", " suffix", "abc", uint8(0))
	f.Add(`{"password":"x","nested":[{"token":"y"}]}`, "", "", "Z9", uint8(3))
	f.Add(`[]`, "--token=", "", "", uint8(5))
	f.Add(`"just a string"`, "Bearer ", "\n", "xy", uint8(6))
	f.Fuzz(func(t *testing.T, doc, prefix, suffix, body string, which uint8) {
		// Arbitrary JSON never panics and stays JSON-encodable.
		var m map[string]any
		if json.Unmarshal([]byte(doc), &m) == nil {
			out := evidence.Redact(m)
			if _, err := json.Marshal(out); err != nil {
				t.Fatalf("redacted args not encodable: %v", err)
			}
		}
		// A planted secret never survives, whatever surrounds it, as long
		// as it starts at a token boundary.
		body = strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return -1
		}, body)
		format := plantedSecrets[int(which)%len(plantedSecrets)]
		secret := strings.ReplaceAll(format, "%s", body)
		if prefix != "" {
			last := prefix[len(prefix)-1]
			if last >= 'a' && last <= 'z' || last >= 'A' && last <= 'Z' || last >= '0' && last <= '9' || last == '_' || last == '-' {
				prefix += " "
			}
		}
		// The surroundings are arbitrary: when they carry the marker the
		// check below looks for, it cannot tell them from a surviving secret.
		if strings.Contains(prefix+suffix, "QQQQQQQQ") || strings.Contains(prefix+suffix, "c2lnbmF0dXJl") {
			t.Skip("marker in the surroundings")
		}
		text := prefix + secret + suffix
		args := map[string]any{"s": text, "argv": []any{"/bin/x", text}, "deep": map[string]any{"l": []any{text}}}
		out, err := json.Marshal(evidence.Redact(args))
		if err != nil {
			t.Fatal(err)
		}
		// Check the secret's distinctive core (its QQQ tail) is gone.
		if strings.Contains(string(out), "QQQQQQQQ") || strings.Contains(string(out), "c2lnbmF0dXJl") {
			t.Fatalf("secret survived redaction:\nin:  %q\nout: %s", text, out)
		}
	})
}
