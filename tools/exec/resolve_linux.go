package exectool

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/backends/process"
)

// resolver remembers where paths lead (leadsTo) and forgets every answer
// the moment anything it depends on may have changed, so that a dry run and
// a call see the file system as it is, while the common case (the same few
// programs, such as /usr/bin/git, asked for again and again) costs one
// poll(2) instead of an lstat per path component and a readlink per
// symlink.
//
// An answer depends on the entries of the directories the walk looked in
// (leadsToVisiting): which names exist, which are symlinks and where they
// point. Each such directory is watched with inotify before the walk looks
// in it, for entries created, deleted, renamed or changed in their
// attributes, and for the directory itself moved, deleted or unmounted.
// Mounts change what a path leads to without touching any directory, so
// /proc/self/mountinfo is polled too (it signals POLLPRI on every change of
// the mount table). Every lookup first polls both, without waiting: if
// either has anything to say, every remembered answer is dropped before the
// lookup is answered, so there is no window in which a change that has
// completed is not yet seen. A new answer is remembered only if a second
// walk, made after all the watches were in place, looked in the same
// directories, found the same answer, and no event arrived meanwhile.
//
// Anything unexpected (no inotify, a watch that cannot be added, a
// directory on a network or FUSE file system, whose changes elsewhere
// inotify does not see, too many answers) means the answer is not
// remembered: the walk is the fallback, never a stale answer.
type resolver struct {
	mu      sync.Mutex
	ino     int // inotify descriptor, -1 if unavailable
	mounts  int // /proc/self/mountinfo
	answers map[string]string
	chains  map[string][]string // process.ExecChain answers
	dirs    int                 // watches added since the descriptor was made
}

// maxRemembered bounds the answers and the watched directories; past it the
// resolver starts afresh (a new inotify descriptor drops all watches).
const maxRemembered = 1024

// watchMask is what changes an answer: names appearing, disappearing or
// renamed in a watched directory, attributes (a directory no longer
// searchable), and the directory itself going away.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// newResolver returns a resolver, or nil (every lookup walks) when inotify
// or the mount table cannot be watched.
func newResolver() *resolver {
	m, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	r := &resolver{ino: -1, mounts: m, answers: map[string]string{}, chains: map[string][]string{}}
	if err := r.reset(); err != nil {
		_ = unix.Close(m)
		return nil
	}
	return r
}

// reset starts afresh: a new inotify descriptor (closing the old one drops
// its watches) and no answers.
func (r *resolver) reset() error {
	if r.ino >= 0 {
		_ = unix.Close(r.ino)
	}
	r.ino = -1
	clear(r.answers)
	clear(r.chains)
	r.dirs = 0
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	r.ino = fd
	return nil
}

// close releases the descriptors.
func (r *resolver) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ino >= 0 {
		_ = unix.Close(r.ino)
	}
	r.ino = -1
	clear(r.answers)
	if r.mounts >= 0 {
		_ = unix.Close(r.mounts)
	}
	r.mounts = -1
}

// fileMask is what changes a file's part in an exec chain: its contents
// (the ELF interpreter or #! line read from it), its attributes, and the
// file itself going away.
const fileMask = unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_DONT_FOLLOW

// localFS reports whether inotify reports every change of a file system of
// this type: local ones, where all changes go through this kernel. On a
// network or FUSE file system (NFS, SMB, 9p, virtiofs, ...) another host or
// process may change it without an event, so nothing on one is remembered.
func localFS(magic int64) bool {
	switch magic {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.F2FS_SUPER_MAGIC,
		unix.TMPFS_MAGIC, unix.RAMFS_MAGIC, unix.OVERLAYFS_SUPER_MAGIC, unix.SQUASHFS_MAGIC:
		return true
	}
	return false
}

// watch adds an inotify watch on path with mask, if path is on a local
// file system (localFS).
func (r *resolver) watch(path string, mask uint32) error {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", path, err)
	}
	if !localFS(int64(st.Type)) {
		return fmt.Errorf("watch %s: file system %#x may change without inotify events", path, st.Type)
	}
	// IN_MASK_ADD: inotify keeps one watch per inode and a second add
	// would replace its mask, so a directory an exec chain names (a #!
	// line or PT_INTERP naming a directory gets it watched with fileMask)
	// would stop reporting the entries leadsTo answers depend on. Masks
	// only grow; an extra event only costs a fresh walk.
	if _, err := unix.InotifyAddWatch(r.ino, path, mask|unix.IN_MASK_ADD); err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	r.dirs++
	return nil
}

