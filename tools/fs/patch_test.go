package fstool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestApplyPatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a, b := filepath.Join(f.work, "a.txt"), filepath.Join(f.work, "sub", "b.txt")
	multi := "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma\n" +
		"--- a/sub/b.txt\n+++ b/sub/b.txt\n@@ -1 +1,2 @@\n bee\n+hive\n" +
		"--- /dev/null\n+++ b/sub/new.txt\n@@ -0,0 +1 @@\n+fresh\n"
	var pd PatchData
	f.do(t, NamePatch, map[string]any{"path": "@w", "patch": multi,
		"ifMatchSha256": map[string]any{"a.txt": sum("alpha\nbeta\ngamma\n"), "sub/new.txt": ""}}).decode(t, &pd)
	want := PatchData{Files: []PatchFileResult{
		{Path: "@w/a.txt", BytesWritten: 17, SHA256Before: sum("alpha\nbeta\ngamma\n"), SHA256After: sum("alpha\nBETA\ngamma\n")},
		{Path: "@w/sub/b.txt", BytesWritten: 9, SHA256Before: sum("bee\n"), SHA256After: sum("bee\nhive\n")},
		{Path: "@w/sub/new.txt", BytesWritten: 6, SHA256After: sum("fresh\n"), Created: true},
	}}
	if diff := cmp.Diff(want, pd); diff != "" {
		t.Errorf("patch (-want +got):\n%s", diff)
	}
	if readT(t, a) != "alpha\nBETA\ngamma\n" || readT(t, b) != "bee\nhive\n" {
		t.Errorf("files after patch: %q %q", readT(t, a), readT(t, b))
	}
	noTemps(t, f.root)

	// Delete with a single-file string precondition, absolute names.
	del := "--- " + b + "\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-bee\n-hive\n"
	f.do(t, NamePatch, map[string]any{"patch": del, "ifMatchSha256": sum("bee\nhive\n")}).decode(t, &pd)
	if _, err := os.Stat(b); !os.IsNotExist(err) || !pd.Files[0].Deleted {
		t.Errorf("delete: %v %+v", err, pd)
	}
	noTemps(t, f.root)
}

// TestApplyPatchAllOrNothing: when any file fails, no file changes.
func TestApplyPatchAllOrNothing(t *testing.T) {
	t.Parallel()
	good := "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-alpha\n+ALPHA\n"
	for _, c := range []struct {
		name, patch string
		ifMatch     any
		code        string
	}{
		{"second hunk mismatch", good + "--- a/sub/b.txt\n+++ b/sub/b.txt\n@@ -1 +1 @@\n-wasp\n+hornet\n", nil, "precondition_failed"},
		{"second missing", good + "--- a/sub/none.txt\n+++ b/sub/none.txt\n@@ -1 +1 @@\n-x\n+y\n", nil, "not_found"},
		{"create existing", good + "--- /dev/null\n+++ b/sub/b.txt\n@@ -0,0 +1 @@\n+x\n", nil, "precondition_failed"},
		{"hash mismatch on second", good + "--- a/sub/b.txt\n+++ b/sub/b.txt\n@@ -1 +1 @@\n-bee\n+B\n", map[string]any{"sub/b.txt": sum("nope")}, "precondition_failed"},
		{"second outside via symlink", good + "--- a/leak.txt\n+++ b/leak.txt\n@@ -1 +1 @@\n-TOP SECRET outside the grant\n+pwned\n", nil, "sandbox_violation"},
		{"second read-only", good + "--- a/@ro/r.txt\n+++ b/@ro/r.txt\n@@ -1 +1 @@\n-read only\n+x\n", nil, "invalid_input"},
		{"second traversal", good + "--- a/../outside/secret.txt\n+++ b/../outside/secret.txt\n@@ -1 +1 @@\n-x\n+y\n", nil, "sandbox_violation"},
		{"string ifMatch for two files", good + "--- a/sub/b.txt\n+++ b/sub/b.txt\n@@ -1 +1 @@\n-bee\n+B\n", sum("x"), "invalid_input"},
		{"ifMatch names unknown file", good, map[string]any{"zzz": sum("x")}, "invalid_input"},
		{"rename", "--- a/a.txt\n+++ b/z.txt\n@@ -1 +1 @@\n-alpha\n+x\n", nil, "invalid_input"},
		{"not a diff", "hello", nil, "invalid_input"},
		{"too big", "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-alpha\n+" + strings.Repeat("x", DefaultWriteBytes) + "\n", nil, "write_limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			in := map[string]any{"path": "@w", "patch": c.patch}
			if c.ifMatch != nil {
				in["ifMatchSha256"] = c.ifMatch
			}
			o := f.do(t, NamePatch, in)
			if o.code != c.code {
				t.Fatalf("got %q (%v), want %q", o.code, o.err, c.code)
			}
			if got := readT(t, filepath.Join(f.work, "a.txt")); got != "alpha\nbeta\ngamma\n" {
				t.Errorf("a.txt changed although the patch failed: %q", got)
			}
			if got := readT(t, filepath.Join(f.work, "sub", "b.txt")); got != "bee\n" {
				t.Errorf("sub/b.txt changed: %q", got)
			}
			f.outsideUnchanged(t)
			noTemps(t, f.root)
		})
	}
}

