package fstool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/portcullis/portcullis/backends/internal/strictjson"
	"github.com/portcullis/portcullis/wire"
)

// MaxPathBytes bounds one path argument (PATH_MAX).
const MaxPathBytes = 4096

// pathRef is one path argument after syntax checks and normalization, before
// any grant is known (Prepare runs before the policy).
type pathRef struct {
	field string // input field it came from, for error details
	raw   string // as the caller wrote it

	// Exactly one of alias and abs is set.
	alias string // "@name" for an alias path
	rel   string // clean path below the alias ("." for the alias itself)
	abs   string // lexically clean absolute path

	// For absolute paths, from Prepare: the real path (symlinks of the
	// longest existing prefix resolved, the rest appended) and what exists
	// there. For alias paths these are filled in by Enforce.
	real       string
	brokenLink bool // a component is a symlink that does not resolve
	exists     bool
	kind       string // "file", "dir" or "other" when exists
	size       int64
}

// parsePath checks the syntax of a path argument: absolute or @alias/rel,
// valid UTF-8, no NUL, no ".." segment. It touches no file.
//
// ".." is refused outright rather than cleaned away: a caller who writes it
// is trying to leave the place it named, and cleaning "/srv/x/../../etc"
// lexically would hide the attempt from the receipt.
func parsePath(field, s string) (*pathRef, error) {
	const want = "paths are absolute (/srv/work/file.txt) or start with a granted alias (@project/src/main.go)"
	switch {
	case s == "":
		return nil, strictjson.Invalid(field, "%s is empty; %s", field, want)
	case len(s) > MaxPathBytes:
		return nil, strictjson.Invalid(field, "%s is %d bytes; at most %d are accepted", field, len(s), MaxPathBytes)
	case strings.IndexByte(s, 0) >= 0:
		return nil, strictjson.Invalid(field, "%s contains a NUL byte; %s", field, want)
	case !utf8.ValidString(s):
		return nil, strictjson.Invalid(field, "%s is not valid UTF-8; %s", field, want)
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == ".." {
			return nil, &wire.Error{Code: wire.CodeSandboxViolation,
				Message: fmt.Sprintf("%s %q has a \"..\" segment; traversal is refused: name the file by its absolute path or below an alias", field, s),
				Details: map[string]any{"field": field, "path": s}}
		}
	}
	p := &pathRef{field: field, raw: s}
	switch {
	case s[0] == '/':
		p.abs = path.Clean(s)
	case s[0] == '@':
		name, rest, _ := strings.Cut(s, "/")
		if len(name) < 2 || strings.ContainsRune(name[1:], '@') {
			return nil, strictjson.Invalid(field, "%s %q does not start with a valid alias; %s", field, s, want)
		}
		p.alias = name
		p.rel = path.Clean("./" + rest)
		if strings.HasPrefix(p.rel, "/") { // "@a//x" cleans to "x"; keep it relative
			p.rel = strings.TrimLeft(p.rel, "/")
		}
	default:
		return nil, strictjson.Invalid(field, "%s %q is relative; %s", field, s, want)
	}
	return p, nil
}

// resolveAbs fills in the real path of an absolute path: the longest
// existing prefix with its symlinks resolved, the missing rest appended. It
// is a fact for the policy and a first check for Enforce; confinement itself
// is done by the kernel at Run (os.Root), whatever changes in between.
func (p *pathRef) resolveAbs() {
	p.real, p.brokenLink = realPath(p.abs)
	if fi, err := os.Lstat(p.real); err == nil {
		p.exists = true
		p.kind = kindOf(fi.Mode())
		p.size = fi.Size()
	}
}

// realPath resolves abs as far as it exists. broken is set when a component
// exists as a symlink that does not resolve (dangling, looping, or pointing
// through a non-directory): such a link could be made to point anywhere
// later, so callers refuse it.
func realPath(abs string) (real string, broken bool) {
	p, rest := abs, ""
	for {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(r, rest), broken
		}
		if fi, lerr := os.Lstat(p); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			broken = true
		}
		if p == "/" {
			return abs, broken
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = filepath.Dir(p)
	}
}

// within reports whether p lies in dir, comparing whole segments. Both are
// clean and absolute.
func within(p, dir string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}

// grant is one decision grant whose directory exists, with its real path and
// the identity of that directory, so Run can tell if it was swapped.
type grant struct {
	wire.FSGrant        // Path as the policy gave it
	real         string // real path of the directory
	info         os.FileInfo
}

