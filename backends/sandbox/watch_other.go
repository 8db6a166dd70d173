//go:build unix && !linux

package sandbox

import (
	"errors"

	"golang.org/x/sys/unix"
)

const oPath = unix.O_RDONLY

// newWatcher: no directory notification here; every Build scans afresh.
func newWatcher() (watcher, error) { return noWatcher{}, nil }

func renameNoReplace(int, string, string) error { return errors.ErrUnsupported }
