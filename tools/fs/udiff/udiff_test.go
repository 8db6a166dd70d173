package udiff

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestApply(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, old, patch, want, err string
	}{
		{name: "replace one line", old: "a\nb\nc\n",
			patch: "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n", want: "a\nB\nc\n"},
		{name: "two hunks", old: "1\n2\n3\n4\n5\n6\n7\n8\n9\n",
			patch: "--- f\n+++ f\n@@ -1,2 +1,2 @@\n-1\n+one\n 2\n@@ -8,2 +8,3 @@\n 8\n-9\n+nine\n+ten\n", want: "one\n2\n3\n4\n5\n6\n7\n8\nnine\nten\n"},
		{name: "offset", old: "x\ny\na\nb\nc\n",
			patch: "--- f\n+++ f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n", want: "x\ny\na\nB\nc\n"},
		{name: "create", old: "",
			patch: "--- /dev/null\n+++ b/new\n@@ -0,0 +1,2 @@\n+hello\n+world\n", want: "hello\nworld\n"},
		{name: "delete", old: "bye\n",
			patch: "--- a/f\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n", want: ""},
		{name: "insert after line", old: "a\nc\n",
			patch: "--- f\n+++ f\n@@ -1,0 +2 @@\n+b\n", want: "a\nb\nc\n"},
		{name: "add final newline", old: "a\nb",
			patch: "--- f\n+++ f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n", want: "a\nb\n"},
		{name: "remove final newline", old: "a\nb\n",
			patch: "--- f\n+++ f\n@@ -2 +2 @@\n-b\n+b\n\\ No newline at end of file\n", want: "a\nb"},
		{name: "empty context line", old: "a\n\nc\n",
			patch: "--- f\n+++ f\n@@ -1,3 +1,3 @@\n a\n\n-c\n+C\n", want: "a\n\nC\n"},
		{name: "crlf patch", old: "a\nb\n",
			patch: "--- f\r\n+++ f\r\n@@ -1,2 +1,2 @@\r\n a\r\n-b\r\n+B\r\n", want: "a\nB\n"},
		{name: "mismatch", old: "a\nX\nc\n",
			patch: "--- f\n+++ f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n", err: "does not match"},
		{name: "create over content", old: "x\n",
			patch: "--- /dev/null\n+++ b/new\n@@ -0,0 +1 @@\n+y\n", err: "already has content"},
		{name: "hunks out of order", old: "1\n2\n3\n",
			patch: "--- f\n+++ f\n@@ -3 +3 @@\n-3\n+three\n@@ -1 +1 @@\n-1\n+one\n", err: "does not match"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			files, err := Parse(c.patch)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got, err := Apply(c.old, files[0])
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Apply = %q, %v; want error containing %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Apply = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, patch, err string }{
		{"empty", "", "no file changes"},
		{"prose", "just some text\n", "no file changes"},
		{"no plus header", "--- a\n@@ -1 +1 @@\n-a\n+b\n", "expected \"+++ \""},
		{"no hunks", "--- a\n+++ b\n", "no hunks"},
		{"short hunk", "--- a\n+++ b\n@@ -1,3 +1,3 @@\n a\n", "cut short"},
		{"bad header", "--- a\n+++ b\n@@ -x +1 @@\n", "bad old range"},
		{"bad line", "--- a\n+++ b\n@@ -1 +1 @@\n*a\n", "unexpected line"},
		{"hunk first", "@@ -1 +1 @@\n-a\n+b\n", "before any"},
		{"both null", "--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n", "both sides"},
		{"stray no newline", "--- a\n+++ b\n@@ -0,0 +0,0 @@\n\\ No newline at end of file\n", "before any line"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(c.patch)
			var pe *Error
			if err == nil || !errors.As(err, &pe) || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("Parse error = %v, want *Error containing %q", err, c.err)
			}
		})
	}
}

func TestParseMultiFile(t *testing.T) {
	t.Parallel()
	p := "diff --git a/x b/x\nindex 1..2 100644\n--- a/x\t2026-01-01\n+++ b/x\t2026-01-02\n@@ -1 +1 @@\n-x\n+X\n" +
		"diff --git a/y b/y\n--- a/y\n+++ b/y\n@@ -1 +1 @@\n-y\n+Y\n"
	files, err := Parse(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0].OldName != "a/x" || files[1].NewName != "b/y" {
		t.Fatalf("files = %+v", files)
	}
}

// FuzzParseApply: Parse and Apply never panic, and whatever applies leaves
// only the last line without a newline.
func FuzzParseApply(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.patch"))
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), "a\nb\nc\n")
	}
	f.Add("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n", "a\nb\nc\n")
	f.Add("--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n\\ No newline at end of file\n", "")
	f.Add("--- f\n+++ f\n@@ -1 +1 @@\n-b\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n", "b")
	f.Add("--- f\n+++ f\n@@ -999999999,1 +1 @@\n-b\n+c\n", "b\n")
	f.Fuzz(func(t *testing.T, patch, content string) {
		files, err := Parse(patch)
		if err != nil {
			return
		}
		for _, fl := range files {
			out, err := Apply(content, fl)
			if err != nil {
				continue
			}
			ls := splitKeep(out)
			for i := 0; i < len(ls)-1; i++ {
				if !strings.HasSuffix(ls[i], "\n") {
					t.Fatalf("line %d without newline in the middle: %q", i, out)
				}
			}
		}
	})
}
