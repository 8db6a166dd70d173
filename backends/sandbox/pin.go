//go:build unix

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Pin opens the profile's read-only binds (AutorunReadOnly) and checks that
// every deny overlay's target is still in place, walking from the grant
// that holds each one without following any symlink. The runner hands the
// files to bwrap (--ro-bind-fd), so a bind's source is the very file the
// profile chose, never a host file a symlink swapped in since would point
// at; and a target gone or replaced by a symlink since the profile was
// computed fails with ErrTreeChanged (the sandbox is built again) instead
// of letting bwrap create a mount point where the secret was. The caller
// closes the files.
func (p Profile) Pin() ([]*os.File, error) {
	grants := append(append([]string{}, p.ReadOnly...), p.ReadWrite...)
	for _, d := range p.DenyDirs {
		if err := checkBeneath(grants, d, true); err != nil {
			return nil, err
		}
	}
	for _, f := range p.DenyFiles {
		if err := checkBeneath(grants, f, false); err != nil {
			return nil, err
		}
	}
	files := make([]*os.File, 0, len(p.AutorunReadOnly))
	for _, path := range p.AutorunReadOnly {
		fd, err := openBeneath(grants, path)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, err
		}
		files = append(files, os.NewFile(uintptr(fd), path))
	}
	return files, nil
}

// checkBeneath fails unless path (inside a grant) exists without a symlink
// on the way, as a directory when dir.
func checkBeneath(grants []string, path string, dir bool) error {
	parent, base, err := openParentBeneath(grants, path)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	var sb unix.Stat_t
	if err := unix.Fstatat(parent, base, &sb, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return changed(path, err)
	}
	if m := modeOf(uint32(sb.Mode)); m&os.ModeSymlink != 0 || m.IsDir() != dir {
		return changed(path, errors.New("its type changed"))
	}
	return nil
}

// openBeneath opens path (inside a grant) with O_PATH, following no symlink.
func openBeneath(grants []string, path string) (int, error) {
	parent, base, err := openParentBeneath(grants, path)
	if err != nil {
		return -1, err
	}
	defer unix.Close(parent)
	fd, err := unix.Openat(parent, base, oPath|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, changed(path, err)
	}
	var sb unix.Stat_t
	if err := unix.Fstat(fd, &sb); err != nil || (!modeOf(uint32(sb.Mode)).IsDir() && !modeOf(uint32(sb.Mode)).IsRegular()) {
		unix.Close(fd)
		return -1, changed(path, errors.New("not a file or directory"))
	}
	return fd, nil
}

// openParentBeneath opens the directory holding path from the longest grant
// containing it, one component at a time, refusing symlinks.
func openParentBeneath(grants []string, path string) (int, string, error) {
	root := ""
	for _, g := range grants {
		if within(path, g) && path != g && len(g) > len(root) {
			root = g
		}
	}
	if root == "" {
		return -1, "", fmt.Errorf("sandbox: %s is in no grant: %w", path, ErrUnsafePath)
	}
	fd, err := unix.Open(root, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|oPath, 0)
	if err != nil {
		return -1, "", changed(path, err)
	}
	segs := strings.Split(relTo(path, root), "/")
	for _, seg := range segs[:len(segs)-1] {
		nfd, err := unix.Openat(fd, seg, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|oPath, 0)
		unix.Close(fd)
		if err != nil {
			return -1, "", changed(path, err)
		}
		fd = nfd
	}
	return fd, segs[len(segs)-1], nil
}

func changed(path string, err error) error {
	return fmt.Errorf("sandbox: %s changed since the profile was computed (%v): %w: %w", path, err, ErrTreeChanged, ErrUnsafePath)
}
