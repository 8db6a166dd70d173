//go:build unix

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Pin opens the profile's read-only binds (AutorunReadOnly), walking from
// the grant that holds each one without following any symlink. The runner
// hands the files to bwrap (--ro-bind-fd), so a bind's source is the very
// file the profile chose, never a host file that a symlink swapped in since
// would point at; a bind whose path is gone or passes through a symlink
// fails with ErrTreeChanged (the sandbox is built again). Walks share the
// directories they have in common. The caller closes the files.
func (p Profile) Pin() ([]*os.File, error) {
	if len(p.AutorunReadOnly) == 0 {
		return nil, nil
	}
	grants := append(append([]string{}, p.ReadOnly...), p.ReadWrite...)
	w := &walker{}
	defer w.close()
	files := make([]*os.File, 0, len(p.AutorunReadOnly))
	fail := func(err error) ([]*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, err
	}
	for _, path := range p.AutorunReadOnly {
		root := ""
		for _, g := range grants {
			if within(path, g) && path != g && len(g) > len(root) {
				root = g
			}
		}
		if root == "" {
			return fail(fmt.Errorf("sandbox: %s is in no grant: %w", path, ErrUnsafePath))
		}
		parent, err := w.dir(root, strings.Split(relTo(path, root), "/"))
		if err != nil {
			return fail(changed(path, err))
		}
		fd, err := unix.Openat(parent, filepathBase(path), oPath|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(changed(path, err))
		}
		var sb unix.Stat_t
		if err := unix.Fstat(fd, &sb); err != nil || (!modeOf(uint32(sb.Mode)).IsDir() && !modeOf(uint32(sb.Mode)).IsRegular()) {
			unix.Close(fd)
			return fail(changed(path, errors.New("not a file or directory")))
		}
		files = append(files, os.NewFile(uintptr(fd), path))
	}
	return files, nil
}

// walker opens directories below a grant one component at a time with
// O_NOFOLLOW, keeping the chain of the last walk open for the next one.
type walker struct {
	root string
	segs []string // directories open below root
	fds  []int    // fds[0] is root; fds[i+1] is segs[i]
}

// dir returns the descriptor of the directory holding the last of segs
// (relative to root).
func (w *walker) dir(root string, segs []string) (int, error) {
	dirs := segs[:len(segs)-1]
	if w.root != root {
		w.close()
		fd, err := unix.Open(root, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|oPath, 0)
		if err != nil {
			return -1, err
		}
		w.root, w.fds = root, []int{fd}
	}
	common := 0
	for common < len(w.segs) && common < len(dirs) && w.segs[common] == dirs[common] {
		common++
	}
	for _, fd := range w.fds[common+1:] {
		unix.Close(fd)
	}
	w.fds, w.segs = w.fds[:common+1], slices.Clone(w.segs[:common])
	for _, seg := range dirs[common:] {
		fd, err := unix.Openat(w.fds[len(w.fds)-1], seg, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|oPath, 0)
		if err != nil {
			return -1, err
		}
		w.fds = append(w.fds, fd)
		w.segs = append(w.segs, seg)
	}
	return w.fds[len(w.fds)-1], nil
}

func (w *walker) close() {
	for _, fd := range w.fds {
		unix.Close(fd)
	}
	w.root, w.segs, w.fds = "", nil, nil
}

func filepathBase(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

func changed(path string, err error) error {
	return fmt.Errorf("sandbox: %s changed since the profile was computed (%v): %w: %w", path, err, ErrTreeChanged, ErrUnsafePath)
}
