package fstool

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/wire"
)

// TestConfinement tries every way out of a grant the fixture offers, with
// every tool, and checks the code and that nothing outside changed or leaked.
func TestConfinement(t *testing.T) {
	t.Parallel()
	type tc struct {
		name  string
		tool  string
		input map[string]any
		code  string
		stage string
	}
	var cases []tc
	escapes := []struct {
		name, path, code, stage string
	}{
		{"dotdot abs", "/WORK/../outside/secret.txt", "sandbox_violation", "prepare"},
		{"dotdot alias", "@w/../outside/secret.txt", "sandbox_violation", "prepare"},
		{"dotdot trailing", "@w/sub/..", "sandbox_violation", "prepare"},
		{"unknown alias", "@nope/a.txt", "sandbox_violation", "enforce"},
		{"alias prefix is not an alias", "@wx/a.txt", "sandbox_violation", "enforce"},
		{"outside absolute", "/OUTSIDE/secret.txt", "fs_denied", "enforce"},
		{"root", "/", "fs_denied", "enforce"},
		{"etc", "/etc/passwd", "fs_denied", "enforce"},
		{"sibling prefix", "/WORK2/x", "fs_denied", "enforce"},
		{"NUL", "@w/a.txt\x00.png", "invalid_input", "prepare"},
		{"relative", "a.txt", "invalid_input", "prepare"},
		{"empty", "", "invalid_input", "prepare"},
		{"symlink file escape alias", "@w/leak.txt", "sandbox_violation", "enforce"},
		{"symlink file escape abs", "/WORK/leak.txt", "sandbox_violation", "enforce"},
		{"symlink dir escape", "@w/escape/secret.txt", "sandbox_violation", "enforce"},
		{"abs symlink dir escape", "/WORK/absescape/secret.txt", "sandbox_violation", "enforce"},
		{"dangling symlink", "@w/dangling", "sandbox_violation", "enforce"},
		{"through dangling", "@w/dangling/x", "sandbox_violation", "enforce"},
	}
	for _, e := range escapes {
		cases = append(cases,
			tc{"read " + e.name, NameRead, map[string]any{"path": e.path}, e.code, e.stage},
			tc{"list " + e.name, NameList, map[string]any{"path": e.path}, e.code, e.stage},
			tc{"search " + e.name, NameSearch, map[string]any{"path": e.path, "pattern": "SECRET"}, e.code, e.stage},
			tc{"write " + e.name, NameWrite, map[string]any{"path": e.path, "content": "pwned\n"}, e.code, e.stage},
		)
	}
	cases = append(cases,
		tc{"write read-only grant", NameWrite, map[string]any{"path": "@ro/r.txt", "content": "x"}, "fs_denied", "enforce"},
		tc{"write new file in read-only grant", NameWrite, map[string]any{"path": "@ro/new.txt", "content": "x"}, "fs_denied", "enforce"},
		tc{"write read-only abs", NameWrite, map[string]any{"path": "/RO/r.txt", "content": "x"}, "fs_denied", "enforce"},
		tc{"write grant dir itself", NameWrite, map[string]any{"path": "@w", "content": "x"}, "invalid_input", "run"},
		tc{"write over a dir", NameWrite, map[string]any{"path": "@w/sub", "content": "x"}, "invalid_input", "run"},
		tc{"read missing", NameRead, map[string]any{"path": "@w/missing.txt"}, "not_found", "run"},
		tc{"read missing dir", NameRead, map[string]any{"path": "@w/nodir/missing.txt"}, "not_found", "run"},
		tc{"read through file", NameRead, map[string]any{"path": "@w/a.txt/x"}, "not_found", "run"},
		tc{"list missing", NameList, map[string]any{"path": "@w/nodir"}, "not_found", "run"},
		tc{"read a dir", NameRead, map[string]any{"path": "@w/sub"}, "invalid_input", "run"},
		tc{"list a file", NameList, map[string]any{"path": "@w/a.txt"}, "invalid_input", "run"},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			in := map[string]any{}
			for k, v := range c.input {
				if s, ok := v.(string); ok {
					s = strings.Replace(s, "/WORK", f.work, 1)
					s = strings.Replace(s, "/RO", f.ro, 1)
					s = strings.Replace(s, "/OUTSIDE", f.outside, 1)
					v = s
				}
				in[k] = v
			}
			o := f.do(t, c.tool, in)
			if o.code != c.code || o.stage != c.stage {
				msg := ""
				if o.err != nil {
					msg = o.err.Message
				}
				t.Fatalf("%s %v: got %q at %s (%s), want %q at %s\n%s", c.tool, in, o.code, o.stage, msg, c.code, c.stage, o.data)
			}
			if o.err.Details["field"] == nil && c.code != "not_found" {
				t.Errorf("error details lack field: %v", o.err.Details)
			}
			if strings.Contains(o.err.Message, "TOP SECRET") {
				t.Errorf("error message leaks outside content: %s", o.err.Message)
			}
			f.outsideUnchanged(t)
			noTemps(t, f.root)
			if got := readT(t, filepath.Join(f.ro, "r.txt")); got != "read only\n" {
				t.Errorf("read-only file changed: %q", got)
			}
		})
	}
}

