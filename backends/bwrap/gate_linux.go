package bwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// awaitBlocked waits until bwrap's sandbox process pid is blocked reading
// its --block-fd fd. bwrap reads that descriptor after it has built the
// whole mount namespace (every bind and overlay, pivot_root, the old root
// unmounted) and before it applies seccomp and execs the program, so this
// is the moment the mounts can be checked against the tree: a change
// before it may have misplaced a mask, one after it finds the masks
// already on their files (a mount follows its dentry through renames).
//
// It reads /proc/<pid>/syscall ("<nr> <arg0> ..."), polling with a short
// back-off: bwrap's setup takes a few milliseconds.
func awaitBlocked(ctx context.Context, pid, fd int) error {
	path := "/proc/" + strconv.Itoa(pid) + "/syscall"
	want := []byte(strconv.Itoa(unix.SYS_READ) + " 0x" + strconv.FormatInt(int64(fd), 16) + " ")
	buf := make([]byte, 256)
	delay := 20 * time.Microsecond
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := readProc(path, buf)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
				return errors.New("the sandbox process ended during setup")
			}
			return fmt.Errorf("cannot observe the sandbox's setup through %s (the gateway needs ptrace read access to its own children): %w", path, err)
		}
		if bytes.HasPrefix(buf[:n], want) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("the sandbox's setup did not finish within 30s")
		}
		time.Sleep(delay)
		delay = min(delay*2, 500*time.Microsecond)
	}
}

func readProc(path string, buf []byte) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Read(buf)
}
