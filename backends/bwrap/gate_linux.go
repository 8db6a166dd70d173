package bwrap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The mount check needs to run once bwrap has every mount of a sandbox in
// place and before the program starts. bwrap says neither, so the runner
// makes it observable: the last of the sandbox's setup operations binds a
// fresh, empty host directory (the call's sync directory) into the sandbox
// and creates a directory in it (syncDir). bwrap performs its operations
// in order, so that creation, which the runner watches with inotify, means
// every bind and overlay before it is mounted. The runner then checks the
// tree and writes --block-fd, which bwrap reads only later (after
// pivot_root and dropping its privileges), so the program waits for the
// check without bwrap itself usually waiting at all. An event, not
// polling: on a loaded machine every poll is a sleep whose wake-up can be
// late by a scheduler slice.

// syncDir is where the sync directory is bound in the sandbox; it is left
// read-only and empty but for the "ready" directory.
const syncDir = "/.portcullis-sync"

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

// watch makes a sync directory and returns it with the channel closed
// when something is created in it. Call done afterwards.
func (s *syncWatcher) watch() (dir string, wd int, ready <-chan struct{}, err error) {
	if err := s.start(); err != nil {
		return "", -1, nil, err
	}
	dir, err = os.MkdirTemp("", "portcullis-sync-")
	if err != nil {
		return "", -1, nil, fmt.Errorf("bwrap: sync directory: %w", err)
	}
	if real, err := realpath(dir); err == nil {
		dir = real
	}
	ch := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	wd, err = unix.InotifyAddWatch(int(s.f.Fd()), dir, unix.IN_CREATE|unix.IN_ONLYDIR)
	if err != nil {
		os.Remove(dir)
		return "", -1, nil, fmt.Errorf("bwrap: watching the sync directory: %w", err)
	}
	s.waiters[wd] = ch
	return dir, wd, ch, nil
}

// done stops watching and removes the sync directory.
func (s *syncWatcher) done(dir string, wd int) {
	s.mu.Lock()
	delete(s.waiters, wd)
	_, _ = unix.InotifyRmWatch(int(s.f.Fd()), uint32(wd))
	s.mu.Unlock()
	_ = os.Remove(dir + "/ready")
	_ = os.Remove(dir)
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
			if mask&unix.IN_CREATE == 0 {
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

func realpath(p string) (string, error) {
	buf := make([]byte, unix.PathMax)
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	n, err := unix.Readlink("/proc/self/fd/"+fmt.Sprint(fd), buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// awaitReady waits until bwrap has created "ready" in the sync directory:
// the event, or (should it be lost) the directory seen at a slow poll. It
// fails when bwrap exits first or the call ends.
func awaitReady(ctx context.Context, ready <-chan struct{}, exited <-chan struct{}, dir string) error {
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
			if _, err := os.Lstat(dir + "/ready"); err == nil {
				return nil
			}
		}
	}
}
