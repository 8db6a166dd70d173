package evidence_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/portcullis/portcullis/evidence"
)

// marker decodes a TruncatedArgsKey marker, failing when b is not one.
func marker(t *testing.T, b json.RawMessage) evidence.TruncatedArgs {
	t.Helper()
	var m map[string]evidence.TruncatedArgs
	if err := json.Unmarshal(b, &m); err != nil || len(m) != 1 {
		t.Fatalf("not a truncation marker: %v %.300s", err, b)
	}
	tr, ok := m[evidence.TruncatedArgsKey]
	if !ok {
		t.Fatalf("not a truncation marker: %.300s", b)
	}
	return tr
}

// TestBoundedArgsSmallIsRedactedJSON: under the bound, the stored args are
// exactly the redacted args' canonical JSON.
func TestBoundedArgsSmallIsRedactedJSON(t *testing.T) {
	t.Parallel()
	for _, args := range []map[string]any{
		{"argv": []any{"/usr/bin/mysql", "--password", "hunter2", "<&>"}, "env": map[string]any{"B": "x", "A": "y"}, "n": 1.5, "z": nil},
		{"url": "https://u:pw@example.com/x", "headers": map[string]any{"accept": "text/html"}, "deep": []any{map[string]any{"token": "t"}, true}},
		{"split": []any{map[string]any{"name": "X-Api-Key", "value": "v"}, []any{"Authorization", "a"}, []any{"Accept", "json"}},
			"argv": []any{"curl", "--password", "-u", "bob:pw", "-u", "a:b", "--token", 3.0, "-u", 1.0, "x"}, "privateKey": "k"},
		{},
	} {
		raw, _ := json.Marshal(args)
		got := evidence.BoundedArgs(args, raw, evidence.MaxArgsBytes)
		want, _ := json.Marshal(evidence.Redact(args))
		if string(got) != string(want) {
			t.Errorf("BoundedArgs\n got %s\nwant %s", got, want)
		}
	}
	if got := evidence.BoundedArgs(nil, nil, 100); string(got) != "null" {
		t.Errorf("nil args: %s", got)
	}
}

// TestBoundedArgsHugeInput: the 5 MB refused input of issue #13 is kept as
// a prefix, its size and digest, within a few KB, in bounded time.
func TestBoundedArgsHugeInput(t *testing.T) {
	t.Parallel()
	cases := map[string]map[string]any{
		"many small strings": {"argv": func() []any {
			l := make([]any, 500_000)
			for i := range l {
				l[i] = fmt.Sprintf("a%07d", i)
			}
			return l
		}()},
		"many keys": func() map[string]any {
			m := map[string]any{}
			for i := 0; i < 200_000; i++ {
				m[fmt.Sprintf("key%07d", i)] = "value value value"
			}
			return m
		}(),
		"huge env": {"env": func() map[string]any {
			m := map[string]any{}
			for i := 0; i < 200_000; i++ {
				m[fmt.Sprintf("VAR_%07d", i)] = "v"
			}
			return m
		}()},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw, _ := json.Marshal(args)
			start := time.Now()
			got := evidence.BoundedArgs(args, raw, evidence.MaxRefusedArgsBytes)
			took := time.Since(start)
			if len(got) > 8<<10 {
				t.Fatalf("stored args are %d bytes for a %d-byte input", len(got), len(raw))
			}
			tr := marker(t, got)
			if tr.ArgsBytes != len(raw) || tr.ArgsSHA256 != evidence.ArgsDigest(raw) {
				t.Errorf("size %d sha %s, want %d %s", tr.ArgsBytes, tr.ArgsSHA256, len(raw), evidence.ArgsDigest(raw))
			}
			full, _ := json.Marshal(evidence.Redact(args))
			if len(tr.Prefix) == 0 || len(tr.Prefix) > evidence.ArgsPrefixBytes || !strings.HasPrefix(string(full), tr.Prefix) {
				t.Errorf("prefix (%d bytes) is not a prefix of the redacted JSON: %.200s", len(tr.Prefix), tr.Prefix)
			}
			t.Logf("bounded %d bytes in %s", len(raw), took) // cost: BenchmarkBoundedArgsHuge, not a timed test
		})
	}
}

// TestBoundedArgsNoSecretThroughThePrefix: a secret placed anywhere around
// the cut never shows in the prefix, not even in part: redaction replaces
// it whole before the cut.
func TestBoundedArgsNoSecretThroughThePrefix(t *testing.T) {
	t.Parallel()
	secrets := []string{"sk-ant-api03-QQQQQQQQQQQQQQQQ", "ghp_QQQQQQQQQQQQQQQQQQQQQQ", "AKIAQQQQQQQQQQQQQQQQ", "--token=QQQQQQQQQQQQ"}
	for _, secret := range secrets {
		for pad := evidence.ArgsPrefixBytes - 64; pad < evidence.ArgsPrefixBytes+16; pad++ {
			args := map[string]any{"a": strings.Repeat("x", pad-len(`{"a":"`)) + " " + secret + " tail", "b": strings.Repeat("y", 4000), "c": strings.Repeat("z", 4000)}
			raw, _ := json.Marshal(args)
			got := evidence.BoundedArgs(args, raw, evidence.MaxRefusedArgsBytes)
			tr := marker(t, got)
			if strings.Contains(tr.Prefix, "QQQ") || strings.Contains(string(got), "QQQ") {
				t.Fatalf("secret %q leaked through the prefix at pad %d: %s", secret, pad, tr.Prefix[max(0, len(tr.Prefix)-80):])
			}
			if !utf8.ValidString(tr.Prefix) {
				t.Fatalf("prefix is not UTF-8")
			}
		}
	}
	// In a key, and in a flag's next argv element.
	args := map[string]any{"sk-ant-api03-QQQQQQQQQQQQ": 1, "argv": []any{"/bin/x", "--password", "QQQQhunter2"}}
	raw, _ := json.Marshal(args)
	for _, limit := range []int{evidence.MaxArgsBytes, 10} {
		if got := evidence.BoundedArgs(args, raw, limit); strings.Contains(string(got), "QQQ") {
			t.Errorf("limit %d: secret in a key or flag value survived: %s", limit, got)
		}
	}
	if got, _ := json.Marshal(evidence.Redact(args)); strings.Contains(string(got), "QQQ") {
		t.Errorf("Redact kept a secret key: %s", got)
	}
}

