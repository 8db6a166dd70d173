package fstool

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/portcullis/portcullis/tools/internal/strictjson"
	"github.com/portcullis/portcullis/wire"
)

const writeDescription = "Write a whole text file inside a read-write grant, atomically (temporary file, fsync, rename): " +
	"readers see the old or the new content, never a mix. path is absolute or @alias/rel; missing parent directories are created. " +
	"ifMatchSha256 guards against lost updates: the sha256 fs.read returned (the file must still have it), " +
	"or \"\" to create a file that must not exist yet; omit it to write unconditionally. " +
	"An existing file keeps its permissions. Returns bytesWritten and sha256After."

const writeSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Absolute path or @alias/rel of the file, inside a read-write grant."},
    "content": {"type": "string", "description": "The complete new content of the file (UTF-8 text)."},
    "ifMatchSha256": {"type": ["string", "null"], "description": "Precondition: the file's current sha256 (64 hex digits), or \"\" to require that the file does not exist. Omit for none."}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}`

// maxContentBytes bounds content at Prepare, before the policy's limit is
// known; the request body limit is normally lower still.
const maxContentBytes = 64 << 20

type writeOp struct {
	path    *pathRef
	content string
	ifMatch *string
}

func prepareWrite(obj strictjson.Object) (operation, error) {
	p, err := pathField(obj, "path")
	if err != nil {
		return nil, err
	}
	op := &writeOp{path: p}
	if !has(obj, "content") {
		return nil, strictjson.Invalid("content", "content is required: the complete new text of the file (\"\" for an empty file)")
	}
	if op.content, err = str(obj, "content", maxContentBytes); err != nil {
		return nil, err
	}
	if op.ifMatch, err = ifMatchField(obj, "ifMatchSha256"); err != nil {
		return nil, err
	}
	return op, nil
}

// ifMatchField decodes an optional precondition: absent or null is none.
func ifMatchField(obj strictjson.Object, key string) (*string, error) {
	if !has(obj, key) {
		return nil, nil
	}
	s, err := str(obj, key, 64)
	if err != nil {
		return nil, strictjson.Invalid(key, "%s must be 64 hex digits (a SHA-256), or \"\" to require that the file does not exist", key)
	}
	if s == "" {
		return &s, nil
	}
	s, err = sha256Hex(key, s)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

func (op *writeOp) paths() []*pathRef { return []*pathRef{op.path} }

func (op *writeOp) redactArgs(args map[string]any) { args["content"] = contentFacts(op.content) }

func (op *writeOp) resolvedExtra(m map[string]any) { m["bytes"] = len(op.content) }

func (op *writeOp) checkLimits(l effectiveLimits) error {
	if int64(len(op.content)) > l.writeBytes {
		return &wire.Error{Code: wire.CodeWriteLimit,
			Message: fmt.Sprintf("content is %d bytes; this policy lets fs.write write at most %d bytes per file (limits.fsize_bytes)", len(op.content), l.writeBytes),
			Details: map[string]any{"field": "content", "bytes": len(op.content), "limit": l.writeBytes}}
	}
	return nil
}

// WriteData is fs.write's output.data.
type WriteData struct {
	Path         string `json:"path"`
	BytesWritten int    `json:"bytesWritten"`
	SHA256After  string `json:"sha256After"`
	SHA256Before string `json:"sha256Before,omitempty"` // "" when the file was created
	Created      bool   `json:"created"`
}

func (op *writeOp) run(ctx context.Context, c *call) (any, error) {
	t := &c.targets[0]
	unlock := c.tool.s.locks.lock([]string{t.real})
	defer unlock()
	s, err := openStage(t, c.open, true, false, max(c.limits.writeBytes, c.limits.readFileBytes))
	if err != nil {
		return nil, err
	}
	defer s.close()
	if err := s.checkMatch("ifMatchSha256", op.ifMatch); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, wire.Errorf(wire.CodeTimeout, "fs.write was cancelled before it changed anything: %v", err)
	}
	s.content = []byte(op.content)
	if err := commit([]*stage{s}); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(s.content)
	return &WriteData{
		Path:         display(t, ""),
		BytesWritten: len(s.content),
		SHA256After:  hexSum(sum[:]),
		SHA256Before: s.sumPrev,
		Created:      !s.existed,
	}, nil
}