// resolveGrants keeps the grants that are usable: absolute, a known mode,
// an existing directory. Anything else grants nothing (fail closed).
func resolveGrants(in []wire.FSGrant) []grant {
	out := make([]grant, 0, len(in))
	for _, g := range in {
		if !filepath.IsAbs(g.Path) || (g.Mode != wire.ModeRead && g.Mode != wire.ModeReadWrite) {
			continue
		}
		real, err := filepath.EvalSymlinks(g.Path)
		if err != nil {
			continue
		}
		fi, err := os.Stat(real)
		if err != nil || !fi.IsDir() {
			continue
		}
		out = append(out, grant{FSGrant: g, real: filepath.Clean(real), info: fi})
	}
	return out
}

// mostSpecific returns the grant whose real path is the longest one holding
// p: with /srv rw and /srv/secrets r, /srv/secrets/x is read-only.
func mostSpecific(p string, grants []grant) (grant, bool) {
	best, found := grant{}, false
	for _, g := range grants {
		if within(p, g.real) && (!found || len(g.real) > len(best.real)) {
			best, found = g, true
		}
	}
	return best, found
}

// target is a path held against the grants: the grant it falls in and the
// path below that grant's directory, which is all Run ever opens.
type target struct {
	ref   *pathRef
	grant grant
	rel   string // relative to grant.real, "." for the grant itself
	real  string // grant.real joined with rel
}

// enforcePath maps a path to its grant. Errors follow the contract:
// unknown alias, a symlink leading out, or a broken symlink is
// sandbox_violation; a plain path outside every grant is fs_denied; a write
// under a read-only grant is fs_denied.
func enforcePath(p *pathRef, grants []grant, write bool) (target, error) {
	if p.alias != "" {
		var g *grant
		for i := range grants {
			if grants[i].Alias == p.alias {
				g = &grants[i]
				break
			}
		}
		if g == nil {
			return target{}, &wire.Error{Code: wire.CodeSandboxViolation,
				Message: fmt.Sprintf("%s names the alias %s, which the policy did not grant (unknown mount); granted aliases: %s", p.field, p.alias, aliasList(grants)),
				Details: map[string]any{"field": p.field, "alias": p.alias}}
		}
		p.abs = filepath.Join(g.real, p.rel)
		p.resolveAbs()
		if !within(p.real, g.real) {
			return target{}, escape(p)
		}
	}
	if p.brokenLink {
		return target{}, &wire.Error{Code: wire.CodeSandboxViolation,
			Message: fmt.Sprintf("%s %q passes through a symlink that does not resolve; refused because it could point anywhere", p.field, p.raw),
			Details: map[string]any{"field": p.field, "path": p.raw}}
	}
	g, ok := mostSpecific(p.real, grants)
	if !ok {
		for _, g := range grants {
			if within(p.abs, g.real) || within(p.abs, filepath.Clean(g.Path)) {
				return target{}, escape(p)
			}
		}
		return target{}, &wire.Error{Code: wire.CodeFSDenied,
			Message: fmt.Sprintf("%s %s is outside the granted paths; use a path inside %s", p.field, p.real, grantList(grants)),
			Details: map[string]any{"field": p.field, "path": p.real}}
	}
	if write && g.Mode != wire.ModeReadWrite {
		return target{}, &wire.Error{Code: wire.CodeFSDenied,
			Message: fmt.Sprintf("%s %s is under the read-only grant %s; writes need a grant with mode rw", p.field, p.real, g.real),
			Details: map[string]any{"field": p.field, "path": p.real, "grant": g.real}}
	}
	rel, err := filepath.Rel(g.real, p.real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return target{}, escape(p)
	}
	return target{ref: p, grant: g, rel: rel, real: p.real}, nil
}

func escape(p *pathRef) *wire.Error {
	return &wire.Error{Code: wire.CodeSandboxViolation,
		Message: fmt.Sprintf("%s %q resolves through a symlink to %s, outside its grant; symlinks may only point inside the grant", p.field, p.raw, p.real),
		Details: map[string]any{"field": p.field, "path": p.raw}}
}

