package fstool

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/wire"
)

// tempPrefix starts the names of the gateway's temporary and backup files.
// They are hidden, so fs.list and fs.search never show them.
const tempPrefix = ".portcullis-"

// stage is one file change, prepared in the file's own directory so that
// the final step is a rename (or link) within that directory, by
// descriptor: the directory Enforce opened and checked (or created below
// it here, each level checked the same way).
type stage struct {
	t      *target
	dir    int  // the file's parent directory
	ownDir bool // dir was opened here; else the call's fdSet owns it
	base   string

	// What is there now, read under the write lock.
	existed bool
	perm    uint32
	before  []byte // current content (nil when !existed)
	sumPrev string // SHA-256 of before

	// The change.
	remove  bool
	content []byte
	tmp     string // temporary file holding content
	backup  string // hard link to the previous file while a multi-file commit runs
	done    bool   // the change is visible
	keep    bool   // the backup could not be restored: never remove it
}

// openStage takes the parent directory of t that Enforce pinned, creates
// the missing directories below it when create is set (mkdirat, then
// opened without following and checked like every other level), and
// hashes what the file holds now, keeping the bytes only when keepBefore
// is set (a patch needs them; a write does not). The caller must hold the
// write lock for t.real and call close.
func openStage(t *target, o *opener, create, keepBefore bool, maxRead int64) (*stage, error) {
	if t.later != nil {
		return nil, t.later
	}
	s := &stage{t: t, dir: t.fd, base: t.base}
	if len(t.missing) > 0 {
		if !create {
			return nil, fsError(t, "opening", unix.ENOENT)
		}
		for i, c := range t.missing {
			if err := retryEINTR(func() error { return unix.Mkdirat(s.dir, c, 0o755) }); err != nil && !errors.Is(err, unix.EEXIST) {
				s.close()
				return nil, fsError(t, "creating the parent directories", err)
			}
			flags := flagsSearch
			if i == len(t.missing)-1 {
				flags = flagsDir
			}
			next, err := openComponent(s.dir, c, flags, 0)
			if err != nil {
				err = classifyOpenError(t, s.dir, c, err)
				s.close()
				return nil, fsError(t, "opening the parent directories", err)
			}
			var st unix.Stat_t
			if err := fstat(next, &st); err != nil || fileType(&st) != unix.S_IFDIR {
				closeFD(next)
				s.close()
				return nil, symlinkViolation(t) // a link or a file swapped in after mkdir
			}
			if err := o.checkDir(t, &st); err != nil {
				closeFD(next)
				s.close()
				return nil, err
			}
			if s.ownDir {
				closeFD(s.dir)
			}
			s.dir, s.ownDir = next, true
		}
	}
	var st unix.Stat_t
	err := statAt(s.dir, s.base, &st)
	switch {
	case errors.Is(err, unix.ENOENT):
		s.perm = 0o644
		return s, nil
	case err != nil:
		s.close()
		return nil, fsError(t, "checking", err)
	case fileType(&st) == unix.S_IFLNK:
		s.close()
		return nil, symlinkViolation(t)
	case fileType(&st) != unix.S_IFREG:
		s.close()
		return nil, &wire.Error{Code: wire.CodeInvalidInput,
			Message: fmt.Sprintf("%s %q is a %s, not a regular file; only regular files can be written", t.ref.field, t.ref.raw, typeName(fileType(&st))),
			Details: map[string]any{"field": t.ref.field, "path": t.ref.raw, "type": typeName(fileType(&st))}}
	case st.Size > maxRead:
		s.close()
		return nil, &wire.Error{Code: wire.CodeWriteLimit,
			Message: fmt.Sprintf("%s %q is %d bytes; files over %d bytes cannot be changed under this policy (limits.fsize_bytes)", t.ref.field, t.ref.raw, st.Size, maxRead),
			Details: map[string]any{"field": t.ref.field, "path": t.ref.raw, "limit": maxRead}}
	}
	if w, ok := o.deny.byID(&st); ok {
		s.close()
		return nil, deniedByID(t.ref, w)
	}
	s.existed, s.perm = true, uint32(st.Mode)&0o777 // never setuid, setgid or sticky: the content is the agent's
	fd, err := openComponent(s.dir, s.base, flagsFile, 0)
	if err != nil {
		s.close()
		return nil, fsError(t, "reading", classifyOpenError(t, s.dir, s.base, err))
	}
	defer closeFD(fd)
	var now unix.Stat_t
	if err := fstat(fd, &now); err != nil || fileType(&now) != unix.S_IFREG || identOf(&now) != identOf(&st) {
		s.close()
		return nil, changedViolation(t)
	}
	h := sha256.New()
	var w io.Writer = h
	var buf bytes.Buffer
	if keepBefore {
		buf.Grow(int(now.Size))
		w = io.MultiWriter(h, &buf)
	}
	n, err := io.Copy(w, io.LimitReader(fdReader{fd}, maxRead+1))
	if err != nil {
		s.close()
		return nil, fsError(t, "reading", err)
	}
	if n > maxRead {
		s.close()
		return nil, &wire.Error{Code: wire.CodeWriteLimit,
			Message: fmt.Sprintf("%s %q grew past %d bytes while it was read", t.ref.field, t.ref.raw, maxRead),
			Details: map[string]any{"field": t.ref.field, "path": t.ref.raw, "limit": maxRead}}
	}
	if keepBefore {
		s.before = buf.Bytes()
	}
	s.sumPrev = hex.EncodeToString(h.Sum(nil))
	return s, nil
}

