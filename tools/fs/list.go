package fstool

import (
	"context"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/tools/internal/strictjson"
)

const listDescription = "List the direct children of a directory inside the granted directories. path is absolute or @alias/rel. " +
	"Returns entries sorted by name, each {name, type: file|dir, size}; hidden entries (names starting with '.'), " +
	"secret-shaped names (private keys, credential stores), symlinks and special files are skipped. At most maxEntries (default and max 200) are returned, with truncated set past that."

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
	Total     int         `json:"total"` // listable entries seen (hidden, secret-shaped, symlinks and special files excluded)
}

func (op *listOp) run(ctx context.Context, c *call) (any, error) {
	t := &c.targets[0]
	if t.later != nil {
		return nil, t.later
	}
	// t.fd is the directory Enforce opened and checked (open.go).
	ents, scanCut, err := readDir(t.fd, maxNamesScanned)
	if err != nil {
		return nil, fsError(t, "listing", err)
	}
	denied := c.deny.under(t.real)
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		switch {
		case strings.HasPrefix(e.name, "."), secretRule(e.name) != "":
			continue
		case e.typ != unix.DT_UNKNOWN && e.typ != unix.DT_REG && e.typ != unix.DT_DIR:
			continue // symlinks and special files
		case len(denied) > 0 && hiddenBy(denied, path.Join(t.real, e.name)):
			continue
		}
		names = append(names, e.name)
	}
	slices.Sort(names)

	// Types and sizes come from fstatat on the open directory with
	// AT_SYMLINK_NOFOLLOW: relative to the directory Enforce checked,
	// never re-resolved by path.
	d := &ListData{Path: display(t, ""), Entries: []ListEntry{}, Truncated: scanCut}
	for _, name := range names {
		if ctx.Err() != nil {
			d.Truncated = true
			break
		}
		var st unix.Stat_t
		if statAt(t.fd, name, &st) != nil {
			continue // vanished since it was listed
		}
		if _, ok := c.deny.byID(&st); ok {
			continue
		}
		e := ListEntry{Name: name}
		switch fileType(&st) {
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

// hiddenBy reports whether real lies in one of the denied entries.
func hiddenBy(denied []denyEntry, real string) bool {
	for _, e := range denied {
		if within(real, e.path) {
			return true
		}
	}
	return false
}
