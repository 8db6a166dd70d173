package fstool

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/wire"
)

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestRead(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("0123456789\n", 20) // 220 bytes, 20 lines
	for _, c := range []struct {
		name   string
		file   string
		input  map[string]any
		limits wire.Limits
		want   ReadData
	}{
		{name: "whole", file: "alpha\nbeta\ngamma\n", input: map[string]any{},
			want: ReadData{Content: ptr("alpha\nbeta\ngamma\n"), Bytes: 17, StartLine: 1, EndLine: 3, TotalLines: 3}},
		{name: "lines", file: "alpha\nbeta\ngamma\n", input: map[string]any{"startLine": 2, "endLine": 2},
			want: ReadData{Content: ptr("beta\n"), Bytes: 17, StartLine: 2, EndLine: 2, TotalLines: 3}},
		{name: "past end", file: "alpha\n", input: map[string]any{"startLine": 5},
			want: ReadData{Content: ptr(""), Bytes: 6, StartLine: 5, EndLine: 0, TotalLines: 1, Hint: "startLine 5 is past the end of the file (1 lines)"}},
		{name: "no final newline", file: "a\nb", input: map[string]any{"startLine": 2},
			want: ReadData{Content: ptr("b"), Bytes: 3, StartLine: 2, EndLine: 2, TotalLines: 2}},
		{name: "empty", file: "", input: map[string]any{},
			want: ReadData{Content: ptr(""), Bytes: 0, StartLine: 1, TotalLines: 0}},
		{name: "truncated at line", file: long, input: map[string]any{}, limits: wire.Limits{MaxOutputBytes: 50},
			want: ReadData{Content: ptr(strings.Repeat("0123456789\n", 4)), Bytes: 220, StartLine: 1, EndLine: 4, TotalLines: 20,
				Truncated: true, NextStartLine: 5, Hint: "output reached the 50-byte read limit (limits.max_output_bytes); continue with startLine=5"}},
		{name: "continue", file: long, input: map[string]any{"startLine": 19}, limits: wire.Limits{MaxOutputBytes: 50},
			want: ReadData{Content: ptr(strings.Repeat("0123456789\n", 2)), Bytes: 220, StartLine: 19, EndLine: 20, TotalLines: 20}},
		{name: "long line cut on rune", file: "ééééé\nx\n", input: map[string]any{}, limits: wire.Limits{MaxOutputBytes: 5},
			want: ReadData{Content: ptr("éé"), Bytes: 13, StartLine: 1, EndLine: 1, TotalLines: 2, Truncated: true, NextStartLine: 2,
				Hint: "line 1 is longer than the 5-byte read limit and was cut; continue with startLine=2"}},
		{name: "binary NUL", file: "abc\x00def\n", input: map[string]any{},
			want: ReadData{Binary: true, Bytes: 8, StartLine: 1, TotalLines: 1, Hint: "the file looks binary (NUL bytes or invalid UTF-8 in its first 8 KiB); its content is not returned"}},
		{name: "binary latin1", file: "caf\xe9\n", input: map[string]any{},
			want: ReadData{Binary: true, Bytes: 5, StartLine: 1, TotalLines: 1, Hint: "the file looks binary (NUL bytes or invalid UTF-8 in its first 8 KiB); its content is not returned"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			writeT(t, filepath.Join(f.work, "f.txt"), c.file)
			in := map[string]any{"path": "@w/f.txt"}
			for k, v := range c.input {
				in[k] = v
			}
			d := f.decision
			d.Limits = c.limits
			var got ReadData
			f.doWith(t, NameRead, in, d).decode(t, &got)
			c.want.Path, c.want.SHA256 = "@w/f.txt", sum(c.file)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("read (-want +got):\n%s", diff)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestReadLargeFile(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	big := strings.Repeat("x", 100<<10) + "\n" + strings.Repeat("y\n", 1000)
	writeT(t, filepath.Join(f.work, "big.txt"), big)
	var got ReadData
	f.do(t, NameRead, map[string]any{"path": "@w/big.txt"}).decode(t, &got)
	if !got.Truncated || len(*got.Content) != DefaultReadBytes || got.SHA256 != sum(big) || got.Bytes != int64(len(big)) || got.NextStartLine != 2 {
		t.Errorf("default 50 KiB truncation: truncated=%v len=%d sha ok=%v next=%d", got.Truncated, len(*got.Content), got.SHA256 == sum(big), got.NextStartLine)
	}
	d := f.decision
	d.Limits.FsizeBytes = 1000
	o := f.doWith(t, NameRead, map[string]any{"path": "@w/big.txt"}, d)
	if o.code != "read_limit" || o.err.Details["limit"] != int64(1000) {
		t.Errorf("file over fsize_bytes: %q %v, want read_limit", o.code, o.err)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	writeT(t, filepath.Join(f.work, ".hidden"), "h")
	must(t, os.Mkdir(filepath.Join(f.work, ".git"), 0o755))
	var got ListData
	f.do(t, NameList, map[string]any{"path": "@w"}).decode(t, &got)
	want := ListData{Path: "@w", Total: 2, Entries: []ListEntry{{"a.txt", "file", 17}, {"sub", "dir", 0}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	f.do(t, NameList, map[string]any{"path": f.work + "/sub"}).decode(t, &got)
	if got.Path != f.work+"/sub" || len(got.Entries) != 1 || got.Entries[0].Name != "b.txt" {
		t.Errorf("list abs: %+v", got)
	}
	for i := range 250 {
		writeT(t, filepath.Join(f.work, "sub", fmt.Sprintf("n%03d", i)), "")
	}
	f.do(t, NameList, map[string]any{"path": "@w/sub"}).decode(t, &got)
	if len(got.Entries) != 200 || !got.Truncated || got.Total != 251 || got.Entries[0].Name != "b.txt" {
		t.Errorf("cap: %d entries, truncated %v, total %d", len(got.Entries), got.Truncated, got.Total)
	}
	f.do(t, NameList, map[string]any{"path": "@w/sub", "maxEntries": 3}).decode(t, &got)
	if len(got.Entries) != 3 || !got.Truncated {
		t.Errorf("maxEntries 3: %d, %v", len(got.Entries), got.Truncated)
	}
	if o := f.do(t, NameList, map[string]any{"path": "@w", "maxEntries": 201}); o.code != "invalid_input" || o.err.Details["field"] != "maxEntries" {
		t.Errorf("maxEntries 201: %q %v", o.code, o.err)
	}
}

func TestSearch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	writeT(t, filepath.Join(f.work, "sub", "code.go"), "package x\n\nfunc FooHandler() {}\nfunc barHandler() {}\n// end\n")
	for _, skip := range []string{".git", "node_modules", ".cache"} {
		must(t, os.MkdirAll(filepath.Join(f.work, skip), 0o755))
		writeT(t, filepath.Join(f.work, skip, "x.go"), "func HiddenHandler() {}\n")
	}
	writeT(t, filepath.Join(f.work, "bin.dat"), "func BinHandler()\x00\n")
	for _, c := range []struct {
		name  string
		input map[string]any
		want  []SearchMatch
	}{
		{"substring, one line of context by default", map[string]any{"pattern": "Handler"}, []SearchMatch{
			{Path: "@w/sub/code.go", Line: 3, Text: "func FooHandler() {}", Before: []string{""}, After: []string{"func barHandler() {}"}},
			{Path: "@w/sub/code.go", Line: 4, Text: "func barHandler() {}", Before: []string{"func FooHandler() {}"}, After: []string{"// end"}},
		}},
		{"no context", map[string]any{"pattern": "Handler", "before": 0, "after": 0}, []SearchMatch{
			{Path: "@w/sub/code.go", Line: 3, Text: "func FooHandler() {}", Before: []string{}, After: []string{}},
			{Path: "@w/sub/code.go", Line: 4, Text: "func barHandler() {}", Before: []string{}, After: []string{}},
		}},
		{"regex with context", map[string]any{"pattern": "/^func [a-z]+handler/i", "before": 1, "after": 2}, []SearchMatch{
			{Path: "@w/sub/code.go", Line: 3, Text: "func FooHandler() {}", Before: []string{""}, After: []string{"func barHandler() {}", "// end"}},
			{Path: "@w/sub/code.go", Line: 4, Text: "func barHandler() {}", Before: []string{"func FooHandler() {}"}, After: []string{"// end"}},
		}},
		{"slash substring", map[string]any{"pattern": "// end", "before": 0}, []SearchMatch{
			{Path: "@w/sub/code.go", Line: 5, Text: "// end", Before: []string{}, After: []string{}},
		}},
		{"one file", map[string]any{"path": "@w/a.txt", "pattern": "eta"}, []SearchMatch{
			{Path: "@w/a.txt", Line: 2, Text: "beta", Before: []string{"alpha"}, After: []string{"gamma"}},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := map[string]any{"path": "@w"}
			for k, v := range c.input {
				in[k] = v
			}
			var got SearchData
			f.do(t, NameSearch, in).decode(t, &got)
			if diff := cmp.Diff(c.want, got.Matches); diff != "" {
				t.Errorf("matches (-want +got):\n%s", diff)
			}
			if got.Truncated {
				t.Errorf("truncated: %s", got.TruncatedBy)
			}
		})
	}
	var got SearchData
	f.do(t, NameSearch, map[string]any{"path": "@w", "pattern": "Handler", "maxMatches": 1}).decode(t, &got)
	if len(got.Matches) != 1 || !got.Truncated || got.TruncatedBy != "maxMatches" {
		t.Errorf("maxMatches: %+v", got)
	}
	if got.Stats.FilesScanned < 1 || got.Stats.BytesScanned < 1 {
		t.Errorf("stats: %+v", got.Stats)
	}
	for _, bad := range []map[string]any{
		{"path": "@w", "pattern": "/(/"},
		{"path": "@w", "pattern": ""},
		{"path": "@w", "pattern": "x", "before": 11},
		{"path": "@w", "pattern": "x", "maxMatches": 0},
	} {
		if o := f.do(t, NameSearch, bad); o.code != "invalid_input" || o.stage != "prepare" {
			t.Errorf("%v: %q at %s", bad, o.code, o.stage)
		}
	}
}

func TestSearchBounds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for i := range 20 {
		writeT(t, filepath.Join(f.work, "sub", fmt.Sprintf("f%02d.txt", i)), strings.Repeat("needle\n", 10))
	}
	for _, c := range []struct {
		bounds SearchBounds
		by     string
	}{
		{SearchBounds{MaxFiles: 5}, "maxFiles"},
		{SearchBounds{MaxBytes: 200}, "maxBytes"},
	} {
		tl := Tools(Options{Search: c.bounds})[2]
		f.tools[NameSearch] = tl
		var got SearchData
		f.do(t, NameSearch, map[string]any{"path": "@w", "pattern": "needle", "maxMatches": 500}).decode(t, &got)
		if !got.Truncated || got.TruncatedBy != c.by {
			t.Errorf("%+v: truncated=%v by %q, want %s", c.bounds, got.Truncated, got.TruncatedBy, c.by)
		}
	}
	f.tools[NameSearch] = Tools(Options{Search: SearchBounds{MaxFileBytes: 10}})[2]
	var got SearchData
	f.do(t, NameSearch, map[string]any{"path": "@w/sub", "pattern": "needle"}).decode(t, &got)
	if len(got.Matches) != 0 || got.Stats.FilesSkipped != 20 {
		t.Errorf("large files skipped: %d matches, %d skipped", len(got.Matches), got.Stats.FilesSkipped)
	}
}

func TestWrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := filepath.Join(f.work, "a.txt")
	must(t, os.Chmod(a, 0o600))
	old := readT(t, a)

	// Mismatched precondition: nothing changes.
	o := f.do(t, NameWrite, map[string]any{"path": "@w/a.txt", "content": "new\n", "ifMatchSha256": sum("other")})
	if o.code != "precondition_failed" || o.err.Details["actual"] != sum(old) || readT(t, a) != old {
		t.Fatalf("mismatch: %q %v", o.code, o.err)
	}
	// Matching precondition, uppercase hex accepted; mode kept.
	var wd WriteData
	f.do(t, NameWrite, map[string]any{"path": "@w/a.txt", "content": "new\n", "ifMatchSha256": strings.ToUpper(sum(old))}).decode(t, &wd)
	want := WriteData{Path: "@w/a.txt", BytesWritten: 4, SHA256After: sum("new\n"), SHA256Before: sum(old)}
	if diff := cmp.Diff(want, wd); diff != "" {
		t.Errorf("write (-want +got):\n%s", diff)
	}
	if fi, _ := os.Stat(a); fi.Mode().Perm() != 0o600 || readT(t, a) != "new\n" {
		t.Errorf("after write: mode %v content %q", fi.Mode(), readT(t, a))
	}
	// Create only.
	if o := f.do(t, NameWrite, map[string]any{"path": "@w/a.txt", "content": "x", "ifMatchSha256": ""}); o.code != "precondition_failed" {
		t.Errorf("create-only over existing: %q", o.code)
	}
	if o := f.do(t, NameWrite, map[string]any{"path": "@w/missing.txt", "content": "x", "ifMatchSha256": sum("x")}); o.code != "precondition_failed" {
		t.Errorf("hash precondition on missing file: %q", o.code)
	}
	f.do(t, NameWrite, map[string]any{"path": "@w/deep/er/n.txt", "content": "n", "ifMatchSha256": ""}).decode(t, &wd)
	if !wd.Created || readT(t, filepath.Join(f.work, "deep", "er", "n.txt")) != "n" {
		t.Errorf("create with parents: %+v", wd)
	}
	// Absolute path, null precondition.
	f.do(t, NameWrite, `{"path":"`+f.work+`/abs.txt","content":"","ifMatchSha256":null}`).decode(t, &wd)
	if wd.Path != f.work+"/abs.txt" || wd.BytesWritten != 0 {
		t.Errorf("abs write: %+v", wd)
	}
	// Limits: default 100 KiB, then the policy's fsize_bytes.
	if o := f.do(t, NameWrite, map[string]any{"path": "@w/big", "content": strings.Repeat("x", DefaultWriteBytes+1)}); o.code != "write_limit" || o.stage != "enforce" {
		t.Errorf("over default write limit: %q at %s", o.code, o.stage)
	}
	d := f.decision
	d.Limits.FsizeBytes = 10
	if o := f.doWith(t, NameWrite, map[string]any{"path": "@w/big", "content": strings.Repeat("x", 11)}, d); o.code != "write_limit" {
		t.Errorf("over fsize_bytes: %q", o.code)
	}
	if _, err := os.Stat(filepath.Join(f.work, "big")); !os.IsNotExist(err) {
		t.Errorf("refused write left a file: %v", err)
	}
	for _, bad := range []string{
		`{"path":"@w/x"}`,
		`{"path":"@w/x","content":1}`,
		`{"path":"@w/x","content":"a","content":"b"}`,
		`{"path":"@w/x","content":"a","extra":1}`,
		`{"path":"@w/x","content":"a","ifMatchSha256":"abc"}`,
		`{"path":"@w/x","content":"\ud800"}`,
		`{"path":"@w/x","content":"a\u0000"}`,
	} {
		if o := f.do(t, NameWrite, bad); o.code != "invalid_input" || o.err.Details["field"] == nil {
			t.Errorf("%s: %q %v", bad, o.code, o.err)
		}
	}
	noTemps(t, f.root)
}

// TestArgsNeverHoldContent: receipts keep sizes and hashes of what was
// written, never the text.
func TestArgsNeverHoldContent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const body = "a secret body that must not reach evidence\n"
	for _, c := range []struct{ tool, input string }{
		{NameWrite, `{"path":"@w/x.txt","content":"` + strings.TrimSuffix(body, "\n") + `\n"}`},
		{NamePatch, `{"patch":"--- /dev/null\n+++ b/@w/y.txt\n@@ -0,0 +1 @@\n+` + strings.TrimSuffix(body, "\n") + `\n"}`},
		{NamePatch, `{"path":"@w/a.md","updateFrontmatter":{"title":"` + strings.TrimSuffix(body, "\n") + `"}}`},
	} {
		c2, err := f.tools[c.tool].Prepare(t.Context(), json.RawMessage(c.input))
		must(t, err)
		b, _ := json.Marshal(map[string]any{"args": c2.Args(), "resolved": c2.Resolved()})
		if strings.Contains(string(b), "secret body") {
			t.Errorf("%s: args or resolved hold the content: %s", c.tool, b)
		}
		if !strings.Contains(string(b), `"sha256":"`) {
			t.Errorf("%s: args lack the content digest: %s", c.tool, b)
		}
	}
}

func TestResolved(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c, err := f.tools[NameRead].Prepare(t.Context(), json.RawMessage(`{"path":"`+f.work+`/inner/b.txt"}`))
	must(t, err)
	got := c.Resolved()
	want := map[string]any{"path": filepath.Join(f.work, "sub", "b.txt"), "alias": "", "rel": "", "name": "b.txt",
		"exists": true, "type": "file", "size": int64(4), "write": false}
	delete(got, "paths")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resolved (-want +got):\n%s", diff)
	}
	c, err = f.tools[NameWrite].Prepare(t.Context(), json.RawMessage(`{"path":"@w/src/x.go","content":"abc"}`))
	must(t, err)
	got = c.Resolved()
	delete(got, "paths")
	want = map[string]any{"path": "", "alias": "@w", "rel": "src/x.go", "name": "x.go", "write": true, "bytes": 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resolved alias (-want +got):\n%s", diff)
	}
}
