package fstool

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"

	"github.com/portcullis/portcullis/wire"
)

// tempPrefix starts the names of the gateway's temporary and backup files.
// They are hidden, so fs.list and fs.search never show them.
const tempPrefix = ".portcullis-"

// stage is one file change, prepared in the file's own directory so that
// the final step is a rename (or link) within that directory.
type stage struct {
	t    target
	root *os.Root // the grant
	dir  *os.Root // the file's parent directory, pinned by descriptor
	base string   // the file's name in dir

	// What is there now, read under the write lock.
	existed bool
	perm    fs.FileMode
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

// openStage pins the parent directory of t (creating it inside the grant
// if create is set) and hashes what the file holds now, keeping the bytes
// only when keepBefore is set (a patch needs them; a write does not). The caller must hold
// the write lock for t.real and call close.
func openStage(t target, create, keepBefore bool, maxRead int64) (*stage, error) {
	s := &stage{t: t}
	if t.rel == "." {
		return nil, &wire.Error{Code: wire.CodeInvalidInput,
			Message: fmt.Sprintf("%s %q is a granted directory itself; name a file inside it", t.ref.field, t.ref.raw),
			Details: map[string]any{"field": t.ref.field, "path": t.ref.raw}}
	}
	root, err := openRoot(t.grant)
	if err != nil {
		return nil, err
	}
	s.root = root
	dirRel, base := path.Split(t.rel)
	dirRel = path.Clean("./" + dirRel)
	s.base = base
	if create && dirRel != "." {
		if err := root.MkdirAll(dirRel, 0o755); err != nil {
			s.close()
			return nil, fsError(t, "creating the parent directories", err)
		}
	}
	if s.dir, err = root.OpenRoot(dirRel); err != nil {
		s.close()
		return nil, fsError(t, "opening the parent directory", err)
	}
	fi, err := s.dir.Lstat(base)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.perm = 0o644
		return s, nil
	case err != nil:
		s.close()
		return nil, fsError(t, "checking", err)
	case fi.Mode()&fs.ModeSymlink != 0:
		s.close()
		return nil, &wire.Error{Code: wire.CodeSandboxViolation,
			Message: fmt.Sprintf("%s %q became a symlink after it was checked; refused", t.ref.field, t.ref.raw),
			Details: map[string]any{"field": t.ref.field, "path": t.ref.raw}}
	case !fi.Mode().IsRegular():
		s.close()
		return nil, &wire.Error{Code: wire.CodeInvalidInput,
			Message: fmt.Sprintf("%s %q is not a regular file (a directory or special file); only regular files can be written", t.ref.field, t.ref.raw),
			Details: map[string]any{"field": t.ref.field, "path": t.ref.raw}}
	case fi.Size() > maxRead:
		s.close()
		return nil, &wire.Error{Code: wire.CodeWriteLimit,
			Message: fmt.Sprintf("%s %q is %d bytes; files over %d bytes cannot be changed under this policy (limits.fsize_bytes)", t.ref.field, t.ref.raw, fi.Size(), maxRead),
			Details: map[string]any{"field": t.ref.field, "path": t.ref.raw, "limit": maxRead}}
	}
	s.existed, s.perm = true, fi.Mode().Perm()
	f, err := s.dir.OpenFile(base, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		s.close()
		return nil, fsError(t, "reading", err)
	}
	defer f.Close()
	h := sha256.New()
	var w io.Writer = h
	var buf bytes.Buffer
	if keepBefore {
		w = io.MultiWriter(h, &buf)
	}
	n, err := io.Copy(w, io.LimitReader(f, maxRead+1))
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
// target, with the target's mode, flushed to disk.
func (s *stage) writeTemp() error {
	if s.remove {
		return nil
	}
	name, err := tempName("tmp")
	if err != nil {
		return err
	}
	f, err := s.dir.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fsError(s.t, "creating a temporary file", err)
	}
	s.tmp = name
	_, err = f.Write(s.content)
	if err == nil {
		err = f.Chmod(s.perm) // fchmod: on the descriptor, immune to renames
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fsError(s.t, "writing a temporary file", err)
	}
	return nil
}

// apply makes the change visible: a rename over the old file, a link for a
// new one (which fails if someone created it meanwhile), or a removal.
func (s *stage) apply() error {
	var err error
	switch {
	case s.remove:
		err = s.dir.Remove(s.base)
	case s.existed:
		err = s.dir.Rename(s.tmp, s.base)
		if err == nil {
			s.tmp = ""
		}
	default:
		err = s.dir.Link(s.tmp, s.base)
		if errors.Is(err, fs.ErrExist) {
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
		return s.dir.Rename(s.backup, s.base)
	case !s.existed:
		return s.dir.Remove(s.base)
	}
	return errors.New("no backup to restore from")
}

// close removes temporary and backup files and releases descriptors. It
// never removes the target itself.
func (s *stage) close() {
	if s.dir != nil {
		if s.tmp != "" {
			_ = s.dir.Remove(s.tmp)
		}
		if s.backup != "" && !s.keep {
			_ = s.dir.Remove(s.backup)
		}
		if d, err := s.dir.Open("."); err == nil {
			_ = d.Sync() // make the renames durable
			d.Close()
		}
		s.dir.Close()
	}
	if s.root != nil {
		s.root.Close()
	}
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
			if err := s.dir.Link(s.base, name); err != nil {
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
