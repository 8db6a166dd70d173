package fstool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/portcullis/portcullis/backends/internal/strictjson"
	"github.com/portcullis/portcullis/wire"
)

const searchDescription = "Search text files under a directory (recursively) inside the granted directories. " +
	"pattern is a plain substring, or /regexp/flags (RE2 syntax, flags i, m, s), e.g. \"/func \\\\w+Handler/i\". " +
	"before/after add context lines (0-10); maxMatches caps results (default 50, max 500). " +
	"Skips .git, node_modules, hidden entries, symlinks and binary files. The work is bounded; " +
	"truncated says a bound was hit. Returns matches [{path, line, text, before, after}] and stats."

const searchSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Absolute path or @alias/rel of a directory (or one file) inside the grants."},
    "pattern": {"type": "string", "minLength": 1, "description": "Substring to find, or /regexp/flags (RE2; flags i, m, s)."},
    "before": {"type": "integer", "minimum": 0, "maximum": 10, "description": "Context lines before each match (default 0)."},
    "after": {"type": "integer", "minimum": 0, "maximum": 10, "description": "Context lines after each match (default 0)."},
    "maxMatches": {"type": "integer", "minimum": 1, "maximum": 500, "description": "Most matches to return (default 50)."}
  },
  "required": ["path", "pattern"],
  "additionalProperties": false
}`

// Search input bounds.
const (
	MaxPatternBytes   = 1024
	MaxContextLines   = 10
	DefaultMaxMatches = 50
	MaxMatches        = 500
	maxMatchTextBytes = 512
)

type searchOp struct {
	path          *pathRef
	pattern       string
	re            *regexp.Regexp // nil: substring
	before, after int
	maxMatches    int
}

func prepareSearch(obj strictjson.Object) (operation, error) {
	if err := obj.Only("path", "pattern", "before", "after", "maxMatches"); err != nil {
		return nil, err
	}
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
	if op.before, err = optInt(obj, "before", 0, 0, MaxContextLines); err != nil {
		return nil, err
	}
	if op.after, err = optInt(obj, "after", 0, 0, MaxContextLines); err != nil {
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

func (op *searchOp) run(ctx context.Context, c *call) (any, error) {
	t := c.targets[0]
	start := time.Now()
	deadline := start.Add(c.limits.searchTime)
	bounds := c.tool.s.search
	root, err := openRoot(t.grant)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	fi, err := root.Stat(t.rel)
	if err != nil {
		return nil, fsError(t, "searching", err)
	}
	d := &SearchData{Path: display(t, ""), Pattern: op.pattern, Matches: []SearchMatch{}}
	stop := func(by string) error {
		d.Truncated, d.TruncatedBy = true, by
		return errStop
	}

	// scan searches one regular file; rel is relative to base.
	scan := func(base *os.Root, rel, shown string) error {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return stop("time")
		}
		if d.Stats.FilesScanned >= bounds.MaxFiles {
			return stop("maxFiles")
		}
		f, err := base.Open(rel)
		if err != nil {
			d.Stats.FilesSkipped++
			return nil
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() || st.Size() > bounds.MaxFileBytes {
			d.Stats.FilesSkipped++
			return nil
		}
		if d.Stats.BytesScanned+st.Size() > bounds.MaxBytes {
			return stop("maxBytes")
		}
		b, err := io.ReadAll(io.LimitReader(f, bounds.MaxFileBytes+1))
		d.Stats.FilesScanned++
		d.Stats.BytesScanned += int64(len(b))
		if err != nil || int64(len(b)) > bounds.MaxFileBytes {
			d.Stats.FilesSkipped++
			return nil
		}
		if isBinary(b[:min(len(b), binarySniffBytes)], len(b) <= binarySniffBytes) {
			d.Stats.FilesSkipped++
			return nil
		}
		return op.matchFile(d, shown, string(b), stop)
	}

	switch {
	case fi.Mode().IsRegular():
		err = scan(root, t.rel, display(t, ""))
	case fi.IsDir():
		var sub *os.Root
		if sub, err = root.OpenRoot(t.rel); err != nil {
			return nil, fsError(t, "searching", err)
		}
		defer sub.Close()
		err = fs.WalkDir(sub.FS(), ".", func(p string, e fs.DirEntry, werr error) error {
			if werr != nil {
				if p == "." {
					return werr
				}
				d.Stats.FilesSkipped++
				return nil
			}
			if p != "." && (skipName(e.Name()) || c.deny.hides(filepath.Join(t.real, p), filepath.Join(t.rel, p))) {
				if e.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			switch {
			case e.Type()&fs.ModeSymlink != 0:
				return nil
			case e.IsDir():
				if ctx.Err() != nil || time.Now().After(deadline) {
					return stop("time")
				}
				return nil
			case !e.Type().IsRegular():
				return nil
			}
			return scan(sub, p, display(t, p))
		})
	default:
		return nil, &wire.Error{Code: wire.CodeInvalidInput,
			Message: fmt.Sprintf("path %q is neither a directory nor a regular file", t.ref.raw),
			Details: map[string]any{"field": "path", "path": t.ref.raw}}
	}
	if err != nil && !errors.Is(err, errStop) {
		return nil, fsError(t, "searching", err)
	}
	d.Stats.DurationMS = time.Since(start).Milliseconds()
	return d, nil
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
