package fstool

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/portcullis/portcullis/tools/internal/strictjson"
	"github.com/portcullis/portcullis/wire"
)

const readDescription = "Read a text file inside the granted directories. path is absolute or @alias/rel. " +
	"Optional startLine/endLine (1-based, inclusive) select lines. Returns content, bytes (file size), " +
	"sha256 (of the whole file; pass it as ifMatchSha256 to fs.write/fs.apply_patch), totalLines and truncated; " +
	"when truncated, nextStartLine says where to continue. Binary files are reported (binary: true) without content."

const readSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Absolute path or @alias/rel of a file inside the grants."},
    "startLine": {"type": "integer", "minimum": 1, "description": "First line to return, 1-based (default 1)."},
    "endLine": {"type": "integer", "minimum": 1, "description": "Last line to return, inclusive (default: end of file)."}
  },
  "required": ["path"],
  "additionalProperties": false
}`

// binarySniffBytes is how much of a file decides whether it is text.
const binarySniffBytes = 8 << 10

type readOp struct {
	path       *pathRef
	start, end int // end 0: to the end
}

func prepareRead(obj strictjson.Object) (operation, error) {
	p, err := pathField(obj, "path")
	if err != nil {
		return nil, err
	}
	op := &readOp{path: p}
	if op.start, err = optInt(obj, "startLine", 1, 1, math.MaxInt32); err != nil {
		return nil, err
	}
	if op.end, err = optInt(obj, "endLine", 0, 1, math.MaxInt32); err != nil {
		return nil, err
	}
	if op.end != 0 && op.end < op.start {
		return nil, strictjson.Invalid("endLine", "endLine %d is before startLine %d; endLine must be at least startLine", op.end, op.start)
	}
	return op, nil
}

// pathField decodes and parses a required path field.
func pathField(obj strictjson.Object, key string) (*pathRef, error) {
	if !has(obj, key) {
		return nil, strictjson.Invalid(key, "%s is required: an absolute path or @alias/rel", key)
	}
	s, err := str(obj, key, MaxPathBytes)
	if err != nil {
		return nil, err
	}
	return parsePath(key, s)
}

func (op *readOp) paths() []*pathRef { return []*pathRef{op.path} }

// ReadData is fs.read's output.data.
type ReadData struct {
	Path          string  `json:"path"`
	Content       *string `json:"content"` // null for binary files
	Bytes         int64   `json:"bytes"`
	SHA256        string  `json:"sha256"`
	Binary        bool    `json:"binary"`
	Truncated     bool    `json:"truncated"`
	StartLine     int     `json:"startLine"`
	EndLine       int     `json:"endLine"` // last line returned, 0 when none
	TotalLines    int     `json:"totalLines"`
	NextStartLine int     `json:"nextStartLine,omitempty"`
	Hint          string  `json:"hint,omitempty"`
}

func (op *readOp) run(ctx context.Context, c *call) (any, error) {
	t := &c.targets[0]
	if t.later != nil {
		return nil, t.later
	}
	// t.fd is the regular file Enforce opened and checked (open.go).
	fi := &t.st
	if fi.Size > c.limits.readFileBytes {
		return nil, readLimit(t, fi.Size, c.limits.readFileBytes)
	}
	f := fdReader{t.fd}

	h := sha256.New()
	lr := &io.LimitedReader{R: f, N: c.limits.readFileBytes + 1}
	br := getReader(io.TeeReader(lr, h), fi.Size)
	defer putReader(br)
	d := &ReadData{Path: display(t, ""), StartLine: op.start}
	head, _ := br.Peek(binarySniffBytes)
	d.Binary = isBinary(head, len(head) < binarySniffBytes)

	// Sized for the usual case (the whole file, within the read limit) so
	// appending does not regrow it line by line; a Builder, so that the
	// content becomes the answer's string without another copy.
	var content strings.Builder
	if !d.Binary {
		content.Grow(int(min(fi.Size, int64(c.limits.readBytes))))
	}
	line, done := 1, false // line: number of the line being read
	atLineStart := true
	for {
		if err := ctx.Err(); err != nil {
			return nil, wire.Errorf(wire.CodeTimeout, "fs.read was cancelled: %v", err)
		}
		chunk, rerr := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if atLineStart {
				d.TotalLines++
			}
			inRange := line >= op.start && (op.end == 0 || line <= op.end)
			if inRange && !done && !d.Binary {
				room := c.limits.readBytes - content.Len()
				switch {
				case len(chunk) <= room:
					content.Write(chunk)
					d.EndLine = line
				case content.Len() == 0 || !atLineStart:
					// A single line longer than the limit: return its
					// first bytes, cut on a character boundary.
					cut := validPrefix(chunk[:room])
					content.Write(cut)
					d.EndLine = line
					d.Truncated, done = true, true
					d.NextStartLine = line + 1
					d.Hint = fmt.Sprintf("line %d is longer than the %d-byte read limit and was cut; continue with startLine=%d", line, c.limits.readBytes, line+1)
				default:
					d.Truncated, done = true, true
					d.NextStartLine = line
					d.Hint = fmt.Sprintf("output reached the %d-byte read limit (limits.max_output_bytes); continue with startLine=%d", c.limits.readBytes, line)
				}
			}
			atLineStart = chunk[len(chunk)-1] == '\n'
			if atLineStart {
				line++
			}
		}
		if errors.Is(rerr, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return nil, fsError(t, "reading", rerr)
		}
	}
	if lr.N <= 0 {
		// The file grew past the limit while it was read.
		return nil, readLimit(t, c.limits.readFileBytes+1, c.limits.readFileBytes)
	}
	d.Bytes = c.limits.readFileBytes + 1 - lr.N
	d.SHA256 = hexSum(h.Sum(nil))
	if d.Binary {
		d.Hint = "the file looks binary (NUL bytes or invalid UTF-8 in its first 8 KiB); its content is not returned"
		return d, nil
	}
	s := content.String()
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	d.Content = &s
	if d.EndLine == 0 && op.start > d.TotalLines && d.TotalLines > 0 {
		d.Hint = fmt.Sprintf("startLine %d is past the end of the file (%d lines)", op.start, d.TotalLines)
	}
	return d, nil
}

// Read buffers are recycled: one of binarySniffBytes for files that fit
// in it (most), one of 64 KiB for larger files. A reader goes back to its
// pool only when run is done with it and everything it returned was copied
// out of its buffer.
var (
	smallReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, binarySniffBytes) }}
	largeReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}
)

func getReader(r io.Reader, size int64) *bufio.Reader {
	pool := &largeReaders
	if size < binarySniffBytes {
		pool = &smallReaders
	}
	br := pool.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

func putReader(br *bufio.Reader) {
	br.Reset(nil) // drop the file and the hash
	if br.Size() == binarySniffBytes {
		smallReaders.Put(br)
	} else {
		largeReaders.Put(br)
	}
}

func readLimit(t *target, size, limit int64) *wire.Error {
	return &wire.Error{Code: wire.CodeReadLimit,
		Message: fmt.Sprintf("%s %q is %d bytes; fs.read reads (and hashes) files of at most %d bytes under this policy (limits.fsize_bytes)", t.ref.field, t.ref.raw, size, limit),
		Details: map[string]any{"field": t.ref.field, "path": t.ref.raw, "bytes": size, "limit": limit}}
}

// isBinary reports whether a file's head looks binary: a NUL byte, or bytes
// that are not UTF-8. A multi-byte character cut by the end of the sniff
// window is not held against the file unless the file ends there.
func isBinary(head []byte, whole bool) bool {
	if bytes.IndexByte(head, 0) >= 0 {
		return true
	}
	if !whole {
		// Drop up to 3 bytes of a character the window cut in half.
		for i := 0; i < utf8.UTFMax-1 && len(head) > 0; i++ {
			if utf8.Valid(head) {
				return false
			}
			head = head[:len(head)-1]
		}
	}
	return !utf8.Valid(head)
}

// validPrefix trims a trailing partial UTF-8 character.
func validPrefix(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		r, size := utf8.DecodeLastRune(b)
		if r != utf8.RuneError || size > 1 {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}
