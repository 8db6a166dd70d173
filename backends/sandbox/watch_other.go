//go:build unix && !linux

package sandbox

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

const oPath = unix.O_RDONLY

// newWatcher: no directory notification here; every Build scans afresh.
func newWatcher() (watcher, error) { return noWatcher{}, nil }

func renameNoReplace(int, string, string) error { return errors.ErrUnsupported }

type dirent struct {
	name string
	typ  fs.FileMode
}

// readDir lists the directory open at fd (not closed).
func readDir(fd int, _ []byte) ([]dirent, error) {
	nfd, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(nfd), "")
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	out := make([]dirent, 0, len(ents))
	for _, e := range ents {
		out = append(out, dirent{name: e.Name(), typ: e.Type()})
	}
	return out, nil
}
