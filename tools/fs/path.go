package fstool

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/tools/internal/strictjson"
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
	links      []string // the symlinks resolution went through (absolute paths)
	brokenLink bool     // a component is a symlink that does not resolve
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

// resolveAbs fills in the real path of an absolute path (resolvePath) and
// what exists there: facts for the policy, which decides on the real path.
// Enforce then opens exactly that real path below its grant, without
// following any symlink, and refuses the path if a symlink it went through
// lies inside a grant (links inside grants are never followed).
func (p *pathRef) resolveAbs() {
	r := resolvePath(p.abs)
	p.real, p.links, p.brokenLink = r.real, r.links, r.broken
	if r.exists {
		p.exists = true
		p.kind = kindOfType(fileType(&r.st))
		p.size = r.st.Size
	}
}

// within reports whether p lies in dir, comparing whole segments. Both are
// clean and absolute.
func within(p, dir string) bool {
	if dir == "/" || p == dir {
		return true
	}
	return len(p) > len(dir) && p[len(dir)] == '/' && p[:len(dir)] == dir
}

// grant is one decision grant whose directory exists: its real path and
// the identity of that directory, which every open of it must find again.
type grant struct {
	wire.FSGrant        // Path as the policy gave it
	real         string // real path of the directory
	id           ident
	links        []string // symlinks the grant's path went through
}

// resolveGrants keeps the grants that are usable: absolute, a known mode,
// an existing directory, and not reached through a symlink inside a
// writable grant (the agent could repoint that link: a read-only grant at
// /srv/work/vendor, a link in the rw grant /srv/work, would otherwise
// grant whatever the agent points it at), nor holding the gateway's
// temporary directory, where every call keeps its private run directory
// (sandbox.CheckNotPrivate: code.run's code and bridge FIFOs, other
// principals' too). Anything else grants nothing (fail closed).
func resolveGrants(in []wire.FSGrant, cache *resolveCache) []grant {
	out := make([]grant, 0, len(in))
	for _, g := range in {
		if !path.IsAbs(g.Path) || (g.Mode != wire.ModeRead && g.Mode != wire.ModeReadWrite) {
			continue
		}
		r := cache.get(path.Clean(g.Path), true)
		if !r.exists || r.broken || fileType(&r.st) != unix.S_IFDIR {
			continue
		}
		if sandbox.CheckNotPrivate(r.real) != nil || sandbox.CheckNotPrivate(path.Clean(g.Path)) != nil {
			continue
		}
		out = append(out, grant{FSGrant: g, real: r.real, id: identOf(&r.st), links: r.links})
	}
	kept := out[:0]
	for i, g := range out {
		if !linkInWritable(g.links, out, i) {
			kept = append(kept, g)
		}
	}
	return kept
}

// linkInWritable reports whether one of links lies inside a rw grant other
// than grants[self].
func linkInWritable(links []string, grants []grant, self int) bool {
	for _, l := range links {
		for j, o := range grants {
			if j != self && o.Mode == wire.ModeReadWrite && within(l, o.real) {
				return true
			}
		}
	}
	return false
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

// outermost returns the shortest grant path holding p: secret-shaped names
// are looked for below it, so that a grant nested at a secret-shaped name
// does not unmask it.
func outermost(p string, grants []grant) string {
	best := ""
	for _, g := range grants {
		if within(p, g.real) && (best == "" || len(g.real) < len(best)) {
			best = g.real
		}
	}
	return best
}

// target is a path held against the grants: the grant it falls in and the
// path below that grant's directory, which is all that is ever opened;
// and, once Enforce opened it, the descriptor Run works on.
type target struct {
	ref   *pathRef
	grant grant
	rel   string // relative to grant.real, "." for the grant itself
	real  string // grant.real joined with rel

	// Set by Enforce (open.go).
	fd      int         // the pinned descriptor (-1: none): the file, the directory, or for writes the parent
	st      unix.Stat_t // fstat of fd
	base    string      // writes: the file's name in fd
	missing []string    // writes: directories below fd still to create
	later   error       // what Run reports instead (not_found, invalid_input, ...)
}

// enforcePath maps a path to its grant and applies the rules that depend
// on the path alone. Errors follow the contract: unknown alias, a symlink
// inside a grant, a symlink leading out or a broken one is
// sandbox_violation; a plain path outside every grant, a write under a
// read-only grant, a denied path or secret-shaped name, and the autorun
// guard are fs_denied.
func enforcePath(p *pathRef, grants []grant, deny *denyList, write bool) (target, error) {
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
		// Lexical: nothing below the grant's directory is resolved, and
		// the walk refuses any symlink on the way.
		p.abs = path.Join(g.real, p.rel)
		p.real = p.abs
	}
	// A symlink inside a grant is refused before anything is said about
	// where it leads: its target, and whether that exists, are host facts
	// an agent that planted the link must not learn (no existence oracle).
	for _, l := range p.links {
		for _, o := range grants {
			if within(l, o.real) {
				return target{}, inGrantLink(p, l)
			}
		}
	}
	lexicallyInside := false
	for _, g := range grants {
		if within(p.abs, g.real) || within(p.abs, path.Clean(g.Path)) {
			lexicallyInside = true
			break
		}
	}
	if !lexicallyInside {
		if _, ok := mostSpecific(p.real, grants); !ok || p.brokenLink {
			// One answer for every path outside the grants, in the words the
			// caller used: whether it exists, is a link, or where it leads
			// is not said.
			return target{}, &wire.Error{Code: wire.CodeFSDenied,
				Message: fmt.Sprintf("%s %q is outside the granted paths; use a path inside %s", p.field, p.raw, grantList(grants)),
				Details: map[string]any{"field": p.field, "path": p.raw}}
		}
	}
	if p.brokenLink {
		return target{}, &wire.Error{Code: wire.CodeSandboxViolation,
			Message: fmt.Sprintf("%s %q passes through a symlink that does not resolve; refused because it could point anywhere", p.field, p.raw),
			Details: map[string]any{"field": p.field, "path": p.raw}}
	}
	g, ok := mostSpecific(p.real, grants)
	if !ok {
		return target{}, escape(p)
	}
	if write && g.Mode != wire.ModeReadWrite {
		return target{}, &wire.Error{Code: wire.CodeFSDenied,
			Message: fmt.Sprintf("%s %s is under the read-only grant %s; writes need a grant with mode rw", p.field, p.real, g.real),
			Details: map[string]any{"field": p.field, "path": p.real, "grant": g.real}}
	}
	rel := "."
	if p.real != g.real {
		rel = strings.TrimPrefix(p.real, g.real)
		rel = strings.TrimPrefix(rel, "/")
	}
	if outer := outermost(p.real, grants); outer != p.real {
		if err := checkSecretNames(p, strings.TrimPrefix(strings.TrimPrefix(p.real, outer), "/")); err != nil {
			return target{}, err
		}
	}
	if e, ok := deny.byPath(p.real); ok {
		return target{}, deniedByPath(p, e)
	}
	if write {
		if err := checkAutorun(p, g, rel); err != nil {
			return target{}, err
		}
	}
	return target{ref: p, grant: g, rel: rel, real: p.real, fd: -1}, nil
}

