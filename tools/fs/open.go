package fstool

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/wire"
)

// Opening a target is one step with checking it. Enforce opens the grant's
// directory (checking it is the directory resolved), then walks the path
// below it one component at a time with openComponent (no symlink, nothing
// above the directory), checks every directory it opens against the
// identities of denied paths and, for writes, of read-only grants' roots,
// and keeps the descriptor Run will use: the file for fs.read, the
// directory for fs.list and fs.search, the parent directory for fs.write
// and fs.apply_patch. A symlink swapped in, a directory renamed in, or a
// file replaced between the checks and Run cannot change what Run touches.

// kind is what a tool needs at the end of the path.
type kind int

const (
	wantFile      kind = iota // fs.read: a regular file
	wantDir                   // fs.list: a directory
	wantFileOrDir             // fs.search
	wantParent                // fs.write, fs.apply_patch: the parent directory
)

// opener holds what a walk checks against.
type opener struct {
	deny  *denyList
	ro    []watched // roots of read-only grants; nil unless writing
	write bool
	fds   *fdSet
	cache *resolveCache
}

// checkDir refuses a directory the walk opened that is a denied one, or,
// when writing, a read-only grant's root met under another name.
func (o *opener) checkDir(t *target, st *unix.Stat_t) error {
	if w, ok := o.deny.byID(st); ok {
		return deniedByID(t.ref, w)
	}
	if o.write {
		id := identOf(st)
		for _, w := range o.ro {
			if w.id == id {
				return &wire.Error{Code: wire.CodeFSDenied,
					Message: fmt.Sprintf("%s %q leads into %s, the directory of a read-only grant, under another name (renamed or mounted there); writes there are refused", t.ref.field, t.ref.raw, w.path),
					Details: map[string]any{"field": t.ref.field, "path": t.ref.raw, "grant": w.path}}
			}
		}
	}
	return nil
}

// openGrantRoot opens g's directory by its real path with no symlink
// followed and checks its identity. A cached resolution that turned out
// stale is resolved afresh once; if the grant now resolves elsewhere, or
// its directory is still not the one resolved, the call is refused.
func (o *opener) openGrantRoot(g *grant) (int, error) {
	fd, err := openRootChecked(g)
	if err == nil {
		return fd, nil
	}
	if o.cache != nil {
		o.cache.forget(path.Clean(g.Path))
		if r := o.cache.get(path.Clean(g.Path), true); r.exists && r.real == g.real && fileType(&r.st) == unix.S_IFDIR {
			g.id = identOf(&r.st)
			if fd, err = openRootChecked(g); err == nil {
				return fd, nil
			}
		}
	}
	return -1, &wire.Error{Code: wire.CodeSandboxViolation,
		Message: fmt.Sprintf("the granted directory %s changed after it was checked (replaced, or swapped for a symlink)", g.real),
		Details: map[string]any{"grant": g.real}}
}

// openRootChecked opens g.real (no symlink followed) and checks that it is
// the directory g.id names.
func openRootChecked(g *grant) (int, error) {
	fd, err := openAbs(g.real, flagsDir)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := fstat(fd, &st); err != nil {
		closeFD(fd)
		return -1, err
	}
	if fileType(&st) != unix.S_IFDIR || identOf(&st) != g.id {
		closeFD(fd)
		return -1, errors.New("not the directory resolved")
	}
	return fd, nil
}

// walk opens the directories comps below dir, one component at a time,
// and checks each. It owns dir: every descriptor but the one returned is
// closed. It returns the deepest directory opened (dir itself when comps
// is empty) and how many of comps it opened; it stops early, without
// error, at a component that does not exist. last are the open flags of
// the final component (the others are only passed through). Errors are a
// *wire.Error for a refusal, else the system error for Run to report.
func (o *opener) walk(t *target, dir int, comps []string, last int) (int, int, error) {
	for i, c := range comps {
		flags := flagsSearch
		if i == len(comps)-1 {
			flags = last
		}
		next, err := openComponent(dir, c, flags, 0)
		if errors.Is(err, unix.ENOENT) {
			return dir, i, nil
		}
		if err != nil {
			err = classifyOpenError(t, dir, c, err)
			closeFD(dir)
			return -1, i, err
		}
		closeFD(dir)
		dir = next
		var st unix.Stat_t
		if err := fstat(dir, &st); err != nil {
			closeFD(dir)
			return -1, i, err
		}
		if fileType(&st) != unix.S_IFDIR {
			closeFD(dir)
			if fileType(&st) == unix.S_IFLNK {
				return -1, i, symlinkViolation(t)
			}
			return -1, i, unix.ENOTDIR
		}
		if err := o.checkDir(t, &st); err != nil {
			closeFD(dir)
			return -1, i, err
		}
	}
	return dir, len(comps), nil
}

// classifyOpenError tells a symlink (refused) from a component that is
// not a directory (not found) after an open failed with ELOOP or ENOTDIR.
func classifyOpenError(t *target, dir int, name string, err error) error {
	if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.EXDEV) && !errors.Is(err, errBadName) {
		return err
	}
	var st unix.Stat_t
	if errors.Is(err, unix.ENOTDIR) && statAt(dir, name, &st) == nil && fileType(&st) != unix.S_IFLNK {
		return err
	}
	return symlinkViolation(t)
}

