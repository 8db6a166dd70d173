package fstool

import (
	"context"
	"errors"
	"io"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/tools/internal/strictjson"
)

const searchDescription = "Search text files under a directory (recursively) inside the granted directories. " +
	"pattern is a plain substring, or /regexp/flags (RE2 syntax, flags i, m, s), e.g. \"/func \\\\w+Handler/i\". " +
	"before/after add context lines (0-10, default 1); maxMatches caps results (default 50, max 500). " +
	"Skips .git, node_modules, hidden entries, secret-shaped names, symlinks, special files and binary files. The work is bounded; " +
	"truncated says a bound was hit. Returns matches [{path, line, text, before, after}] and stats."

const searchSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Absolute path or @alias/rel of a directory (or one file) inside the grants."},
    "pattern": {"type": "string", "minLength": 1, "description": "Substring to find, or /regexp/flags (RE2; flags i, m, s)."},
    "before": {"type": "integer", "minimum": 0, "maximum": 10, "description": "Context lines before each match (default 1)."},
    "after": {"type": "integer", "minimum": 0, "maximum": 10, "description": "Context lines after each match (default 1)."},
    "maxMatches": {"type": "integer", "minimum": 1, "maximum": 500, "description": "Most matches to return (default 50)."}
  },
  "required": ["path", "pattern"],
  "additionalProperties": false
}`

// Search input bounds.
const (
	MaxPatternBytes = 1024
	MaxContextLines = 10
	// DefaultContextLines is before/after when not given: one line of
	// context each side, as the file tool host this contract comes from
	// specified (seed 001), so a match is readable without a second call.
	DefaultContextLines = 1
	DefaultMaxMatches   = 50
	MaxMatches          = 500
	maxMatchTextBytes   = 512
)

type searchOp struct {
	path          *pathRef
	pattern       string
	re            *regexp.Regexp // nil: substring
	before, after int
	maxMatches    int
}

func prepareSearch(obj strictjson.Object) (operation, error) {
	p, err := pathField(obj, "path")
	if err != nil {
		return nil, err
	}
	op := &searchOp{path: p}
	if !has(obj, "pattern") {
		return nil, strictjson.Invalid("pattern", "pattern is required: a substring or /regexp/flags")
	}
	if op.pattern, err = str(obj, "pattern", MaxPatternBytes); err != nil {
		return nil, err
	}
	if op.re, err = parsePattern(op.pattern); err != nil {
		return nil, err
	}
	if op.before, err = optInt(obj, "before", DefaultContextLines, 0, MaxContextLines); err != nil {
		return nil, err
	}
	if op.after, err = optInt(obj, "after", DefaultContextLines, 0, MaxContextLines); err != nil {
		return nil, err
	}
	if op.maxMatches, err = optInt(obj, "maxMatches", DefaultMaxMatches, 1, MaxMatches); err != nil {
		return nil, err
	}
	return op, nil
}

// parsePattern returns the regexp of a /re/flags pattern, or nil for a
// substring. A pattern is a regexp when it starts with "/" and its last "/"
// (not the first) is followed only by the flags i, m, s.
func parsePattern(p string) (*regexp.Regexp, error) {
	if p == "" {
		return nil, strictjson.Invalid("pattern", "pattern is empty; give a substring or /regexp/flags")
	}
	end := strings.LastIndexByte(p, '/')
	if p[0] != '/' || end <= 0 {
		return nil, nil
	}
	flags := p[end+1:]
	if strings.Trim(flags, "ims") != "" {
		return nil, nil // e.g. "/usr/bin": a substring
	}
	expr := p[1:end]
	if expr == "" {
		return nil, strictjson.Invalid("pattern", "pattern %q has an empty regular expression", p)
	}
	if flags != "" {
		expr = "(?" + dedupe(flags) + ")" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, strictjson.Invalid("pattern", "pattern %q is not a valid RE2 regular expression: %v", p, err)
	}
	return re, nil
}

func dedupe(flags string) string {
	var b strings.Builder
	for _, c := range "ims" {
		if strings.ContainsRune(flags, c) {
			b.WriteRune(c)
		}
	}
	return b.String()
}

func (op *searchOp) paths() []*pathRef { return []*pathRef{op.path} }

// SearchMatch is one matching line.
type SearchMatch struct {
	Path   string   `json:"path"`
	Line   int      `json:"line"`
	Text   string   `json:"text"`
	Before []string `json:"before"`
	After  []string `json:"after"`
}

// SearchStats say how much work a search did.
type SearchStats struct {
	FilesScanned int   `json:"filesScanned"`
	BytesScanned int64 `json:"bytesScanned"`
	FilesSkipped int   `json:"filesSkipped"` // binary, too large, unreadable
	DurationMS   int64 `json:"durationMs"`
}

// SearchData is fs.search's output.data. TruncatedBy names the bound hit:
// maxMatches, maxFiles, maxBytes or time.
type SearchData struct {
	Path        string        `json:"path"`
	Pattern     string        `json:"pattern"`
	Matches     []SearchMatch `json:"matches"`
	Truncated   bool          `json:"truncated"`
	TruncatedBy string        `json:"truncatedBy,omitempty"`
	Stats       SearchStats   `json:"stats"`
}

var errStop = errors.New("search bound reached")

// maxSearchDepth bounds how deep fs.search descends (one descriptor is
// held per level); deeper directories count as skipped.
const maxSearchDepth = 256

// searcher is one fs.search walk: every directory and file is opened
// relative to its parent's descriptor, never following a symlink, and
// checked against the deny list by name, path and identity.
type searcher struct {
	op       *searchOp
	c        *call
	t        *target
	ctx      context.Context
	d        *SearchData
	bounds   SearchBounds
	deadline time.Time
	denied   []denyEntry // deny entries inside the searched directory
	buf      []byte
}

func (op *searchOp) run(ctx context.Context, c *call) (any, error) {
	t := &c.targets[0]
	if t.later != nil {
		return nil, t.later
	}
	start := time.Now()
	s := &searcher{op: op, c: c, t: t, ctx: ctx, bounds: c.tool.s.search, deadline: start.Add(c.limits.searchTime),
		d: &SearchData{Path: display(t, ""), Pattern: op.pattern, Matches: []SearchMatch{}}}
	var err error
	// t.fd is the file or directory Enforce opened and checked (open.go).
	if fileType(&t.st) == unix.S_IFREG {
		err = s.scanFD(t.fd, &t.st, display(t, ""))
	} else {
		s.denied = c.deny.under(t.real)
		err = s.dir(t.fd, "", 0)
	}
	if err != nil && !errors.Is(err, errStop) {
		return nil, fsError(t, "searching", err)
	}
	s.d.Stats.DurationMS = time.Since(start).Milliseconds()
	return s.d, nil
}

func (s *searcher) stop(by string) error {
	s.d.Truncated, s.d.TruncatedBy = true, by
	return errStop
}

func (s *searcher) outOfTime() bool {
	return s.ctx.Err() != nil || time.Now().After(s.deadline)
}

// dir searches the directory fd (sub below the target; "" for the target
// itself), entries in name order, depth first.
func (s *searcher) dir(fd int, sub string, depth int) error {
	if s.outOfTime() {
		return s.stop("time")
	}
	ents, _, err := readDir(fd, maxNamesScanned)
	if err != nil {
		if sub == "" {
			return err
		}
		s.d.Stats.FilesSkipped++
		return nil
	}
	slices.SortFunc(ents, func(a, b dirent) int { return strings.Compare(a.name, b.name) })
	for _, e := range ents {
		if skipName(e.name) || secretRule(e.name) != "" {
			continue
		}
		child := e.name
		if sub != "" {
			child = sub + "/" + e.name
		}
		if len(s.denied) > 0 && hiddenBy(s.denied, path.Join(s.t.real, child)) {
			continue
		}
		typ := e.typ
		if typ == unix.DT_UNKNOWN {
			var st unix.Stat_t
			if statAt(fd, e.name, &st) != nil {
				continue
			}
			typ = dtOf(fileType(&st))
		}
		var err error
		switch typ {
		case unix.DT_DIR:
			err = s.subdir(fd, e.name, child, depth+1)
		case unix.DT_REG:
			err = s.file(fd, e.name, child)
		default:
			continue // symlinks, FIFOs, sockets, devices: never opened
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *searcher) subdir(parent int, name, child string, depth int) error {
	if depth > maxSearchDepth {
		s.d.Stats.FilesSkipped++
		return nil
	}
	fd, err := openComponent(parent, name, flagsDir, 0)
	if err != nil {
		s.d.Stats.FilesSkipped++ // swapped for a symlink, vanished, unreadable
		return nil
	}
	defer closeFD(fd)
	var st unix.Stat_t
	if fstat(fd, &st) != nil || fileType(&st) != unix.S_IFDIR {
		s.d.Stats.FilesSkipped++
		return nil
	}
	if _, ok := s.c.deny.byID(&st); ok {
		return nil
	}
	return s.dir(fd, child, depth)
}

// file searches one regular file of the directory parent.
func (s *searcher) file(parent int, name, child string) error {
	if s.outOfTime() {
		return s.stop("time")
	}
	if s.d.Stats.FilesScanned >= s.bounds.MaxFiles {
		return s.stop("maxFiles")
	}
	fd, err := openComponent(parent, name, flagsFile, 0)
	if err != nil {
		s.d.Stats.FilesSkipped++
		return nil
	}
	defer closeFD(fd)
	var st unix.Stat_t
	if fstat(fd, &st) != nil {
		s.d.Stats.FilesSkipped++
		return nil
	}
	if _, ok := s.c.deny.byID(&st); ok {
		return nil
	}
	return s.scanFD(fd, &st, display(s.t, child))
}

// scanFD searches the open file fd; non-regular files (a FIFO swapped in
// after the directory was read, opened without blocking) are skipped.
func (s *searcher) scanFD(fd int, st *unix.Stat_t, shown string) error {
	if fileType(st) != unix.S_IFREG || st.Size > s.bounds.MaxFileBytes {
		s.d.Stats.FilesSkipped++
		return nil
	}
	if s.d.Stats.BytesScanned+st.Size > s.bounds.MaxBytes {
		return s.stop("maxBytes")
	}
	if cap(s.buf) < int(st.Size)+1 {
		s.buf = make([]byte, 0, max(int(st.Size)+1, 4096))
	}
	b, err := readAllInto(fdReader{fd}, s.buf[:0], s.bounds.MaxFileBytes+1)
	s.buf = b[:0]
	s.d.Stats.FilesScanned++
	s.d.Stats.BytesScanned += int64(len(b))
	if err != nil || int64(len(b)) > s.bounds.MaxFileBytes {
		s.d.Stats.FilesSkipped++
		return nil
	}
	if isBinary(b[:min(len(b), binarySniffBytes)], len(b) <= binarySniffBytes) {
		s.d.Stats.FilesSkipped++
		return nil
	}
	return s.op.matchFile(s.d, shown, string(b), s.stop)
}

// readAllInto reads r into buf until EOF or limit bytes.
func readAllInto(r io.Reader, buf []byte, limit int64) ([]byte, error) {
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		room := min(int64(cap(buf)-len(buf)), limit-int64(len(buf)))
		n, err := r.Read(buf[len(buf) : len(buf)+int(room)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// dtOf is the dirent type of an S_IFMT type.
func dtOf(typ uint32) uint8 {
	switch typ {
	case unix.S_IFREG:
		return unix.DT_REG
	case unix.S_IFDIR:
		return unix.DT_DIR
	case unix.S_IFLNK:
		return unix.DT_LNK
	}
	return 0xff // none of the above: skipped
}

// skipName says which entries a search never enters: hidden ones (which
// include .git and the gateway's own temporary files) and node_modules.
func skipName(name string) bool {
	return strings.HasPrefix(name, ".") || name == "node_modules"
}

func (op *searchOp) matchFile(d *SearchData, shown, content string, stop func(string) error) error {
	lines := strings.Split(content, "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	for i, line := range lines {
		var hit bool
		if op.re != nil {
			hit = op.re.MatchString(line)
		} else {
			hit = strings.Contains(line, op.pattern)
		}
		if !hit {
			continue
		}
		if len(d.Matches) >= op.maxMatches {
			return stop("maxMatches")
		}
		m := SearchMatch{Path: shown, Line: i + 1, Text: clip(line), Before: []string{}, After: []string{}}
		for j := max(0, i-op.before); j < i; j++ {
			m.Before = append(m.Before, clip(lines[j]))
		}
		for j := i + 1; j < len(lines) && j <= i+op.after; j++ {
			m.After = append(m.After, clip(lines[j]))
		}
		d.Matches = append(d.Matches, m)
	}
	return nil
}

// clip bounds one line of output, on a character boundary.
func clip(s string) string {
	s = strings.TrimSuffix(s, "\r")
	if len(s) <= maxMatchTextBytes {
		return s
	}
	return string(validPrefix([]byte(s[:maxMatchTextBytes]))) + "…"
}
