package fstool

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/portcullis/portcullis/tools/fs/udiff"
	"github.com/portcullis/portcullis/tools/internal/strictjson"
	"github.com/portcullis/portcullis/wire"
)

const patchDescription = "Change files inside read-write grants, all or nothing. Either patch: a unified diff " +
	"(one or many files and hunks; \"--- /dev/null\" creates a file, \"+++ /dev/null\" deletes one; context and removed " +
	"lines must match exactly), or updateFrontmatter: front-matter operations on the Markdown file at path " +
	"(\"stepsCompleted.append\": [..] adds to a list, strings once; \"variables.set\": {..} merges; \"key\": value sets; null removes; " +
	"also accepted as patch: {operation: \"updateFrontmatter\", update, ifMatchSha256}). File names in the patch are absolute or @alias/rel, or relative to path when path is given; " +
	"git's a/ and b/ prefixes are removed. ifMatchSha256 is the sha256 fs.read returned for the file (a string when one file " +
	"changes, or an object keyed by the file names as written in the patch). Returns files [{path, bytesWritten, sha256After}]."

const patchSchema = `{
  "type": "object",
  "properties": {
    "patch": {
      "description": "Unified diff (file names absolute, @alias/rel, or relative to path); or {operation: \"updateFrontmatter\", update, ifMatchSha256} for the Markdown file at path.",
      "anyOf": [
        {"type": "string"},
        {"type": "object", "properties": {
          "operation": {"const": "updateFrontmatter"},
          "update": {"type": "object", "description": "Front-matter operations: key.append (list), key.set or key (value; an object merges into a mapping), key.merge (object); null removes.", "additionalProperties": true},
          "ifMatchSha256": {"type": ["string", "null"]}
        }, "required": ["operation", "update"], "additionalProperties": false}
      ]
    },
    "path": {"type": "string", "description": "With patch: the directory file names are relative to (absolute or @alias/rel). With updateFrontmatter: the Markdown file."},
    "updateFrontmatter": {"type": "object", "description": "Front-matter operations on the Markdown file at path: \"key\" or \"key.set\" sets a value (an object merges into a mapping; null removes), \"key.append\" adds to a list (strings once), \"key.merge\" merges an object.", "additionalProperties": true},
    "ifMatchSha256": {
      "description": "Precondition: the file's current sha256 (\"\" = must not exist), or an object {fileName: sha256} for several files.",
      "anyOf": [{"type": "string"}, {"type": "object", "additionalProperties": {"type": "string"}}, {"type": "null"}]
    }
  },
  "additionalProperties": false
}`

// MaxPatchBytes bounds a patch at Prepare.
const MaxPatchBytes = 16 << 20

// patchFile is one file a patch changes.
type patchFile struct {
	name    string // as written in the patch, prefixes removed: the ifMatchSha256 key
	ref     *pathRef
	diff    *udiff.File // nil for updateFrontmatter
	ifMatch *string
}

type patchOp struct {
	raw         string         // the patch, for its digest
	frontmatter map[string]any // updateFrontmatter
	files       []*patchFile
}

func preparePatch(obj strictjson.Object) (operation, error) {
	hasPatch, hasFM := has(obj, "patch"), has(obj, "updateFrontmatter")
	fmField := "updateFrontmatter"
	var fmRaw json.RawMessage
	if hasFM {
		fmRaw = obj.Values["updateFrontmatter"]
	}
	if v := bytes.TrimSpace(obj.Values["patch"]); hasPatch && len(v) > 0 && v[0] == '{' {
		// Seed 001's shape: patch {operation: "updateFrontmatter", update,
		// ifMatchSha256}.
		if hasFM {
			return nil, strictjson.Invalid("updateFrontmatter", "give either patch or updateFrontmatter, not both")
		}
		po, err := strictjson.Decode(v, "patch")
		if err != nil {
			return nil, err
		}
		opName, err := str(po, "operation", 64)
		if err != nil || opName != "updateFrontmatter" {
			return nil, strictjson.Invalid("patch.operation", "patch.operation must be \"updateFrontmatter\" (or give patch as a unified diff string)")
		}
		if !has(po, "update") {
			return nil, strictjson.Invalid("patch.update", "patch.update is required: the front-matter operations (stepsCompleted.append, variables.set, ...)")
		}
		if has(po, "ifMatchSha256") {
			if has(obj, "ifMatchSha256") {
				return nil, strictjson.Invalid("patch.ifMatchSha256", "give ifMatchSha256 once, in patch or beside it")
			}
			obj.Values["ifMatchSha256"] = po.Values["ifMatchSha256"]
			obj.Keys = append(obj.Keys, "ifMatchSha256")
		}
		hasPatch, hasFM, fmField, fmRaw = false, true, "patch.update", po.Values["update"]
	}
	switch {
	case hasPatch && hasFM:
		return nil, strictjson.Invalid("updateFrontmatter", "give either patch or updateFrontmatter, not both")
	case !hasPatch && !hasFM:
		return nil, strictjson.Invalid("patch", "patch is required: a unified diff (or use updateFrontmatter with path)")
	}
	op := &patchOp{}
	var base *pathRef
	if has(obj, "path") {
		var err error
		if base, err = pathField(obj, "path"); err != nil {
			return nil, err
		}
	}
	if hasFM {
		if base == nil {
			return nil, strictjson.Invalid("path", "path is required with updateFrontmatter: the Markdown file to change")
		}
		fm, err := decodeFrontmatterArg(fmRaw, fmField)
		if err != nil {
			return nil, err
		}
		op.frontmatter = fm
		op.files = []*patchFile{{name: base.raw, ref: base}}
	} else {
		s, err := str(obj, "patch", MaxPatchBytes)
		if err != nil {
			return nil, err
		}
		op.raw = s
		files, err := udiff.Parse(s)
		if err != nil {
			return nil, strictjson.Invalid("patch", "patch is not a valid unified diff: %v", err)
		}
		for i := range files {
			pf, err := patchTarget(&files[i], base)
			if err != nil {
				return nil, err
			}
			for _, other := range op.files {
				if other.name == pf.name {
					return nil, strictjson.Invalid("patch", "patch changes %s twice; merge its hunks into one file section", pf.name)
				}
			}
			op.files = append(op.files, pf)
		}
	}
	if err := op.decodeIfMatch(obj); err != nil {
		return nil, err
	}
	return op, nil
}