func aliasList(grants []grant) string {
	var names []string
	for _, g := range grants {
		if g.Alias != "" {
			names = append(names, g.Alias)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func grantList(grants []grant) string {
	if len(grants) == 0 {
		return "the grants (the policy granted none)"
	}
	paths := make([]string, len(grants))
	for i, g := range grants {
		paths[i] = g.real
		if g.Alias != "" {
			paths[i] += " (" + g.Alias + ")"
		}
	}
	return strings.Join(paths, ", ")
}

// openRoot opens the grant's directory as an os.Root and checks it is the
// very directory Enforce saw: a grant path swapped for a symlink or another
// directory since then is refused.
func openRoot(g grant) (*os.Root, error) {
	r, err := os.OpenRoot(g.real)
	if err != nil {
		return nil, &wire.Error{Code: wire.CodeSandboxViolation,
			Message: fmt.Sprintf("the granted directory %s could not be opened: %v", g.real, unwrapPathErr(err)),
			Details: map[string]any{"grant": g.real}}
	}
	fi, err := r.Stat(".")
	if err != nil || !os.SameFile(fi, g.info) {
		r.Close()
		return nil, &wire.Error{Code: wire.CodeSandboxViolation,
			Message: fmt.Sprintf("the granted directory %s changed after it was checked", g.real),
			Details: map[string]any{"grant": g.real}}
	}
	return r, nil
}

// escapeMessage is the text of os.Root's unexported errPathEscapes.
// TestRootEscapeErrorIsRecognized pins it to the toolchain in use.
const escapeMessage = "path escapes from parent"

// isEscape reports whether err is os.Root refusing a path that leaves the
// root (a symlink pointing out, an absolute symlink) or a symlink loop.
func isEscape(err error) bool {
	if err == nil {
		return false
	}
	return strings.Contains(err.Error(), escapeMessage) || errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EXDEV)
}

// fsError maps an error from an os.Root operation on t to a contract error.
// Whatever the kernel refused, nothing outside the grant was touched.
func fsError(t target, op string, err error) *wire.Error {
	field := t.ref.field
	switch {
	case isEscape(err):
		return &wire.Error{Code: wire.CodeSandboxViolation,
			Message: fmt.Sprintf("%s %q leads outside its grant through a symlink (it may have been swapped in); refused", field, t.ref.raw),
			Details: map[string]any{"field": field, "path": t.ref.raw}}
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return &wire.Error{Code: wire.CodeNotFound,
			Message: fmt.Sprintf("%s %q does not exist", field, t.ref.raw),
			Details: map[string]any{"field": field, "path": t.ref.raw}}
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return &wire.Error{Code: wire.CodeFSDenied,
			Message: fmt.Sprintf("%s %q: the gateway was refused %s by the operating system", field, t.ref.raw, op),
			Details: map[string]any{"field": field, "path": t.ref.raw}}
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EFBIG):
		return &wire.Error{Code: wire.CodeWriteLimit,
			Message: fmt.Sprintf("%s %q: %s failed, the disk or quota is full: %v", field, t.ref.raw, op, unwrapPathErr(err)),
			Details: map[string]any{"field": field, "path": t.ref.raw}}
	}
	return &wire.Error{Code: wire.CodeInternal,
		Message: fmt.Sprintf("%s %q: %s failed: %v", field, t.ref.raw, op, unwrapPathErr(err)),
		Details: map[string]any{"field": field, "path": t.ref.raw}}
}

// unwrapPathErr drops the path from a *PathError so messages do not repeat
// it (and never leak a path outside the grant Root may have seen).
func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// display is how a path below t is shown to the caller: in the form the
// caller used (alias or absolute), so it can be passed back as is.
func display(t target, sub string) string {
	if t.ref.alias != "" {
		rel := path.Join(t.ref.rel, sub)
		if rel == "." {
			return t.ref.alias
		}
		return t.ref.alias + "/" + rel
	}
	return path.Join(t.real, sub)
}

// resolvedFacts is a path as the policy sees it in input.resolved.
func (p *pathRef) resolvedFacts() map[string]any {
	m := map[string]any{
		"path":  p.real, // "" for alias paths: the alias is mapped after the policy
		"alias": p.alias,
		"rel":   p.rel,
		"name":  path.Base(p.name()),
	}
	if p.alias == "" {
		m["exists"] = p.exists
		if p.exists {
			m["type"] = p.kind
			m["size"] = p.size
		}
	}
	return m
}

func (p *pathRef) name() string {
	if p.alias != "" {
		if p.rel == "." {
			return p.alias
		}
		return p.rel
	}
	return p.real
}

func kindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	}
	return "other"
}
