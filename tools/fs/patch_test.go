package fstool

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
		{"unclosed", "---\na: 1\nbody\n", `{"a":2}`, "", "invalid_frontmatter:1:no closing"},
		{"not a mapping", "---\n- a\n---\n", `{"a":2}`, "", "invalid_frontmatter:2:not a YAML mapping"},
		{"duplicate key", "---\nk: \"\"\nk: 0\n---\nbody\n", `{"k":"x"}`, "", "invalid_frontmatter:3:more than once"},
		{"bad yaml", "---\na: 1\nb: [\n---\n", `{"a":2}`, "", "invalid_frontmatter:3:not valid YAML"},
		{"bad yaml indentation", "---\na: 1\n  b: 2\n---\n", `{"a":2}`, "", "invalid_frontmatter:3:not valid YAML"},
		// Seed 001's operations.
		{"append unique strings", "---\nstepsCompleted: [a]\n---\nb\n", `{"stepsCompleted.append":["a","b","b"],"artifacts.append":["x.md"]}`,
			"---\nstepsCompleted: [a, b]\nartifacts:\n  - x.md\n---\nb\n", ""},
		{"append objects", "---\ndecisionLog:\n  - {at: 1}\n---\n", `{"decisionLog.append":[{"at":1},{"why":"y"}]}`,
			"---\ndecisionLog:\n  - {at: 1}\n  - at: 1\n  - why: \"y\"\n---\n", ""},
		{"append to empty key", "---\nsteps:\n---\n", `{"steps.append":["s"]}`, "---\nsteps:\n  - s\n---\n", ""},
		{"set merges a mapping", "---\nvariables:\n  a: 1\n  b: 2\n---\n", `{"variables.set":{"b":3,"c":"x","a":null}}`,
			"---\nvariables:\n  b: 3\n  c: x\n---\n", ""},
		{"merge creates a mapping", "---\nt: 1\n---\n", `{"variables.merge":{"k":"v"}}`, "---\nt: 1\nvariables:\n  k: v\n---\n", ""},
		{"set a scalar", "---\ncurrentNodeId: n1\n---\n", `{"currentNodeId.set":"n2","updatedAt.set":"2026-11-25T00:00:00Z"}`,
			"---\ncurrentNodeId: n2\nupdatedAt: \"2026-11-25T00:00:00Z\"\n---\n", ""},
		{"append to a scalar", "---\nsteps: done\n---\n", `{"steps.append":["s"]}`, "", "precondition_failed:0:is not a list"},
		{"merge into a list", "---\nvariables: [1]\n---\n", `{"variables.merge":{"k":1}}`, "", "precondition_failed:0:is not a mapping"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			p := filepath.Join(f.work, "doc.md")
			writeT(t, p, c.doc)
			o := f.do(t, NamePatch, `{"path":"@w/doc.md","updateFrontmatter":`+c.set+`}`)
			if c.err != "" {
				parts := strings.SplitN(c.err, ":", 3)
				code, line, msg := parts[0], parts[1], parts[2]
				if string(o.code) != code || !strings.Contains(o.err.Message, msg) || readT(t, p) != c.doc {
					t.Fatalf("got %q %v, want %s %q and no change", o.code, o.err, code, msg)
				}
				if line != "0" && fmt.Sprint(o.err.Details["line"]) != line {
					t.Errorf("details.line = %v, want %s (%s)", o.err.Details["line"], line, o.err.Message)
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

// TestFrontmatterSeedShape: seed 001's request shape, patch {operation:
// "updateFrontmatter", update, ifMatchSha256}, with its answer's top-level
// path, sha256Before and sha256After, and its refusals.
func TestFrontmatterSeedShape(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	p := filepath.Join(f.work, "workflow.md")
	doc := "---\nstepsCompleted: []\nvariables: {}\n---\n# Workflow\n"
	writeT(t, p, doc)
	before := sha256.Sum256([]byte(doc))
	o := f.do(t, NamePatch, `{"path":"@w/workflow.md","patch":{"operation":"updateFrontmatter","ifMatchSha256":"`+hex.EncodeToString(before[:])+`",`+
		`"update":{"stepsCompleted.append":["plan"],"variables.set":{"goal":"ship"},"currentNodeId.set":"build"}}}`)
	if o.err != nil {
		t.Fatalf("seed shape refused: %v", o.err)
	}
	var pd PatchData
	o.decode(t, &pd)
	got := readT(t, p)
	want := "---\nstepsCompleted: [plan]\nvariables: {goal: ship}\ncurrentNodeId: build\n---\n# Workflow\n"
	if got != want {
		t.Errorf("file:\n%s\nwant:\n%s", got, want)
	}
	after := sha256.Sum256([]byte(got))
	if pd.Path != "@w/workflow.md" || pd.SHA256Before != hex.EncodeToString(before[:]) || pd.SHA256After != hex.EncodeToString(after[:]) {
		t.Errorf("answer %+v; want path, sha256Before and sha256After of the file", pd)
	}
	// The same precondition again no longer holds.
	o = f.do(t, NamePatch, `{"path":"@w/workflow.md","patch":{"operation":"updateFrontmatter","ifMatchSha256":"`+hex.EncodeToString(before[:])+`","update":{"a":1}}}`)
	if o.code != "precondition_failed" {
		t.Errorf("stale ifMatchSha256: %q %v, want precondition_failed", o.code, o.err)
	}
	for _, c := range []struct{ in, field string }{
		{`{"operation":"rewrite","update":{"a":1}}`, "patch.operation"},
		{`{"operation":"updateFrontmatter"}`, "patch.update"},
		{`{"operation":"updateFrontmatter","update":{"a":1},"extra":1}`, "patch.extra"},
		{`{"operation":"updateFrontmatter","update":{"steps.append":"x"}}`, "updateFrontmatter.steps.append"},
		{`{"operation":"updateFrontmatter","update":{"v.merge":[1]}}`, "updateFrontmatter.v.merge"},
		{`{"operation":"updateFrontmatter","update":{"v.set":1,"v.append":[1]}}`, "updateFrontmatter.v.set"},
		{`{"operation":"updateFrontmatter","update":{}}`, "patch.update"},
	} {
		o := f.do(t, NamePatch, `{"path":"@w/workflow.md","patch":`+c.in+`}`)
		if o.code != "invalid_input" || o.err.Details["field"] != c.field {
			t.Errorf("%s: %q %v, want invalid_input on %s", c.in, o.code, o.err, c.field)
		}
	}
	if readT(t, p) != got {
		t.Error("a refused patch changed the file")
	}
}