// ready is the start of every lookup, under r.mu: false means walk without
// remembering (closed, or no inotify); otherwise every remembered answer a
// pending change may have touched is gone, and there is room for more.
func (r *resolver) ready() bool {
	if r.mounts < 0 {
		return false // closed
	}
	if r.ino < 0 || r.changed() {
		if r.reset() != nil {
			return false
		}
	}
	if len(r.answers)+len(r.chains) >= maxRemembered || r.dirs >= maxRemembered {
		return r.reset() == nil
	}
	return true
}

// execChain is process.ExecChain, remembered like leadsTo: the chain
// depends on where each path it resolved leads (its directories are
// watched) and on the contents of each file in it (watched too). inotify
// does not report writes through a shared mmap: a file rewritten that way
// keeps its chain until any other change, which can only leave a new
// interpreter out of the Landlock allow list (the exec fails, closed) or
// keep one the program was allowed before.
func (r *resolver) execChain(p string) []string {
	if r == nil {
		return process.ExecChain(p)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ready() {
		return process.ExecChain(p)
	}
	if out, ok := r.chains[p]; ok {
		return slices.Clone(out)
	}
	var given []string
	out := process.ExecChainVisiting(p, func(q string) { given = append(given, q) })
	watchDir := func(dir string) error { return r.watch(dir, watchMask) }
	for _, q := range given {
		if _, err := leadsToVisiting(q, watchDir); err != nil {
			return out
		}
	}
	for _, f := range out {
		if r.watch(f, fileMask) != nil {
			return out
		}
	}
	var again []string
	out2 := process.ExecChainVisiting(p, func(q string) { again = append(again, q) })
	if slices.Equal(out, out2) && slices.Equal(given, again) && !r.changed() {
		r.chains[p] = slices.Clone(out2)
	}
	return out2
}

// leadsTo is the package's leadsTo, remembered.
func (r *resolver) leadsTo(p string) string {
	if r == nil {
		return leadsTo(p)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ready() {
		return leadsTo(p)
	}
	if out, ok := r.answers[p]; ok {
		return out
	}
	var watched []string
	out, err := leadsToVisiting(p, func(dir string) error {
		if err := r.watch(dir, watchMask); err != nil {
			return err
		}
		watched = append(watched, dir)
		return nil
	})
	if err != nil {
		return out
	}
	// Every directory is watched now. Walk again: the answer is remembered
	// only if nothing changed meanwhile (same directories, same answer, no
	// event), so every change after this point is an event.
	var again []string
	out2, _ := leadsToVisiting(p, func(dir string) error {
		again = append(again, dir)
		return nil
	})
	if out2 == out && slices.Equal(watched, again) && !r.changed() {
		r.answers[p] = out2
	}
	return out2
}

// changed reports, without waiting, whether an inotify event or a mount
// table change is pending, and if so consumes them and forgets every
// answer. Unknown poll results count as a change.
func (r *resolver) changed() bool {
	if !r.pending() {
		return false
	}
	clear(r.answers)
	clear(r.chains)
	return true
}

// pending is changed without the forgetting.
func (r *resolver) pending() bool {
	fds := [2]unix.PollFd{
		{Fd: int32(r.ino), Events: unix.POLLIN},
		{Fd: int32(r.mounts), Events: unix.POLLPRI},
	}
	n, err := unix.Poll(fds[:], 0)
	if err != nil {
		return true
	}
	if n == 0 {
		return false
	}
	if fds[0].Revents != 0 {
		var buf [4096]byte
		for {
			_, err := unix.Read(r.ino, buf[:])
			if err != nil {
				if !errors.Is(err, unix.EAGAIN) {
					_ = r.reset()
				}
				break
			}
		}
	}
	// The mount table's POLLPRI is reported once per change (poll itself
	// takes note of it): nothing to read.
	return true
}