// TestCommitRollback: a rename failing part way through a multi-file
// commit puts back the files already replaced.
func TestCommitRollback(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// A competing creator makes the second (new) file appear after
	// staging, so its link fails once the first file was already replaced.
	patch := "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-alpha\n+ALPHA\n" +
		"--- /dev/null\n+++ b/sub/new.txt\n@@ -0,0 +1 @@\n+n\n"
	c, err := f.tools[NamePatch].Prepare(t.Context(), []byte(`{"path":"@w","patch":`+quote(patch)+`}`))
	must(t, err)
	_, err = c.Enforce(t.Context(), f.decision)
	must(t, err)
	cl := c.(*call)
	var stages []*stage
	defer cl.Release()
	for i := range cl.targets {
		s, err := openStage(&cl.targets[i], cl.open, i == 1, true, 1<<20)
		must(t, err)
		defer s.close()
		stages = append(stages, s)
	}
	stages[0].content = []byte("ALPHA\nbeta\ngamma\n")
	stages[1].content = []byte("n\n")
	writeT(t, filepath.Join(f.work, "sub", "new.txt"), "theirs\n")
	err = commit(stages)
	if err == nil || !strings.Contains(err.Error(), "created by someone else") {
		t.Fatalf("commit: %v", err)
	}
	for _, s := range stages {
		s.close()
	}
	if got := readT(t, filepath.Join(f.work, "a.txt")); got != "alpha\nbeta\ngamma\n" {
		t.Errorf("a.txt not rolled back: %q", got)
	}
	if got := readT(t, filepath.Join(f.work, "sub", "new.txt")); got != "theirs\n" {
		t.Errorf("competitor's file clobbered: %q", got)
	}
	noTemps(t, f.root)
}

func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

func TestUpdateFrontmatter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, doc string
		set       string
		want, err string
	}{
		{"merge keeps order and comments", "---\ntitle: Old # keep\ntags: [a]\n---\n# Body\n", `{"title":"New","draft":true,"n":3}`,
			"---\ntitle: New\ntags: [a]\ndraft: true\nn: 3\n---\n# Body\n", ""},
		{"remove key", "---\na: 1\nb: 2\n---\nx\n", `{"a":null}`, "---\nb: 2\n---\nx\n", ""},
		{"create", "# Title\n", `{"title":"T"}`, "---\ntitle: T\n---\n# Title\n", ""},
		{"dots end", "---\na: 1\n...\nbody\n", `{"a":2}`, "---\na: 2\n---\nbody\n", ""},
		{"nested value", "---\na: 1\n---\n", `{"meta":{"k":[1,2]}}`, "---\na: 1\nmeta:\n  k:\n    - 1\n    - 2\n---\n", ""},
		{"unclosed", "---\na: 1\nbody\n", `{"a":2}`, "", "no closing"},
		{"not a mapping", "---\n- a\n---\n", `{"a":2}`, "", "not a YAML mapping"},
		{"duplicate key", "---\nk: \"\"\nk: 0\n---\nbody\n", `{"k":"x"}`, "", "more than once"},
		{"bad yaml", "---\na: [\n---\n", `{"a":2}`, "", "not valid YAML"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			p := filepath.Join(f.work, "doc.md")
			writeT(t, p, c.doc)
			o := f.do(t, NamePatch, `{"path":"@w/doc.md","updateFrontmatter":`+c.set+`}`)
			if c.err != "" {
				if o.code != "precondition_failed" || !strings.Contains(o.err.Message, c.err) || readT(t, p) != c.doc {
					t.Fatalf("got %q %v, want precondition_failed %q and no change", o.code, o.err, c.err)
				}
				return
			}
			var pd PatchData
			o.decode(t, &pd)
			if got := readT(t, p); got != c.want {
				t.Errorf("front matter:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}
