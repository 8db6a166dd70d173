package fstool

import (
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// oPath opens a directory only to pass through it or to name things in it
// (no read permission needed, as for the kernel's own path walk).
const oPath = unix.O_PATH

// resolveFlags make the kernel itself refuse anything but a plain name
// below dir: no symlink (RESOLVE_NO_SYMLINKS, which also covers the last
// component), no /proc magic link, nothing above dir (RESOLVE_BENEATH).
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// noOpenat2 forces the O_NOFOLLOW fallback (tests of the fallback path).
var noOpenat2 atomic.Bool

// haveOpenat2 probes once whether openat2(2) works here: kernels before
// 5.6 lack it, and some seccomp profiles refuse it (ENOSYS or EPERM).
var haveOpenat2 = sync.OnceValue(func() bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return false
	}
	closeFD(fd)
	return true
})

// openComponent opens the single component name in the directory dir,
// never following a symlink: with openat2 and RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS where the kernel has it,
// else with openat and O_NOFOLLOW (name is one validated component, so
// nothing but a symlink could lead elsewhere). A symlink gives ELOOP, or,
// with O_PATH, a descriptor of the link that the caller's fstat refuses.
func openComponent(dir int, name string, flags int, mode uint32) (int, error) {
	if !validName(name) {
		return -1, errBadName
	}
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if flags&unix.O_CREAT == 0 {
		mode = 0 // openat2 refuses a mode without O_CREAT
	}
	if !noOpenat2.Load() && haveOpenat2() {
		how := unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: resolveFlags}
		for tries := 0; ; tries++ {
			fd, err := unix.Openat2(dir, name, &how)
			// EAGAIN: the kernel saw a rename race under RESOLVE_BENEATH
			// and asks for a retry.
			if (errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN)) && tries < 16 {
				continue
			}
			return fd, err
		}
	}
	for {
		fd, err := unix.Openat(dir, name, flags, mode)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return fd, err
	}
}

func readDirent(fd int, buf []byte) (int, error) { return unix.Getdents(fd, buf) }

// parseDirents appends the entries of a getdents64 buffer (struct
// linux_dirent64: ino u64, off s64, reclen u16, type u8, name NUL-ended),
// keeping d_type, which unix.ParseDirent drops.
func parseDirents(buf []byte, out []dirent, max int) ([]dirent, bool) {
	for len(buf) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(buf[16:18]))
		if reclen < 19 || reclen > len(buf) {
			break
		}
		typ := buf[18]
		name := buf[19:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		buf = buf[reclen:]
		if len(name) == 0 || string(name) == "." || string(name) == ".." {
			continue
		}
		if len(out) >= max {
			return out, true
		}
		out = append(out, dirent{name: string(name), typ: typ})
	}
	return out, false
}

// openAbs opens the absolute path abs with no symlink followed on the way
// (RESOLVE_NO_SYMLINKS), or walks it component by component without
// openat2.
func openAbs(abs string, flags int) (int, error) {
	if noOpenat2.Load() || !haveOpenat2() {
		return openAbsWalk(abs, flags)
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for tries := 0; ; tries++ {
		fd, err := unix.Openat2(unix.AT_FDCWD, abs, &how)
		if (errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN)) && tries < 16 {
			continue
		}
		return fd, err
	}
}
