package fstool

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/portcullis/portcullis/wire"
)

// FuzzParsePath: parsePath never panics, and whatever it accepts has no ".."
// segment, no NUL, and is absolute or @alias with a relative rest.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/srv/x", "@p/a/b", "@p", "@p/", "@p//x", "@/x", "@@/x", "/a/../b", "..", "a/b", "/\x00", "@p/./x/.", "/a//b/", "@a@b/x", "@p/..x/y..", "/%2e%2e/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePath("path", s)
		if err != nil {
			var we *wire.Error
			if !errors.As(err, &we) || (we.Code != wire.CodeInvalidInput && we.Code != wire.CodeSandboxViolation) {
				t.Fatalf("parsePath(%q) error %v is not invalid_input/sandbox_violation", s, err)
			}
			return
		}
		for _, seg := range strings.Split(s, "/") {
			if seg == ".." {
				t.Fatalf("accepted %q with a .. segment", s)
			}
		}
		if strings.IndexByte(s, 0) >= 0 {
			t.Fatalf("accepted NUL in %q", s)
		}
		switch {
		case p.alias != "":
			if strings.HasPrefix(p.rel, "/") || p.rel == ".." || strings.HasPrefix(p.rel, "../") {
				t.Fatalf("%q: rel %q leaves the alias", s, p.rel)
			}
		case !strings.HasPrefix(p.abs, "/") || strings.Contains(p.abs, "/../"):
			t.Fatalf("%q: abs %q", s, p.abs)
		}
	})
}

// FuzzEnforceAlias: whatever alias path is given, Enforce maps it inside the
// grant or refuses it.
func FuzzEnforceAlias(f *testing.F) {
	for _, s := range []string{"@w/a.txt", "@w/escape/x", "@w/inner/b.txt", "@w/leak.txt", "@w", "@w/sub/../../x", "@w/absescape"} {
		f.Add(s)
	}
	fx := newFixture(f)
	grants := resolveGrants(fx.decision.FSGrants, newResolveCache())
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePath("path", s)
		if err != nil {
			return
		}
		if p.abs != "" {
			p.resolveAbs()
		}
		tg, err := enforcePath(p, grants, &denyList{}, false)
		if err != nil {
			return
		}
		if !within(tg.real, tg.grant.real) || tg.rel == ".." || strings.HasPrefix(tg.rel, "../") || filepath.IsAbs(tg.rel) {
			t.Fatalf("%q enforced to %q (rel %q) outside grant %q", s, tg.real, tg.rel, tg.grant.real)
		}
	})
}

// BenchmarkRead4K measures fs.read of a 4 KB file through Prepare, Enforce
// and Run, as the pipeline calls them (no HTTP, policy or evidence).
func BenchmarkRead4K(b *testing.B) {
	f := newFixture(b)
	writeT(b, filepath.Join(f.work, "4k.txt"), strings.Repeat("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n", 64))
	tl := f.tools[NameRead]
	in := json.RawMessage(`{"path":"@w/4k.txt"}`)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c, err := tl.Prepare(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		scope, err := c.Enforce(ctx, f.decision)
		if err != nil {
			b.Fatal(err)
		}
		if res := c.Run(ctx, scope); !res.Output.Success {
			b.Fatal(res.Output.Error)
		}
	}
}

// BenchmarkWrite4K measures an atomic fs.write of 4 KB (fsync included).
func BenchmarkWrite4K(b *testing.B) {
	f := newFixture(b)
	in, _ := json.Marshal(map[string]any{"path": "@w/4k.txt", "content": strings.Repeat("x", 4096)})
	tl := f.tools[NameWrite]
	ctx := context.Background()
	for b.Loop() {
		c, err := tl.Prepare(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		scope, err := c.Enforce(ctx, f.decision)
		if err != nil {
			b.Fatal(err)
		}
		if res := c.Run(ctx, scope); !res.Output.Success {
			b.Fatal(res.Output.Error)
		}
	}
	_ = os.Remove(filepath.Join(f.work, "4k.txt"))
}

// FuzzUpdateFrontmatter: the updateFrontmatter operation of fs.apply_patch
// never panics on any document; it either refuses with precondition_failed
// or writes a front matter that parses back as a mapping holding the value
// it was asked to set, and keeps a document without front matter byte for
// byte after it.
func FuzzUpdateFrontmatter(f *testing.F) {
	for _, s := range [][3]string{
		{"---\ntitle: a\n---\nbody\n", "title", "b"},
		{"no front matter\n", "k", "v"},
		{"---\r\na: 1\r\n...\r\nbody", "b", "2"},
		{"---\n- list\n---\n", "k", "v"},
		{"---\na: &x [*x]\n---\n", "a", "v"},
		{"---\nunterminated: true\n", "k", "v"},
		{"---\n---\n", "k", "multi\nline"},
		{"---\n# comment\nk: old # keep\n---\n", "k", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, doc, key, value string) {
		if key == "" || strings.ContainsAny(key, "\x00\n") || len(doc) > 1<<16 || !utf8.ValidString(key) || !utf8.ValidString(value) {
			return // refused earlier by decodeFrontmatterArg (JSON strings) / read limits
		}
		for _, op := range []string{".set", ".append", ".merge"} {
			if strings.HasSuffix(key, op) {
				return // an operation, not a key: TestUpdateFrontmatter covers them
			}
		}
		out, err := updateFrontmatter(doc, map[string]any{key: value})
		if err != nil {
			var we *wire.Error
			if !errors.As(err, &we) || (we.Code != wire.CodePreconditionFailed && we.Code != wire.CodeInvalidFrontmatter) {
				t.Fatalf("updateFrontmatter error %v is not precondition_failed or invalid_frontmatter", err)
			}
			return
		}
		rest, ok := cutLine(out, "---")
		if !ok {
			t.Fatalf("output does not start with a front matter: %q", out)
		}
		if _, had := cutLine(doc, "---"); !had && !strings.HasSuffix(out, "---\n"+doc) {
			t.Fatalf("the document body changed: %q -> %q", doc, out)
		}
		// The closing fence is a line that is exactly "---" (as the tool
		// reads it), not any "---" (a value may end in one: "0: 0---").
		end := -1
		if strings.HasPrefix(rest, "---\n") {
			end = 0
		} else if i := strings.Index(rest, "\n---\n"); i >= 0 {
			end = i + 1
		}
		if end < 0 {
			t.Fatalf("output has no closing fence: %q", out)
		}
		// Parsed as a node, as the tool does: other keys are kept as they
		// were, even when they never decoded (a recursive anchor).
		var node yaml.Node
		if err := yaml.Unmarshal([]byte(rest[:end]), &node); err != nil {
			t.Fatalf("written front matter does not parse: %v\n%q", err, out)
		}
		if node.Kind != yaml.DocumentNode || len(node.Content) != 1 || node.Content[0].Kind != yaml.MappingNode {
			t.Fatalf("written front matter is not a mapping: %q", out)
		}
		m, found := node.Content[0], false
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value != key {
				continue
			}
			var got string
			if err := m.Content[i+1].Decode(&got); err != nil || got != value {
				t.Fatalf("front matter %q = %q (%v), want %q\n%q", key, got, err, value, out)
			}
			found = true
		}
		if !found {
			t.Fatalf("front matter lacks %q\n%q", key, out)
		}
	})
}
