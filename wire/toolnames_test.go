package wire

import (
	"regexp"
	"strings"
	"testing"
)

var modelSafeRE = regexp.MustCompile(ModelSafeNamePattern)

func TestModelSafeName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 70)
	for _, tc := range []struct {
		tool, want string
		reversible bool // ToolFromModelSafe recovers it without a map
	}{
		{"Exec", "Exec", true},
		{"read_tool_result", "read_tool_result", true},
		{"fs.read", "fs_read", true},
		{"fs.apply_patch", "fs_apply_patch", true},
		{"fs.list", "fs_list", true},
		{"http.get", "http_get", true},
		{"code.run", "code_run", true},
		{"files.read_text_file", "files__read_text_file", true},
		{"my-files.get-thing", "my-files__get-thing", true},
		{"a_b.c", "a_b__c", true},
		{"a.b_c", "a__b_c", true},
		{"a._b", "a___b", true},
		// The collisions a naive "." -> "_" would make all land apart.
		{"fs_read", "", false},
		{"a__b.c", "", false},
		{"a_.b", "", false},
		{"fs.a__b", "", false},
		{"github.get.issue", "", false},
		{"files." + long, "", false},
		{"files.héllo", "", false},
		{"_private", "", false},
		{"x__y", "", false},
		{"", "", false},
	} {
		got := ModelSafeName(tc.tool)
		if !modelSafeRE.MatchString(got) {
			t.Errorf("ModelSafeName(%q) = %q: not %s", tc.tool, got, ModelSafeNamePattern)
		}
		if tc.want != "" && got != tc.want {
			t.Errorf("ModelSafeName(%q) = %q, want %q", tc.tool, got, tc.want)
		}
		back, ok := ToolFromModelSafe(got)
		if ok != tc.reversible || (ok && back != tc.tool) {
			t.Errorf("ToolFromModelSafe(%q) = %q, %v; want %q, %v", got, back, ok, tc.tool, tc.reversible)
		}
		if !tc.reversible && got[0] != '_' {
			t.Errorf("ModelSafeName(%q) = %q: a name no rule keeps must be hashed (leading _)", tc.tool, got)
		}
	}
}

// TestModelSafeNameDistinct holds the names that tempt a naive scheme to
// collide against each other.
func TestModelSafeNameDistinct(t *testing.T) {
	t.Parallel()
	tools := []string{"fs.read", "fs_read", "fs__read", "_fs_read", "fs.read_", "fs_.read", "fs-read", "fs.read.x", "fs.read_x",
		"a_b.c", "a.b_c", "a__b.c", "a.b__c", "a_.b", "a._b", "a.-b", "a-.b", "a.b", "a_b", "a__b", "A.b",
		"read.tool_result", "read_tool_result", "read__tool_result", "Exec", "exec.Exec", "exec_Exec", "code.run", "code_run",
		strings.Repeat("a", 64), strings.Repeat("a", 65), strings.Repeat("a", 66), "u." + strings.Repeat("b", 61), "u." + strings.Repeat("b", 62)}
	seen := map[string]string{}
	for _, tool := range tools {
		n := ModelSafeName(tool)
		if other, dup := seen[n]; dup {
			t.Errorf("%q and %q both map to %q", other, tool, n)
		}
		seen[n] = tool
		if len(n) > MaxModelSafeNameLen {
			t.Errorf("ModelSafeName(%q) is %d bytes", tool, len(n))
		}
	}
}

// FuzzModelSafeName checks the scheme's promises on any pair of names:
// every output is model-safe, a reversible output reverses to its input,
// ToolFromModelSafe accepts only true images, and two names meet only when
// they are equal (short of a SHA-256 collision).
func FuzzModelSafeName(f *testing.F) {
	for _, s := range []string{"fs.read", "fs_read", "a_b.c", "a.b_c", "Exec", "files.x", "_x", "a__b", "github.get.issue", "é.x"} {
		f.Add(s, s+"_")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		na, nb := ModelSafeName(a), ModelSafeName(b)
		if !modelSafeRE.MatchString(na) {
			t.Fatalf("ModelSafeName(%q) = %q: not model-safe", a, na)
		}
		if a != b && na == nb {
			t.Fatalf("%q and %q both map to %q", a, b, na)
		}
		if back, ok := ToolFromModelSafe(na); ok && back != a {
			t.Fatalf("ToolFromModelSafe(ModelSafeName(%q)) = %q", a, back)
		}
		if back, ok := ToolFromModelSafe(b); ok && ModelSafeName(back) != b {
			t.Fatalf("ToolFromModelSafe(%q) = %q, whose model-safe name is %q", b, back, ModelSafeName(back))
		}
	})
}
