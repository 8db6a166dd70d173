package fstool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/backends/internal/strictjson"
	"github.com/portcullis/portcullis/wire"
)

const listDescription = "List the direct children of a directory inside the granted directories. path is absolute or @alias/rel. " +
	"Returns entries sorted by name, each {name, type: file|dir, size}; hidden entries (names starting with '.'), " +
	"symlinks and special files are skipped. At most maxEntries (default and max 200) are returned, with truncated set past that."

const listSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Absolute path or @alias/rel of a directory inside the grants."},
    "maxEntries": {"type": "integer", "minimum": 1, "maximum": 200, "description": "Most entries to return (default 200)."}
  },
  "required": ["path"],
  "additionalProperties": false
}`

// MaxListEntries is the most entries fs.list returns; maxNamesScanned bounds
// the names read from one directory to sort them.
const (
	MaxListEntries  = 200
	maxNamesScanned = 100000
)

type listOp struct {
	path *pathRef
	max  int
}

func prepareList(obj strictjson.Object) (operation, error) {
	if err := obj.Only("path", "maxEntries"); err != nil {
		return nil, err
	}
	p, err := pathField(obj, "path")
	if err != nil {
		return nil, err
	}
	op := &listOp{path: p}
	if op.max, err = optInt(obj, "maxEntries", MaxListEntries, 1, MaxListEntries); err != nil {
		return nil, err
	}
	return op, nil
}

func (op *listOp) paths() []*pathRef { return []*pathRef{op.path} }

// ListEntry is one child in fs.list's output. Size is the file size in
// bytes, 0 for directories.
type ListEntry struct {
	Name string `json:"name"`
	Type string `json:"type"` // file | dir
	Size int64  `json:"size"`
}

// ListData is fs.list's output.data.
type ListData struct {
	Path      string      `json:"path"`
	Entries   []ListEntry `json:"entries"`
	Truncated bool        `json:"truncated"`
	Total     int         `json:"total"` // listable entries seen (hidden, symlinks and special files excluded)
}

func (op *listOp) run(ctx context.Context, c *call) (any, error) {
	t := c.targets[0]
	root, err := openRoot(t.grant)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	dir, err := root.Open(t.rel)
	if err != nil {
		return nil, fsError(t, "listing", err)
	}
	defer dir.Close()
	if fi, err := dir.Stat(); err != nil {
		return nil, fsError(t, "listing", err)
	} else if !fi.IsDir() {
		return nil, &wire.Error{Code: wire.CodeInvalidInput,
			Message: fmt.Sprintf("path %q is not a directory; use fs.read for files", t.ref.raw),
			Details: map[string]any{"field": "path", "path": t.ref.raw}}
	}
	var names []string
	scanCut := false
	for {
		ents, err := dir.ReadDir(1024)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") || e.Type()&(fs.ModeSymlink|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeDevice|fs.ModeCharDevice) != 0 {
				continue
			}
			if c.deny.hides(filepath.Join(t.real, e.Name()), filepath.Join(t.rel, e.Name())) {
				continue
			}
			names = append(names, e.Name())
		}
		if errors.Is(err, io.EOF) || len(ents) == 0 {
			break
		}
		if err != nil {
			return nil, fsError(t, "listing", err)
		}
		if len(names) >= maxNamesScanned {
			scanCut = true
			break
		}
	}
	slices.Sort(names)

	// Types and sizes come from fstatat on the open directory with
	// AT_SYMLINK_NOFOLLOW: relative to the directory the kernel already
	// confined, never re-resolved by path.
	raw, err := dir.SyscallConn()
	if err != nil {
		return nil, fsError(t, "listing", err)
	}
	d := &ListData{Path: display(t, ""), Entries: []ListEntry{}, Truncated: scanCut}
	for _, name := range names {
		if ctx.Err() != nil {
			d.Truncated = true
			break
		}
		var st unix.Stat_t
		var serr error
		if cerr := raw.Control(func(fd uintptr) {
			serr = unix.Fstatat(int(fd), name, &st, unix.AT_SYMLINK_NOFOLLOW)
		}); cerr != nil {
			serr = cerr
		}
		if serr != nil {
			continue // vanished since it was listed
		}
		e := ListEntry{Name: name}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			e.Type, e.Size = "file", st.Size
		case unix.S_IFDIR:
			e.Type = "dir"
		default:
			continue
		}
		d.Total++
		if len(d.Entries) < op.max {
			d.Entries = append(d.Entries, e)
		} else {
			d.Truncated = true
		}
	}
	return d, nil
}