// checkMatch applies an ifMatchSha256 precondition: nil is none, "" means
// the file must not exist, a digest means it must exist with that content.
func (s *stage) checkMatch(field string, want *string) error {
	if want == nil {
		return nil
	}
	switch {
	case *want == "" && s.existed:
		return &wire.Error{Code: wire.CodePreconditionFailed,
			Message: fmt.Sprintf("%s %q exists, but %s was \"\" (create only); read it and pass its sha256 to replace it", s.t.ref.field, s.t.ref.raw, field),
			Details: map[string]any{"field": field, "path": s.t.ref.raw, "actual": s.sumPrev}}
	case *want != "" && !s.existed:
		return &wire.Error{Code: wire.CodePreconditionFailed,
			Message: fmt.Sprintf("%s %q does not exist, but %s expected content with sha256 %s", s.t.ref.field, s.t.ref.raw, field, *want),
			Details: map[string]any{"field": field, "path": s.t.ref.raw, "expected": *want, "actual": nil}}
	case *want != "" && *want != s.sumPrev:
		return &wire.Error{Code: wire.CodePreconditionFailed,
			Message: fmt.Sprintf("%s %q has changed: its sha256 is %s, %s expected %s; read it again", s.t.ref.field, s.t.ref.raw, s.sumPrev, field, *want),
			Details: map[string]any{"field": field, "path": s.t.ref.raw, "expected": *want, "actual": s.sumPrev}}
	}
	return nil
}

// writeTemp writes the new content to a fresh temporary file next to the
// target (O_CREAT|O_EXCL|O_NOFOLLOW in the pinned directory), with the
// target's mode, flushed to disk.
func (s *stage) writeTemp() error {
	if s.remove {
		return nil
	}
	name, err := tempName("tmp")
	if err != nil {
		return err
	}
	fd, err := openComponent(s.dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return fsError(s.t, "creating a temporary file", err)
	}
	s.tmp = name
	err = writeAll(fd, s.content)
	if err == nil {
		err = retryEINTR(func() error { return unix.Fchmod(fd, s.perm) }) // on the descriptor, immune to renames
	}
	if err == nil {
		err = retryEINTR(func() error { return unix.Fsync(fd) })
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fsError(s.t, "writing a temporary file", err)
	}
	return nil
}

// apply makes the change visible: a rename over the old file, a link for a
// new one (which fails if someone created it meanwhile), or a removal, all
// within the pinned directory.
func (s *stage) apply() error {
	var err error
	switch {
	case s.remove:
		err = unix.Unlinkat(s.dir, s.base, 0)
	case s.existed:
		err = unix.Renameat(s.dir, s.tmp, s.dir, s.base)
		if err == nil {
			s.tmp = ""
		}
	default:
		err = unix.Linkat(s.dir, s.tmp, s.dir, s.base, 0)
		if errors.Is(err, unix.EEXIST) {
			return &wire.Error{Code: wire.CodePreconditionFailed,
				Message: fmt.Sprintf("%s %q was created by someone else meanwhile; read it and retry", s.t.ref.field, s.t.ref.raw),
				Details: map[string]any{"field": s.t.ref.field, "path": s.t.ref.raw}}
		}
	}
	if err != nil {
		return fsError(s.t, "replacing the file", err)
	}
	s.done = true
	return nil
}

// undo restores what apply changed, from the backup link.
func (s *stage) undo() error {
	if !s.done {
		return nil
	}
	switch {
	case s.existed && s.backup != "":
		return unix.Renameat(s.dir, s.backup, s.dir, s.base)
	case !s.existed:
		return unix.Unlinkat(s.dir, s.base, 0)
	}
	return errors.New("no backup to restore from")
}

// close removes temporary and backup files, makes the renames durable and
// releases the directories it opened. It never removes the target itself.
func (s *stage) close() {
	if s.dir < 0 {
		return
	}
	if s.tmp != "" {
		_ = unix.Unlinkat(s.dir, s.tmp, 0)
	}
	if s.backup != "" && !s.keep {
		_ = unix.Unlinkat(s.dir, s.backup, 0)
	}
	if s.done {
		_ = unix.Fsync(s.dir)
	}
	if s.ownDir {
		closeFD(s.dir)
	}
	s.dir = -1
}

// commit applies every stage or none: temporary files are all written
// first; with more than one file each existing target is hard-linked to a
// backup before anything changes, and a failure part way renames the
// backups back. A single file needs no backup: its rename is atomic.
func commit(stages []*stage) error {
	for _, s := range stages {
		if err := s.writeTemp(); err != nil {
			return err
		}
	}
	if len(stages) > 1 {
		for _, s := range stages {
			if !s.existed {
				continue
			}
			name, err := tempName("bak")
			if err != nil {
				return err
			}
			if err := unix.Linkat(s.dir, s.base, s.dir, name, 0); err != nil {
				return fsError(s.t, "linking a backup", err)
			}
			s.backup = name
		}
	}
	for i, s := range stages {
		if err := s.apply(); err != nil {
			for j := i - 1; j >= 0; j-- {
				if uerr := stages[j].undo(); uerr != nil {
					stages[j].keep = true
					return fmt.Errorf("%w; and restoring %s failed: %v (its previous content is kept as %s)", err, stages[j].t.ref.raw, uerr, stages[j].backup)
				}
				stages[j].backup = ""
			}
			return err
		}
	}
	return nil
}

func tempName(kind string) (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random temporary name: %w", err)
	}
	return tempPrefix + hex.EncodeToString(b) + "." + kind, nil
}
