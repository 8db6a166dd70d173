//go:build unix

package testutil

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// SwapFile is the attacker of the file-tool race tests: until ctx ends it
// replaces work/file.txt in turn with a symlink to outside/same.txt, a
// symlink to .env, a hard link to work/denied.txt, a FIFO and a plain file
// (each renamed into place atomically), pausing between swaps and counting
// them in flips. It leaves a plain file.txt behind.
func SwapFile(ctx context.Context, work, outside string, pause time.Duration, flips *atomic.Int64) {
	p := filepath.Join(work, "file.txt")
	tmp := filepath.Join(work, "file.txt.new")
	for i := 0; ctx.Err() == nil; i++ {
		_ = os.Remove(tmp)
		var err error
		switch i % 5 {
		case 0:
			err = os.Symlink(filepath.Join(outside, "same.txt"), tmp)
		case 1:
			err = os.Symlink(".env", tmp)
		case 2:
			err = os.Link(filepath.Join(work, "denied.txt"), tmp)
		case 3:
			err = unix.Mkfifo(tmp, 0o644)
		case 4:
			err = os.WriteFile(tmp, []byte("plain\n"), 0o644)
		}
		if err == nil && os.Rename(tmp, p) == nil {
			flips.Add(1)
		}
		time.Sleep(pause)
	}
	_ = os.Remove(tmp)
	_ = os.Remove(p)
	_ = os.WriteFile(p, []byte("plain\n"), 0o644)
}