// patchTarget names the file a diff section changes. Renames are refused.
func patchTarget(f *udiff.File, base *pathRef) (*patchFile, error) {
	oldN, newN := f.OldName, f.NewName
	// git's a/ and b/ prefixes: removed when both sides carry them (a
	// /dev/null side counts as carrying them).
	hasA := oldN == udiff.DevNull || strings.HasPrefix(oldN, "a/")
	hasB := newN == udiff.DevNull || strings.HasPrefix(newN, "b/")
	if hasA && hasB {
		if oldN != udiff.DevNull {
			oldN = oldN[2:]
		}
		if newN != udiff.DevNull {
			newN = newN[2:]
		}
	}
	name := newN
	switch {
	case newN == udiff.DevNull:
		name = oldN
	case oldN != udiff.DevNull && oldN != newN:
		return nil, strictjson.Invalid("patch", "patch renames %s to %s; renames are not supported, patch files in place", oldN, newN)
	}
	full := name
	if base != nil {
		if strings.HasPrefix(name, "/") || strings.HasPrefix(name, "@") {
			return nil, strictjson.Invalid("patch", "patch names %s, but with path given file names must be relative to it", name)
		}
		full = strings.TrimSuffix(base.raw, "/") + "/" + name
	}
	ref, err := parsePath("patch", full)
	if err != nil {
		return nil, err
	}
	return &patchFile{name: name, ref: ref, diff: f}, nil
}

// decodeIfMatch reads ifMatchSha256: a string (one file only) or an object
// keyed by file name.
func (op *patchOp) decodeIfMatch(obj strictjson.Object) error {
	const key = "ifMatchSha256"
	if !has(obj, key) {
		return nil
	}
	v := bytes.TrimSpace(obj.Values[key])
	if len(v) > 0 && v[0] == '"' {
		if len(op.files) != 1 {
			return strictjson.Invalid(key, "%s is a string but the patch changes %d files; give an object {fileName: sha256}", key, len(op.files))
		}
		m, err := ifMatchField(obj, key)
		op.files[0].ifMatch = m
		return err
	}
	m, err := strictjson.Decode(v, key)
	if err != nil {
		return err
	}
	for _, k := range m.Keys {
		i := slices.IndexFunc(op.files, func(f *patchFile) bool { return f.name == k })
		if i < 0 {
			return strictjson.Invalid(key+"."+k, "%s names %q, which the patch does not change", key, k)
		}
		p, err := ifMatchField(m, k)
		if err != nil {
			return strictjson.Invalid(key+"."+k, "%s.%s must be 64 hex digits, or \"\" for a file that must not exist", key, k)
		}
		op.files[i].ifMatch = p
	}
	return nil
}

func (op *patchOp) paths() []*pathRef {
	ps := make([]*pathRef, len(op.files))
	for i, f := range op.files {
		ps[i] = f.ref
	}
	return ps
}

// redactArgs keeps the patch's size and digest, and of updateFrontmatter
// its keys, never the text.
func (op *patchOp) redactArgs(args map[string]any) {
	if op.frontmatter != nil {
		b, _ := json.Marshal(op.frontmatter)
		facts := contentFacts(string(b))
		keys := []any{}
		for _, k := range slices.Sorted(maps.Keys(op.frontmatter)) {
			keys = append(keys, k)
		}
		facts["keys"] = keys
		if _, ok := args["updateFrontmatter"]; ok {
			args["updateFrontmatter"] = facts
		} else { // seed 001's shape: patch {operation, update, ifMatchSha256}
			p := map[string]any{"operation": "updateFrontmatter", "update": facts}
			if old, ok := args["patch"].(map[string]any); ok && old["ifMatchSha256"] != nil {
				p["ifMatchSha256"] = old["ifMatchSha256"]
			}
			args["patch"] = p
		}
		return
	}
	args["patch"] = contentFacts(op.raw)
}