func escape(p *pathRef) *wire.Error {
	return &wire.Error{Code: wire.CodeSandboxViolation,
		Message: fmt.Sprintf("%s %q resolves through a symlink to outside its grant; symlinks are not followed", p.field, p.raw),
		Details: map[string]any{"field": p.field, "path": p.raw}}
}

func inGrantLink(p *pathRef, link string) *wire.Error {
	return &wire.Error{Code: wire.CodeSandboxViolation,
		Message: fmt.Sprintf("%s %q passes through the symlink %s inside a grant; the file tools never follow a symlink below a grant's directory: name the file by its real path", p.field, p.raw, link),
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

// fsError maps an error from an operation on t to a contract error.
// Whatever the kernel refused, nothing outside the grant was touched.
func fsError(t *target, op string, err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	field := t.ref.field
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV), errors.Is(err, errBadName):
		return symlinkViolation(t)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR):
		return &wire.Error{Code: wire.CodeNotFound,
			Message: fmt.Sprintf("%s %q does not exist", field, t.ref.raw),
			Details: map[string]any{"field": field, "path": t.ref.raw}}
	case errors.Is(err, fs.ErrPermission), errors.Is(err, unix.EROFS):
		return &wire.Error{Code: wire.CodeFSDenied,
			Message: fmt.Sprintf("%s %q: the gateway was refused %s by the operating system", field, t.ref.raw, op),
			Details: map[string]any{"field": field, "path": t.ref.raw}}
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.EFBIG):
		return &wire.Error{Code: wire.CodeWriteLimit,
			Message: fmt.Sprintf("%s %q: %s failed, the disk or quota is full: %v", field, t.ref.raw, op, unwrapPathErr(err)),
			Details: map[string]any{"field": field, "path": t.ref.raw}}
	}
	return &wire.Error{Code: wire.CodeInternal,
		Message: fmt.Sprintf("%s %q: %s failed: %v", field, t.ref.raw, op, unwrapPathErr(err)),
		Details: map[string]any{"field": field, "path": t.ref.raw}}
}

// symlinkViolation is the error for a symlink met on the way to t: below a
// grant's directory no symlink is followed, whether it was there when the
// path was checked or swapped in since.
func symlinkViolation(t *target) *wire.Error {
	return &wire.Error{Code: wire.CodeSandboxViolation,
		Message: fmt.Sprintf("%s %q passes through a symlink below its grant (it may have been swapped in); the file tools never follow symlinks inside a grant", t.ref.field, t.ref.raw),
		Details: map[string]any{"field": t.ref.field, "path": t.ref.raw}}
}

// changedViolation is the error for a file or directory replaced while it
// was being opened.
func changedViolation(t *target) *wire.Error {
	return &wire.Error{Code: wire.CodeSandboxViolation,
		Message: fmt.Sprintf("%s %q was replaced while it was being opened; refused", t.ref.field, t.ref.raw),
		Details: map[string]any{"field": t.ref.field, "path": t.ref.raw}}
}

// unwrapPathErr drops the path from a *PathError so messages do not repeat
// it (and never leak a path outside the grant).
func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// display is how a path below t is shown to the caller: in the form the
// caller used (alias or absolute), so it can be passed back as is.
func display(t *target, sub string) string {
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

func kindOfType(typ uint32) string {
	switch typ {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	}
	return "other"
}
