// Package udiff parses unified diffs and applies them strictly: every
// context and removed line must match the file exactly (a hunk may sit at
// another line than its header says, as with patch(1)'s offset, but never
// with fuzz), so a patch written against another version of a file is
// refused rather than applied somewhere it was not meant to go.
//
// github.com/bluekeyes/go-gitdiff (v0.9.0) was evaluated as a replacement
// and not taken: its applier is strict about positions (a hunk whose
// header's line number is off is a conflict, where models' patches need
// the offset search below); for a traditional "--- a/x" / "+++ b/y" header
// it reports the new name for both sides, hiding the rename this package's
// caller refuses; and it brings git's binary patches (base85, zlib deltas
// up to 100 MiB per fragment by default), renames, copies and mode changes,
// all of which fs.apply_patch would have to refuse again.
package udiff

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DevNull names the missing side of a file creation or deletion.
const DevNull = "/dev/null"

// Bounds of one patch, so a hostile one costs bounded work.
const (
	MaxFiles = 100
	MaxHunks = 10000
)

// File is the change to one file.
type File struct {
	OldName string // DevNull when the file is created
	NewName string // DevNull when the file is deleted
	Hunks   []Hunk
}

// Hunk is one @@ section. Lines hold their text with the trailing newline,
// except a line marked "\ No newline at end of file".
type Hunk struct {
	OldStart, OldLines int
	NewStart, NewLines int
	Lines              []Line
}

// Line is one hunk line: Op is ' ', '-' or '+'.
type Line struct {
	Op   byte
	Text string
}

// Error is a parse or apply failure with the 1-based line of the patch (or,
// when applying, the hunk) at fault.
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

func errAt(line int, format string, a ...any) error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, a...)}
}

// Parse reads a unified diff holding one or more files. Text outside file
// sections ("diff --git", "index" lines, prose) is ignored; a file section
// is "--- old" then "+++ new" then at least one hunk.
func Parse(patch string) ([]File, error) {
	lines := splitLines(patch)
	var files []File
	i := 0
	for i < len(lines) {
		if !strings.HasPrefix(lines[i], "--- ") {
			if strings.HasPrefix(lines[i], "@@ ") {
				return nil, errAt(i+1, "hunk header before any \"--- \" / \"+++ \" file header")
			}
			i++
			continue
		}
		if len(files) == MaxFiles {
			return nil, errAt(i+1, "more than %d files in one patch", MaxFiles)
		}
		f := File{OldName: headerName(lines[i][4:])}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "+++ ") {
			return nil, errAt(i+2, "expected \"+++ \" after \"--- \"")
		}
		f.NewName = headerName(lines[i+1][4:])
		if f.OldName == "" || f.NewName == "" {
			return nil, errAt(i+1, "file header without a file name")
		}
		if f.OldName == DevNull && f.NewName == DevNull {
			return nil, errAt(i+1, "both sides of a file are /dev/null")
		}
		i += 2
		for i < len(lines) && strings.HasPrefix(lines[i], "@@ ") {
			if len(f.Hunks) == MaxHunks {
				return nil, errAt(i+1, "more than %d hunks", MaxHunks)
			}
			h, next, err := parseHunk(lines, i)
			if err != nil {
				return nil, err
			}
			f.Hunks = append(f.Hunks, h)
			i = next
		}
		if len(f.Hunks) == 0 {
			return nil, errAt(i+1, "file %s has no hunks", f.NewName)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, errAt(1, "no file changes found: a unified diff starts with \"--- old\", \"+++ new\" and \"@@ -l,n +l,n @@\" hunks")
	}
	return files, nil
}

// splitLines splits on "\n", keeping no terminators; a final "\n" does not
// make an extra empty line. "\r\n" patches are accepted.
func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	ls := strings.Split(s, "\n")
	for i, l := range ls {
		ls[i] = strings.TrimSuffix(l, "\r")
	}
	return ls
}

