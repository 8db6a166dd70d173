//go:build unix

package evidence

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// noFollow refuses a symlink planted at the spool's path.
const noFollow = syscall.O_NOFOLLOW

func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|noFollow, 0o600)
}

// lockSpool takes an exclusive flock without waiting; the kernel drops it
// when the process dies, so a crashed gateway's spool is free at restart.
func lockSpool(f *os.File) (func(), error) {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrSpoolLocked, f.Name())
		}
		return nil, fmt.Errorf("evidence: lock spool %s: %w", f.Name(), err)
	}
	return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN) }, nil
}
