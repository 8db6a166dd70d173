package bwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// setupEstimate is a moving average of how long bwrap takes from reporting
// its sandbox process to blocking on --block-fd, in nanoseconds: the first
// look is taken after half of it, so a call costs a few reads of
// /proc/<pid>/syscall rather than dozens.
var setupEstimate atomic.Int64

// awaitBlocked waits until bwrap's sandbox process pid is blocked reading
// its --block-fd fd. bwrap reads that descriptor after it has built the
// whole mount namespace (every bind and overlay, pivot_root, the old root
// unmounted) and before it applies seccomp and execs the program, so this
// is the moment the mounts can be checked against the tree: a change
// before it may have misplaced a mask, one after it finds the masks
// already on their files (a mount follows its dentry through renames).
//
// It reads /proc/<pid>/syscall ("<nr> <arg0> ..."), polling with a short
// back-off after a first wait of half the usual setup time.
func awaitBlocked(ctx context.Context, pid, fd int) error {
	start := time.Now()
	path := "/proc/" + strconv.Itoa(pid) + "/syscall"
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return errors.New("the sandbox process ended during setup")
		}
		return fmt.Errorf("cannot observe the sandbox's setup through %s: %w", path, err)
	}
	defer f.Close()
	want := []byte(strconv.Itoa(unix.SYS_READ) + " 0x" + strconv.FormatInt(int64(fd), 16) + " ")
	buf := make([]byte, 256)
	if est := time.Duration(setupEstimate.Load()); est > 0 {
		time.Sleep(min(est/2, 20*time.Millisecond))
	}
	delay := 50 * time.Microsecond
	deadline := start.Add(30 * time.Second)
	for {
		// The file is generated afresh at each read from offset 0.
		n, err := f.ReadAt(buf, 0)
		if n == 0 && err != nil {
			if errors.Is(err, unix.ESRCH) || errors.Is(err, fs.ErrNotExist) {
				return errors.New("the sandbox process ended during setup")
			}
			return fmt.Errorf("cannot observe the sandbox's setup through %s (the gateway needs ptrace read access to its own children): %w", path, err)
		}
		if bytes.HasPrefix(buf[:n], want) {
			d := int64(time.Since(start))
			old := setupEstimate.Load()
			if old == 0 {
				setupEstimate.Store(d)
			} else {
				setupEstimate.Store(old + (d-old)/8)
			}
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("the sandbox's setup did not finish within 30s")
		}
		time.Sleep(delay)
		delay = min(delay*2, 250*time.Microsecond)
	}
}
