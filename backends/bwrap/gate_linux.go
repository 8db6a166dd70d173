package bwrap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The mount check needs to run once bwrap has every mount of a sandbox in
// place and before the program starts. bwrap says neither, so the runner
// makes it observable: the last of the sandbox's setup operations copies a
// one-byte file the runner holds into the sandbox (--file FD syncFile).
// bwrap performs its operations in order, so its read of that file, which
// the runner watches with inotify (IN_ACCESS), means every bind and overlay
// before it is mounted. The runner then checks the tree and writes
// --block-fd, which bwrap reads only later (after pivot_root and dropping
// its privileges), so the program waits for the check while bwrap itself
// usually does not wait at all. An event, not polling: on a loaded machine
// every poll is a sleep whose wake-up can be late by a scheduler slice. The
// file is unnamed (O_TMPFILE) and costs bwrap no mount.

// syncFile is where the sync file's byte is copied in the sandbox: a
// read-only one-byte file in the root.
const syncFile = "/.portcullis-sync"

// syncWatcher delivers "ready" events of the calls' sync directories.
type syncWatcher struct {
	once sync.Once
	err  error
	f    *os.File // the inotify descriptor, on Go's netpoller

	mu      sync.Mutex
	waiters map[int]chan struct{}
}

func (s *syncWatcher) start() error {
	s.once.Do(func() {
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			s.err = fmt.Errorf("bwrap: inotify for the mount check: %w", err)
			return
		}
		s.f = os.NewFile(uintptr(fd), "inotify")
		s.waiters = map[int]chan struct{}{}
		go s.loop()
	})
	return s.err
}

// watch opens a sync file and returns it with the channel closed when it
// is read. Call done afterwards.
func (s *syncWatcher) watch() (file *os.File, wd int, ready <-chan struct{}, err error) {
	if err := s.start(); err != nil {
		return nil, -1, nil, err
	}
	fd, err := unix.Open(os.TempDir(), unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		// A file system without O_TMPFILE: a named file, unlinked at once.
		f, cerr := os.CreateTemp("", "portcullis-sync-")
		if cerr != nil {
			return nil, -1, nil, fmt.Errorf("bwrap: sync file: %w", cerr)
		}
		_ = os.Remove(f.Name())
		fd, err = unix.Dup(int(f.Fd()))
		f.Close()
		if err != nil {
			return nil, -1, nil, fmt.Errorf("bwrap: sync file: %w", err)
		}
		unix.CloseOnExec(fd)
	}
	file = os.NewFile(uintptr(fd), "sync")
	if _, err := file.Write([]byte{'1'}); err != nil {
		file.Close()
		return nil, -1, nil, fmt.Errorf("bwrap: sync file: %w", err)
	}
	if _, err := file.Seek(0, 0); err != nil {
		file.Close()
		return nil, -1, nil, fmt.Errorf("bwrap: sync file: %w", err)
	}
	ch := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	wd, err = unix.InotifyAddWatch(int(s.f.Fd()), "/proc/self/fd/"+strconv.Itoa(fd), unix.IN_ACCESS)
	if err != nil {
		file.Close()
		return nil, -1, nil, fmt.Errorf("bwrap: watching the sync file: %w", err)
	}
	s.waiters[wd] = ch
	return file, wd, ch, nil
}

// done stops watching and closes the sync file.
func (s *syncWatcher) done(file *os.File, wd int) {
	s.mu.Lock()
	delete(s.waiters, wd)
	_, _ = unix.InotifyRmWatch(int(s.f.Fd()), uint32(wd))
	s.mu.Unlock()
	file.Close()
}

func (s *syncWatcher) loop() {
	buf := make([]byte, 4096)
	for {
		n, err := s.f.Read(buf)
		if err != nil {
			// Waiters fall back to looking for "ready" themselves.
			if errors.Is(err, os.ErrClosed) {
				return
			}
			continue
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int(int32(binary.NativeEndian.Uint32(buf[off:])))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			off += unix.SizeofInotifyEvent + nameLen
			if mask&unix.IN_ACCESS == 0 {
				continue // (an overflow: waiters fall back to looking)
			}
			s.mu.Lock()
			if ch := s.waiters[wd]; ch != nil {
				close(ch)
				delete(s.waiters, wd)
			}
			s.mu.Unlock()
		}
	}
}

// awaitReady waits until bwrap has read the sync file: the event, or
// (should it be lost) the file's offset seen moved at a slow poll. It fails
// when bwrap exits first or the call ends.
func awaitReady(ctx context.Context, ready <-chan struct{}, exited <-chan struct{}, file *os.File) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case <-ready:
			return nil
		case <-exited:
			return errors.New("the sandbox process ended during setup")
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return errors.New("the sandbox's setup did not finish within 30s")
		case <-tick.C:
			// bwrap shares the open file description: its read moves the
			// offset for us too.
			if off, err := file.Seek(0, 1); err == nil && off > 0 {
				return nil
			}
		}
	}
}