// headerName is the file name of a ---/+++ line: up to a tab (timestamps
// follow one), spaces trimmed.
func headerName(s string) string {
	if i := strings.IndexByte(s, '\t'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

func parseHunk(lines []string, i int) (Hunk, int, error) {
	var h Hunk
	hdr := lines[i]
	rest, ok := strings.CutPrefix(hdr, "@@ -")
	if !ok {
		return h, 0, errAt(i+1, "bad hunk header %q", hdr)
	}
	ranges, _, ok := strings.Cut(rest, " @@")
	if !ok {
		return h, 0, errAt(i+1, "bad hunk header %q: want @@ -l,n +l,n @@", hdr)
	}
	oldR, newR, ok := strings.Cut(ranges, " +")
	if !ok {
		return h, 0, errAt(i+1, "bad hunk header %q: want @@ -l,n +l,n @@", hdr)
	}
	var err error
	if h.OldStart, h.OldLines, err = parseRange(oldR); err != nil {
		return h, 0, errAt(i+1, "bad old range in %q: %v", hdr, err)
	}
	if h.NewStart, h.NewLines, err = parseRange(newR); err != nil {
		return h, 0, errAt(i+1, "bad new range in %q: %v", hdr, err)
	}
	oldN, newN := 0, 0
	i++
	for i < len(lines) && (oldN < h.OldLines || newN < h.NewLines) {
		l := lines[i]
		if l == "" {
			l = " " // editors strip the space of empty context lines
		}
		op := l[0]
		switch op {
		case ' ':
			oldN++
			newN++
		case '-':
			oldN++
		case '+':
			newN++
		case '\\':
			if err := markNoNewline(&h, i); err != nil {
				return h, 0, err
			}
			i++
			continue
		default:
			return h, 0, errAt(i+1, "unexpected line in hunk %q: lines start with ' ', '-', '+' or '\\'", trunc(lines[i]))
		}
		h.Lines = append(h.Lines, Line{Op: op, Text: l[1:] + "\n"})
		i++
	}
	if oldN != h.OldLines || newN != h.NewLines {
		return h, 0, errAt(i+1, "hunk %q is cut short: header says -%d +%d lines, found -%d +%d", hdr, h.OldLines, h.NewLines, oldN, newN)
	}
	if i < len(lines) && strings.HasPrefix(lines[i], "\\") {
		if err := markNoNewline(&h, i); err != nil {
			return h, 0, err
		}
		i++
	}
	return h, i, nil
}

func markNoNewline(h *Hunk, i int) error {
	if len(h.Lines) == 0 {
		return errAt(i+1, "\"\\ No newline at end of file\" before any line")
	}
	last := &h.Lines[len(h.Lines)-1]
	if !strings.HasSuffix(last.Text, "\n") {
		return errAt(i+1, "two \"\\ No newline\" markers for one line")
	}
	last.Text = strings.TrimSuffix(last.Text, "\n")
	return nil
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// parseRange reads "l,n" or "l" (n = 1).
func parseRange(s string) (start, n int, err error) {
	a, b, hasN := strings.Cut(s, ",")
	if start, err = atoi(a); err != nil {
		return 0, 0, err
	}
	n = 1
	if hasN {
		if n, err = atoi(b); err != nil {
			return 0, 0, err
		}
	}
	if start == 0 && n != 0 {
		return 0, 0, errors.New("line 0 with a non-empty range")
	}
	return start, n, nil
}

func atoi(s string) (int, error) {
	if s == "" || len(s) > 9 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a line number", s)
	}
	return strconv.Atoi(s)
}

// Apply returns content with f's hunks applied. Each hunk's old side must
// match exactly, at its stated line or the nearest offset after the
// previous hunk; otherwise Apply fails naming the hunk.
func Apply(content string, f File) (string, error) {
	if f.OldName == DevNull && content != "" {
		return "", errAt(1, "the patch creates %s, which already has content", f.NewName)
	}
	src := splitKeep(content)
	var out []string
	pos := 0 // next unconsumed line of src
	for hi, h := range f.Hunks {
		var old, repl []string
		for _, l := range h.Lines {
			if l.Op != '+' {
				old = append(old, l.Text)
			}
			if l.Op != '-' {
				repl = append(repl, l.Text)
			}
		}
		want := h.OldStart - 1
		if h.OldLines == 0 {
			want = h.OldStart // pure insertion after line OldStart
		}
		at := find(src, old, pos, want)
		if at < 0 {
			return "", errAt(hi+1, "hunk %d (@@ -%d,%d) does not match the file: its context or removed lines differ; read the file again and rebuild the patch", hi+1, h.OldStart, h.OldLines)
		}
		out = append(out, src[pos:at]...)
		out = append(out, repl...)
		pos = at + len(old)
	}
	out = append(out, src[pos:]...)
	// Only the last line may lack its newline.
	for i := 0; i < len(out)-1; i++ {
		if !strings.HasSuffix(out[i], "\n") {
			return "", errAt(len(f.Hunks), "the patch leaves a line without a newline in the middle of the file (misplaced \"\\ No newline at end of file\")")
		}
	}
	res := strings.Join(out, "")
	if f.NewName == DevNull && res != "" {
		return "", errAt(len(f.Hunks), "the patch deletes %s but does not remove all of its content", f.OldName)
	}
	return res, nil
}

// splitKeep splits content into lines that keep their "\n".
func splitKeep(s string) []string {
	var ls []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			ls = append(ls, s)
			break
		}
		ls = append(ls, s[:i+1])
		s = s[i+1:]
	}
	return ls
}

// find returns where old matches src at or after from, nearest to want.
func find(src, old []string, from, want int) int {
	match := func(at int) bool {
		if at < from || at+len(old) > len(src) {
			return false
		}
		for i, l := range old {
			if src[at+i] != l {
				return false
			}
		}
		return true
	}
	want = min(max(want, from), len(src))
	for d := 0; want-d >= from || want+d <= len(src); d++ {
		if match(want + d) {
			return want + d
		}
		if d > 0 && match(want-d) {
			return want - d
		}
	}
	return -1
}