// TestSymlinksInsideRefused: below a grant's directory no symlink is
// followed, even one pointing inside the grant, whichever form the path
// has; a symlink above the grants (the operator's) is resolved before the
// policy and the file is opened by its real path.
func TestSymlinksInsideRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	must(t, os.Symlink(filepath.Join(f.work, "sub", "b.txt"), filepath.Join(f.work, "absinside")))
	for _, c := range []struct{ tool, input string }{
		{NameRead, `{"path":"@w/inner/b.txt"}`},
		{NameRead, `{"path":"` + filepath.Join(f.work, "absinside") + `"}`},
		{NameRead, `{"path":"` + filepath.Join(f.work, "inner", "b.txt") + `"}`},
		{NameList, `{"path":"@w/inner"}`},
		{NameSearch, `{"path":"@w/inner","pattern":"bee"}`},
		{NameWrite, `{"path":"@w/inner/c.txt","content":"c"}`},
		{NameWrite, `{"path":"@w/absinside","content":"c"}`},
		{NamePatch, `{"patch":"--- a/@w/inner/b.txt\n+++ b/@w/inner/b.txt\n@@ -1 +1 @@\n-bee\n+wasp\n"}`},
	} {
		o := f.do(t, c.tool, c.input)
		if o.code != string(wire.CodeSandboxViolation) || o.stage != "enforce" {
			t.Errorf("%s %s: %q at %s, want sandbox_violation at enforce", c.tool, c.input, o.code, o.stage)
		}
	}
	if _, err := os.Stat(filepath.Join(f.work, "sub", "c.txt")); err == nil {
		t.Error("a write through an inside link landed")
	}
	if got := readT(t, filepath.Join(f.work, "sub", "b.txt")); got != "bee\n" {
		t.Errorf("sub/b.txt = %q", got)
	}
	// A path outside every grant that resolves into one is the file inside,
	// shown by its real path.
	must(t, os.Symlink(f.work, filepath.Join(f.root, "worklink")))
	var rd ReadData
	f.do(t, NameRead, map[string]any{"path": filepath.Join(f.root, "worklink", "a.txt")}).decode(t, &rd)
	if rd.Bytes != 17 || rd.Path != filepath.Join(f.work, "a.txt") {
		t.Errorf("read via outside link into grant: %+v", rd)
	}
	// ... but not when the link lives inside another grant.
	d := f.decision
	d.FSGrants = append(d.FSGrants, wire.FSGrant{Path: f.root, Mode: wire.ModeRead})
	if o := f.doWith(t, NameRead, map[string]any{"path": filepath.Join(f.root, "worklink", "a.txt")}, d); o.code != string(wire.CodeSandboxViolation) {
		t.Errorf("read via a link inside a grant: %q, want sandbox_violation", o.code)
	}
}

// TestNestedGrantMode: the most specific grant decides the mode.
func TestNestedGrantMode(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	d := f.decision
	d.FSGrants = append(d.FSGrants, wire.FSGrant{Path: filepath.Join(f.work, "sub"), Mode: wire.ModeRead})
	if o := f.doWith(t, NameWrite, map[string]any{"path": "@w/sub/b.txt", "content": "x"}, d); o.code != "fs_denied" {
		t.Errorf("write under nested read-only grant: %q, want fs_denied", o.code)
	}
	if o := f.doWith(t, NameWrite, map[string]any{"path": "@w/a.txt", "content": "x"}, d); o.code != "" {
		t.Errorf("write beside nested grant: %q", o.code)
	}
}

// TestMalformedGrants grant nothing.
func TestMalformedGrants(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for i, g := range []wire.FSGrant{
		{Path: "work", Mode: "rw", Alias: "@w"},
		{Path: f.work, Mode: "rwx", Alias: "@w"},
		{Path: filepath.Join(f.work, "a.txt"), Mode: "rw", Alias: "@w"},
		{Path: filepath.Join(f.root, "missing"), Mode: "rw", Alias: "@w"},
	} {
		d := wire.Decision{Allow: true, FSGrants: []wire.FSGrant{g}}
		o := f.doWith(t, NameRead, map[string]any{"path": "@w/a.txt"}, d)
		if o.code != "sandbox_violation" {
			t.Errorf("grant %d %+v: alias read gave %q, want sandbox_violation (unknown mount)", i, g, o.code)
		}
		o = f.doWith(t, NameRead, map[string]any{"path": filepath.Join(f.work, "a.txt")}, d)
		if o.code != "fs_denied" {
			t.Errorf("grant %d %+v: absolute read gave %q, want fs_denied", i, g, o.code)
		}
	}
}

