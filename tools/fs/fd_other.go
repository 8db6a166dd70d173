//go:build unix && !linux

package fstool

import (
	"errors"

	"golang.org/x/sys/unix"
)

// oPath: without O_PATH, directories passed through are opened for reading.
const oPath = unix.O_RDONLY

// openComponent opens the single component name in dir with O_NOFOLLOW
// (see the Linux version; openat2 does not exist here).
func openComponent(dir int, name string, flags int, mode uint32) (int, error) {
	if !validName(name) {
		return -1, errBadName
	}
	for {
		fd, err := unix.Openat(dir, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return fd, err
	}
}

func readDirent(fd int, buf []byte) (int, error) { return unix.ReadDirent(fd, buf) }

// parseDirents keeps names only: callers fstatat entries of unknown type.
func parseDirents(buf []byte, out []dirent, max int) ([]dirent, bool) {
	var names []string
	_, _, names = unix.ParseDirent(buf, -1, names)
	for _, n := range names {
		if len(out) >= max {
			return out, true
		}
		out = append(out, dirent{name: n, typ: unix.DT_UNKNOWN})
	}
	return out, false
}

func openAbs(abs string, flags int) (int, error) { return openAbsWalk(abs, flags) }
