//go:build unix

package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cenkalti/backoff/v5"
	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive flock on path without waiting. ok is false
// when another open file description holds it (another process, or another
// Store of this process).
func lockFile(path string) (unlock func(), ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("flock: %w", err)
	}
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		_ = f.Close()
	}, true, nil
}

// errLockHeld is lockFileWait's "try again": another process holds it.
var errLockHeld = errors.New("lock held by another process")

// lockFileWait takes the lock, polling every 50 ms until ctx ends.
func lockFileWait(ctx context.Context, path string) (unlock func(), err error) {
	return backoff.Retry(ctx, func() (func(), error) {
		unlock, ok, err := lockFile(path)
		switch {
		case err != nil:
			return nil, backoff.Permanent(err)
		case !ok:
			return nil, errLockHeld
		}
		return unlock, nil
	}, backoff.WithBackOff(backoff.NewConstantBackOff(50*time.Millisecond)), backoff.WithMaxElapsedTime(0))
}
