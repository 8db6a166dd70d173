package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// oPath opens a directory only to walk from it.
const oPath = unix.O_PATH

// inotifyMask asks for every change of a directory's names, and for the
// directory itself moving or going away. Content changes are not asked
// for: masks and the guard depend on names and inodes only.
const inotifyMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// inotify watches directories through one non-blocking inotify instance.
type inotify struct {
	fd  int
	buf []byte
}

func newWatcher() (watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	return &inotify{fd: fd, buf: make([]byte, 64<<10)}, nil
}

func (w *inotify) watching() bool { return true }

// add watches the directory open at fd through its /proc/self/fd link, so
// that the watch is on the very directory that was listed, whatever its
// path has become.
func (w *inotify) add(fd int) (int, error) {
	wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(fd), inotifyMask)
	if err != nil {
		return -1, err
	}
	return wd, nil
}

func (w *inotify) remove(wd int) { _, _ = unix.InotifyRmWatch(w.fd, uint32(wd)) }

func (w *inotify) read() ([]event, error) {
	var out []event
	for {
		n, err := unix.Read(w.fd, w.buf)
		if errors.Is(err, unix.EAGAIN) {
			return out, nil
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			raw := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			nameLen := int(raw.Len)
			end := off + unix.SizeofInotifyEvent + nameLen
			if end > n {
				return nil, errors.New("inotify: truncated event")
			}
			name := ""
			if nameLen > 0 {
				b := w.buf[off+unix.SizeofInotifyEvent : end]
				for i, c := range b {
					if c == 0 {
						b = b[:i]
						break
					}
				}
				name = string(b)
			}
			off = end
			m := raw.Mask
			ev := event{wd: int(raw.Wd), name: name, dir: m&unix.IN_ISDIR != 0}
			switch {
			case m&unix.IN_Q_OVERFLOW != 0:
				ev.kind = evOverflow
			case m&(unix.IN_IGNORED|unix.IN_UNMOUNT) != 0:
				ev.kind = evIgnored
			case m&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
				ev.kind = evSelfGone
			case m&unix.IN_CREATE != 0:
				ev.kind = evCreate
			case m&unix.IN_DELETE != 0:
				ev.kind = evDelete
			case m&unix.IN_MOVED_FROM != 0:
				ev.kind = evMovedFrom
			case m&unix.IN_MOVED_TO != 0:
				ev.kind = evMovedTo
			default:
				continue
			}
			out = append(out, ev)
		}
		if len(out) >= 4096 {
			return out, nil
		}
	}
}

// reset drops every watch and pending event by starting a new instance.
func (w *inotify) reset() error {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("inotify_init1: %w", err)
	}
	if w.fd >= 0 {
		unix.Close(w.fd)
	}
	w.fd = fd
	return nil
}

// close releases the instance; it is called again by the cache's cleanup
// after Close, so only once does it close a descriptor.
func (w *inotify) close() {
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
}

// renameNoReplace renames old to new in the directory open at dirfd,
// failing rather than replace an existing new.
func renameNoReplace(dirfd int, old, new string) error {
	return unix.Renameat2(dirfd, old, dirfd, new, unix.RENAME_NOREPLACE)
}

// dirent is one directory entry as getdents64 reports it.
type dirent struct {
	name string
	typ  fs.FileMode // type bits; fs.ModeIrregular when the file system did not say
}

// readDir lists the directory open at fd with getdents64 into buf (reused
// between calls), without the os.File machinery a scan of thousands of
// directories would pay for each.
func readDir(fd int, buf []byte) ([]dirent, error) {
	var out []dirent
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		for off := 0; off < n; {
			// struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
			if off+19 > n {
				return nil, errors.New("getdents64: truncated entry")
			}
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				return nil, errors.New("getdents64: bad record length")
			}
			typ := buf[off+18]
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			off += reclen
			if len(name) == 0 || (name[0] == '.' && (len(name) == 1 || (len(name) == 2 && name[1] == '.'))) {
				continue
			}
			out = append(out, dirent{name: string(name), typ: direntType(typ)})
		}
	}
}

func direntType(t byte) fs.FileMode {
	switch t {
	case unix.DT_DIR:
		return fs.ModeDir
	case unix.DT_REG:
		return 0
	case unix.DT_LNK:
		return fs.ModeSymlink
	case unix.DT_FIFO:
		return fs.ModeNamedPipe
	case unix.DT_SOCK:
		return fs.ModeSocket
	case unix.DT_CHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.DT_BLK:
		return fs.ModeDevice
	default:
		return fs.ModeIrregular
	}
}