// TestBoundedArgsForgedMarker: a caller's own "[TRUNCATED]" member never
// passes as the gateway's marker.
func TestBoundedArgsForgedMarker(t *testing.T) {
	t.Parallel()
	args := map[string]any{evidence.TruncatedArgsKey: map[string]any{"args_bytes": 1.0, "args_sha256": "00", "prefix": "{}"}}
	raw, _ := json.Marshal(args)
	tr := marker(t, evidence.BoundedArgs(args, raw, evidence.MaxArgsBytes))
	if tr.ArgsBytes != len(raw) || tr.ArgsSHA256 != evidence.ArgsDigest(raw) {
		t.Errorf("forged marker kept: %+v", tr)
	}
}

func TestRedactText(t *testing.T) {
	t.Parallel()
	long := "argv[0] " + strings.Repeat("é", 5000) + " sk-ant-api03-QQQQQQQQQQQQ"
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"token=abc123 ok", "token=[REDACTED] ok"},
		{"unknown field \"sk-ant-api03-QQQQQQQQQQQQ\"", "unknown field \"[REDACTED]\""},
	} {
		if got := evidence.RedactText(tc.in, 100); got != tc.want {
			t.Errorf("RedactText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	got := evidence.RedactText(long, 100)
	if len(got) > 100 || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") || strings.Contains(got, "QQQ") {
		t.Errorf("RedactText(long) = %q (%d bytes)", got, len(got))
	}
	// A secret straddling the final cut is not left in part.
	got = evidence.RedactText(strings.Repeat("x", 90)+" sk-ant-api03-QQQQQQQQQQQQ", 100)
	if strings.Contains(got, "sk-ant") {
		t.Errorf("partial secret kept: %q", got)
	}
	rs := make([]string, 100)
	for i := range rs {
		rs[i] = strings.Repeat("r", 2000)
	}
	b := evidence.BoundReasons(rs)
	if len(b) != evidence.MaxReasons || !strings.Contains(b[len(b)-1], "69 more") || len(b[0]) > evidence.MaxReasonBytes {
		t.Errorf("BoundReasons: %d reasons, last %q", len(b), b[len(b)-1])
	}
	if evidence.BoundReasons(nil) == nil {
		t.Error("BoundReasons(nil) is nil")
	}
}

// BenchmarkReceiptArgs compares what the decision event costs per call:
// the old Redact+Marshal and BoundedArgs, for a typical Exec input.
func BenchmarkReceiptArgs(b *testing.B) {
	args := map[string]any{"argv": []any{"/usr/bin/git", "-C", "/srv/work/repo", "log", "--oneline", "-n", "20"},
		"cwd": "/srv/work/repo", "env": map[string]any{"GIT_PAGER": "cat"}, "timeout_s": 30.0}
	raw, _ := json.Marshal(args)
	b.Run("redact+marshal", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(evidence.Redact(args))
		}
	})
	b.Run("bounded", func(b *testing.B) {
		for b.Loop() {
			_ = evidence.BoundedArgs(args, raw, evidence.MaxArgsBytes)
		}
	})
	b.Run("reasons", func(b *testing.B) {
		r := []string{"grant:role/agent/Exec allows git log", "exec.shape.git.log"}
		for b.Loop() {
			_ = evidence.BoundReasons(r)
		}
	})
}

// BenchmarkBoundedArgsHuge is what bounding a 5 MB refused input costs,
// beside a full redaction of it (BenchmarkRedactHuge): the bound must not
// pay for redacting what it does not keep.
func BenchmarkBoundedArgsHuge(b *testing.B) {
	args, raw := hugeArgs()
	b.ResetTimer()
	for b.Loop() {
		evidence.BoundedArgs(args, raw, evidence.MaxRefusedArgsBytes)
	}
}

func BenchmarkRedactHuge(b *testing.B) {
	args, _ := hugeArgs()
	b.ResetTimer()
	for b.Loop() {
		_, _ = json.Marshal(evidence.Redact(args))
	}
}

func hugeArgs() (map[string]any, []byte) {
	l := make([]any, 500_000)
	for i := range l {
		l[i] = fmt.Sprintf("a%07d", i)
	}
	args := map[string]any{"argv": l}
	raw, _ := json.Marshal(args)
	return args, raw
}