// TestGrantSwappedAfterEnforce: the grant directory replaced by a symlink
// to the outside between Enforce and Run changes nothing: Run works on the
// directory Enforce opened and checked.
func TestGrantSwappedAfterEnforce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tl := f.tools[NameWrite]
	c, err := tl.Prepare(t.Context(), []byte(`{"path":"@w/new.txt","content":"x"}`))
	must(t, err)
	scope, err := c.Enforce(t.Context(), f.decision)
	must(t, err)
	must(t, os.Rename(f.work, f.work+".old"))
	must(t, os.Symlink(f.outside, f.work))
	res := c.Run(t.Context(), scope)
	if res.Output.Error != nil {
		t.Fatalf("run after grant swap: %+v", res.Output.Error)
	}
	f.outsideUnchanged(t)
	if got := readT(t, filepath.Join(f.work+".old", "new.txt")); got != "x" {
		t.Errorf("the write did not land in the directory checked: %q", got)
	}
}

// TestSymlinkSwappedAfterEnforce: a component turned into a symlink to the
// outside between Enforce and Run changes nothing for any tool: the
// descriptors Enforce kept are what Run reads, lists, searches and writes.
func TestSymlinkSwappedAfterEnforce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ tool, input, want string }{
		{NameRead, `{"path":"@w/sub/b.txt"}`, `"content":"bee\n"`},
		{NameList, `{"path":"@w/sub"}`, `"name":"b.txt"`},
		{NameWrite, `{"path":"@w/sub/b.txt","content":"pwned"}`, `"bytesWritten":5`},
		{NameWrite, `{"path":"@w/sub/new.txt","content":"pwned"}`, `"created":true`},
		{NameSearch, `{"path":"@w/sub","pattern":"e"}`, `"text":"bee"`},
		{NamePatch, `{"patch":"--- a/@w/sub/b.txt\n+++ b/@w/sub/b.txt\n@@ -1 +1 @@\n-bee\n+pwned\n"}`, `"bytesWritten":6`},
	} {
		t.Run(tc.tool+tc.input, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			writeT(t, filepath.Join(f.outside, "b.txt"), "wasp\n") // same name outside, to be read or clobbered
			c, err := f.tools[tc.tool].Prepare(t.Context(), []byte(tc.input))
			must(t, err)
			scope, err := c.Enforce(t.Context(), f.decision)
			must(t, err)
			must(t, os.Rename(filepath.Join(f.work, "sub"), filepath.Join(f.work, "sub.old")))
			must(t, os.Symlink("../outside", filepath.Join(f.work, "sub")))
			res := c.Run(t.Context(), scope)
			if res.Output.Error != nil {
				t.Fatalf("got %+v, want success on the directory checked", res.Output.Error)
			}
			b, _ := json.Marshal(res.Output.Data)
			if !strings.Contains(string(b), tc.want) || strings.Contains(string(b), "wasp") || strings.Contains(string(b), "TOP SECRET") {
				t.Errorf("data %s: want %s and nothing from outside", b, tc.want)
			}
			if got := readT(t, filepath.Join(f.outside, "b.txt")); got != "wasp\n" {
				t.Errorf("outside file changed: %q", got)
			}
			ents, _ := os.ReadDir(f.outside)
			if len(ents) != 2 {
				t.Errorf("outside has %d entries, want 2", len(ents))
			}
			noTemps(t, f.root)
		})
	}
}

// TestWithin compares whole segments.
func TestWithin(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p, dir string
		want   bool
	}{
		{"/srv/work", "/srv/work", true},
		{"/srv/work/a", "/srv/work", true},
		{"/srv/workx", "/srv/work", false},
		{"/srv/wor", "/srv/work", false},
		{"/srv", "/srv/work", false},
		{"/anything", "/", true},
		{"/", "/", true},
		{"/srv/work/", "/srv/work", true},
	} {
		if got := within(c.p, c.dir); got != c.want {
			t.Errorf("within(%q, %q) = %v, want %v", c.p, c.dir, got, c.want)
		}
	}
}

// TestGrantCacheStale: a grant's directory replaced by another within the
// resolution cache's lifetime is resolved afresh: the call works on the
// directory now at the grant's path, never on the old one by a stale
// identity, and a grant swapped for a symlink is refused.
func TestGrantCacheStale(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	frozen := time.Now()
	f.tools[NameRead].(*tool).s.cache.now = func() time.Time { return frozen } // the cache never expires here
	var rd ReadData
	f.do(t, NameRead, map[string]any{"path": "@w/a.txt"}).decode(t, &rd) // cached now
	must(t, os.Rename(f.work, f.work+".old"))
	must(t, os.Mkdir(f.work, 0o755))
	writeT(t, filepath.Join(f.work, "a.txt"), "new\n")
	f.do(t, NameRead, map[string]any{"path": "@w/a.txt"}).decode(t, &rd)
	if *rd.Content != "new\n" {
		t.Errorf("read after the grant directory was replaced: %q", *rd.Content)
	}
	must(t, os.Rename(f.work, f.work+".new"))
	must(t, os.Symlink(f.outside, f.work))
	if o := f.do(t, NameRead, map[string]any{"path": "@w/secret.txt"}); o.code != string(wire.CodeSandboxViolation) {
		t.Errorf("read after the grant was swapped for a symlink within the cache's lifetime: %q, want sandbox_violation", o.code)
	}
}