func (op *patchOp) resolvedExtra(m map[string]any) {
	m["files"] = len(op.files)
	if op.frontmatter != nil {
		m["operation"] = "updateFrontmatter"
	} else {
		m["operation"] = "patch"
		m["bytes"] = len(op.raw)
	}
}

// PatchFileResult is one changed file in fs.apply_patch's output.
type PatchFileResult struct {
	Path         string `json:"path"`
	BytesWritten int    `json:"bytesWritten"`
	SHA256Before string `json:"sha256Before,omitempty"`
	SHA256After  string `json:"sha256After,omitempty"` // "" when deleted
	Created      bool   `json:"created"`
	Deleted      bool   `json:"deleted"`
}

// PatchData is fs.apply_patch's output.data.
type PatchData struct {
	Files []PatchFileResult `json:"files"`
	// Path, SHA256Before and SHA256After repeat the one file of an
	// updateFrontmatter at the top level, as seed 001 returns them.
	Path         string `json:"path,omitempty"`
	SHA256Before string `json:"sha256Before,omitempty"`
	SHA256After  string `json:"sha256After,omitempty"`
}

func (op *patchOp) run(ctx context.Context, c *call) (any, error) {
	reals := make([]string, len(c.targets))
	for i, t := range c.targets {
		reals[i] = t.real
	}
	for i := range reals {
		for j := i + 1; j < len(reals); j++ {
			if reals[i] == reals[j] {
				return nil, strictjson.Invalid("patch", "%s and %s are the same file", c.targets[i].ref.raw, c.targets[j].ref.raw)
			}
		}
	}
	unlock := c.tool.s.locks.lock(reals)
	defer unlock()
	stages := make([]*stage, 0, len(op.files))
	defer func() {
		for _, s := range stages {
			s.close()
		}
	}()
	out := &PatchData{Files: []PatchFileResult{}}
	for i, pf := range op.files {
		t := &c.targets[i]
		creating := pf.diff != nil && pf.diff.OldName == udiff.DevNull
		s, err := openStage(t, c.open, creating, true, max(c.limits.writeBytes, c.limits.readFileBytes))
		if err != nil {
			return nil, err
		}
		stages = append(stages, s)
		field := "ifMatchSha256"
		if len(op.files) > 1 {
			field += "." + pf.name
		}
		if err := s.checkMatch(field, pf.ifMatch); err != nil {
			return nil, err
		}
		switch {
		case creating && s.existed:
			return nil, &wire.Error{Code: wire.CodePreconditionFailed,
				Message: fmt.Sprintf("the patch creates %s, which already exists; patch it against its current content instead", t.ref.raw),
				Details: map[string]any{"field": "patch", "path": t.ref.raw, "actual": s.sumPrev}}
		case !creating && !s.existed:
			return nil, &wire.Error{Code: wire.CodeNotFound,
				Message: fmt.Sprintf("%s does not exist; to create it, use \"--- /dev/null\" or fs.write", t.ref.raw),
				Details: map[string]any{"field": "patch", "path": t.ref.raw}}
		}
		var next string
		if op.frontmatter != nil {
			next, err = updateFrontmatter(string(s.before), op.frontmatter)
		} else {
			next, err = udiff.Apply(string(s.before), *pf.diff)
		}
		if err != nil {
			var de *udiff.Error
			if errors.As(err, &de) || op.frontmatter == nil {
				return nil, &wire.Error{Code: wire.CodePreconditionFailed,
					Message: fmt.Sprintf("%s: %v; nothing was changed", t.ref.raw, err),
					Details: map[string]any{"field": "patch", "path": t.ref.raw}}
			}
			return nil, err
		}
		if int64(len(next)) > c.limits.writeBytes {
			return nil, &wire.Error{Code: wire.CodeWriteLimit,
				Message: fmt.Sprintf("%s would be %d bytes; this policy lets a file be written up to %d bytes (limits.fsize_bytes); nothing was changed", t.ref.raw, len(next), c.limits.writeBytes),
				Details: map[string]any{"field": "patch", "path": t.ref.raw, "bytes": len(next), "limit": c.limits.writeBytes}}
		}
		s.content = []byte(next)
		s.remove = pf.diff != nil && pf.diff.NewName == udiff.DevNull
		r := PatchFileResult{Path: display(t, ""), SHA256Before: s.sumPrev, Created: !s.existed, Deleted: s.remove}
		if !s.remove {
			sum := sha256.Sum256(s.content)
			r.BytesWritten, r.SHA256After = len(s.content), hexSum(sum[:])
		}
		out.Files = append(out.Files, r)
	}
	if err := ctx.Err(); err != nil {
		return nil, wire.Errorf(wire.CodeTimeout, "fs.apply_patch was cancelled before it changed anything: %v", err)
	}
	if err := commit(stages); err != nil {
		return nil, err
	}
	if op.frontmatter != nil && len(out.Files) == 1 {
		f := out.Files[0]
		out.Path, out.SHA256Before, out.SHA256After = f.Path, f.SHA256Before, f.SHA256After
	}
	return out, nil
}