// openTarget opens t for a tool wanting w. Refusals are returned; what the
// caller gets at Run (not_found, a directory where a file was wanted, ...)
// is left in t.later.
func (o *opener) openTarget(t *target, w kind) error {
	root, err := o.openGrantRoot(&t.grant)
	if err != nil {
		return err
	}
	var comps []string
	if t.rel != "." {
		comps = strings.Split(t.rel, "/")
	}
	if len(comps) == 0 {
		switch w {
		case wantFile:
			closeFD(root)
			t.later = notAFile(t, unix.S_IFDIR)
			return nil
		case wantParent:
			closeFD(root)
			t.later = &wire.Error{Code: wire.CodeInvalidInput,
				Message: fmt.Sprintf("%s %q is a granted directory itself; name a file inside it", t.ref.field, t.ref.raw),
				Details: map[string]any{"field": t.ref.field, "path": t.ref.raw}}
			return nil
		}
		return o.keep(t, root)
	}
	parents, base := comps[:len(comps)-1], comps[len(comps)-1]
	if w == wantDir {
		dir, n, err := o.walk(t, root, comps, flagsDir)
		switch {
		case err != nil:
			return o.later(t, err, n == len(comps)-1, w)
		case n < len(comps):
			closeFD(dir)
			t.later = fsError(t, "listing", unix.ENOENT)
			return nil
		}
		return o.keep(t, dir)
	}
	parentFlags := flagsSearch
	if w == wantParent {
		parentFlags = flagsDir // fsync after the rename needs a real descriptor
	}
	dir, n, err := o.walk(t, root, parents, parentFlags)
	if err != nil {
		return o.later(t, err, false, w)
	}
	if n < len(parents) {
		if w == wantParent {
			t.missing = parents[n:]
			t.base = base
			return o.keep(t, dir)
		}
		closeFD(dir)
		t.later = fsError(t, "opening", unix.ENOENT)
		return nil
	}
	var st unix.Stat_t
	if err := statAt(dir, base, &st); err != nil {
		if w == wantParent && errors.Is(err, unix.ENOENT) {
			t.base = base
			return o.keep(t, dir)
		}
		closeFD(dir)
		return o.later(t, err, true, w)
	}
	typ := fileType(&st)
	if typ == unix.S_IFLNK {
		closeFD(dir)
		return symlinkViolation(t)
	}
	if x, ok := o.deny.byID(&st); ok {
		closeFD(dir)
		return deniedByID(t.ref, x)
	}
	if w == wantParent {
		// Run checks the file itself again, under the write lock.
		t.base = base
		return o.keep(t, dir)
	}
	flags := flagsFile
	switch {
	case typ == unix.S_IFDIR && w == wantFileOrDir:
		flags = flagsDir
	case typ != unix.S_IFREG:
		// Never opened: opening a FIFO waits for a writer, opening a
		// device can act on it.
		closeFD(dir)
		t.later = notAFile(t, typ)
		return nil
	}
	fd, err := openComponent(dir, base, flags, 0)
	if err != nil {
		err = classifyOpenError(t, dir, base, err)
		closeFD(dir)
		return o.later(t, err, true, w)
	}
	closeFD(dir)
	return o.keepChecked(t, fd, &st)
}

// keepChecked keeps fd if it is still what statAt saw (a regular file or
// directory with the same identity): not swapped between the two.
func (o *opener) keepChecked(t *target, fd int, want *unix.Stat_t) error {
	if err := fstat(fd, &t.st); err != nil {
		closeFD(fd)
		t.later = fsError(t, "opening", err)
		return nil
	}
	if fileType(&t.st) != fileType(want) || identOf(&t.st) != identOf(want) {
		closeFD(fd)
		return changedViolation(t)
	}
	if fileType(&t.st) == unix.S_IFDIR {
		if err := o.checkDir(t, &t.st); err != nil {
			closeFD(fd)
			return err
		}
	}
	t.fd = fd
	o.fds.add(fd)
	return nil
}

// keep keeps the directory fd for Run, with its fstat.
func (o *opener) keep(t *target, fd int) error {
	if err := fstat(fd, &t.st); err != nil {
		closeFD(fd)
		t.later = fsError(t, "opening", err)
		return nil
	}
	t.fd = fd
	o.fds.add(fd)
	return nil
}

// later sorts a walk's error: refusals now, the rest for Run. atEnd says
// the error is about the last component, where "not a directory" means
// the caller named a file where a directory was wanted.
func (o *opener) later(t *target, err error, atEnd bool, w kind) error {
	var we *wire.Error
	if errors.As(err, &we) {
		if we.Code == wire.CodeSandboxViolation || we.Code == wire.CodeFSDenied {
			return we
		}
		t.later = we
		return nil
	}
	if atEnd && w == wantDir && errors.Is(err, unix.ENOTDIR) {
		t.later = &wire.Error{Code: wire.CodeInvalidInput,
			Message: fmt.Sprintf("path %q is not a directory; use fs.read for files", t.ref.raw),
			Details: map[string]any{"field": t.ref.field, "path": t.ref.raw}}
		return nil
	}
	t.later = fsError(t, "opening", err)
	return nil
}

// notAFile is the error for a path that is not a regular file.
func notAFile(t *target, typ uint32) *wire.Error {
	if typ == unix.S_IFDIR {
		return &wire.Error{Code: wire.CodeInvalidInput,
			Message: fmt.Sprintf("%s %q is a directory; use fs.list to see its entries", t.ref.field, t.ref.raw),
			Details: map[string]any{"field": t.ref.field, "path": t.ref.raw, "type": "dir"}}
	}
	return &wire.Error{Code: wire.CodeInvalidInput,
		Message: fmt.Sprintf("%s %q is a %s, not a regular file; the file tools read and write regular files only", t.ref.field, t.ref.raw, typeName(typ)),
		Details: map[string]any{"field": t.ref.field, "path": t.ref.raw, "type": typeName(typ)}}
}

func typeName(typ uint32) string {
	switch typ {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFIFO:
		return "FIFO (named pipe)"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "special file"
}
