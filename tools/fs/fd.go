package fstool

import (
	"errors"
	"io"
	"sync"

	"golang.org/x/sys/unix"
)

// This file is the descriptor layer the file tools stand on. Every file
// and directory is opened one component at a time, relative to a
// directory descriptor already held and checked, never following a
// symlink (openComponent); facts about what was opened (type, identity)
// come from fstat on the descriptor, never from a path looked up again.

// ident is a file's identity: what a descriptor refers to, whatever name
// led to it. Renames and extra links keep it; replacing a file changes it.
type ident struct{ dev, ino uint64 }

func identOf(st *unix.Stat_t) ident { return ident{dev: uint64(st.Dev), ino: uint64(st.Ino)} }

// fileType is the S_IFMT bits of st.
func fileType(st *unix.Stat_t) uint32 { return uint32(st.Mode) & unix.S_IFMT }

// Flags for the descriptors the tools open. Every open is O_CLOEXEC (no
// descriptor leaks into an Exec child) and O_NOFOLLOW. Files are opened
// O_NONBLOCK so that opening a FIFO swapped in after the type check returns
// at once instead of waiting for a writer, and O_NOCTTY so a terminal never
// becomes the gateway's.
const (
	flagsDir    = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW
	flagsSearch = oPath | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW // a directory only passed through
	flagsFile   = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC | unix.O_NOFOLLOW
)

// validName reports whether name is one path component: not empty, not
// "." or "..", no "/" or NUL. Callers split paths that were checked for
// ".." already; this is the last line, so that openComponent can never be
// asked to climb out of its directory.
func validName(name string) bool {
	if name == "" || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return false
		}
	}
	return true
}

var errBadName = errors.New("not a single path component")

// statAt is fstatat(dir, name, AT_SYMLINK_NOFOLLOW): what name is, without
// opening it (opening a device can have effects) or following it.
func statAt(dir int, name string, st *unix.Stat_t) error {
	if !validName(name) {
		return errBadName
	}
	return retryEINTR(func() error { return unix.Fstatat(dir, name, st, unix.AT_SYMLINK_NOFOLLOW) })
}

// fstat is fstat(2) on a descriptor.
func fstat(fd int, st *unix.Stat_t) error {
	return retryEINTR(func() error { return unix.Fstat(fd, st) })
}

func retryEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func closeFD(fd int) {
	if fd >= 0 {
		_ = unix.Close(fd)
	}
}

// fdSet owns the descriptors a call opened at Enforce, so that Run works
// on exactly what was checked. Run (or Release) closes them; a call that is
// dropped between Enforce and Run has them closed by a cleanup when it is
// collected. close is idempotent, so a descriptor number is never closed
// twice (it may have been reused by then).
type fdSet struct {
	mu     sync.Mutex
	fds    []int
	closed bool
}

// add records fd; after close it closes fd at once and reports false.
func (s *fdSet) add(fd int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		closeFD(fd)
		return false
	}
	s.fds = append(s.fds, fd)
	return true
}

func (s *fdSet) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for _, fd := range s.fds {
		closeFD(fd)
	}
	s.fds = nil
}

// fdReader reads a descriptor the caller owns (no os.File: it would try
// to register the non-blocking descriptor with the poller).
type fdReader struct{ fd int }

func (r fdReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := unix.Read(r.fd, p)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// writeAll writes b to fd.
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// dirent is one entry read from a directory: its name and the type
// getdents reported (unix.DT_*; DT_UNKNOWN when the file system does not
// say, and callers then fstatat).
type dirent struct {
	name string
	typ  uint8
}

// readDir reads up to max entries of the directory fd ("." and ".."
// excluded) and reports whether it stopped at max.
func readDir(fd int, max int) ([]dirent, bool, error) {
	var out []dirent
	buf := make([]byte, 32<<10)
	for {
		n, err := readDirent(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return out, false, err
		}
		if n <= 0 {
			return out, false, nil
		}
		var cut bool
		out, cut = parseDirents(buf[:n], out, max)
		if cut {
			return out, true, nil
		}
	}
}

// openAbsWalk opens the absolute path abs one component at a time from
// "/", never following a symlink: the fallback of openAbs.
func openAbsWalk(abs string, flags int) (int, error) {
	comps := splitComponents(abs, nil)
	dir, err := unix.Open("/", flagsSearch, 0)
	if err != nil {
		return -1, err
	}
	if len(comps) == 0 {
		defer closeFD(dir)
		return unix.Open("/", flags|unix.O_CLOEXEC, 0)
	}
	for _, c := range comps[:len(comps)-1] {
		next, err := openComponent(dir, c, flagsSearch, 0)
		closeFD(dir)
		if err != nil {
			return -1, err
		}
		dir = next
	}
	fd, err := openComponent(dir, comps[len(comps)-1], flags, 0)
	closeFD(dir)
	return fd, err
}

// closedAlready reports whether close ran.
func (s *fdSet) closedAlready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
