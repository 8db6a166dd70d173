package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// onFullDisk puts d's data directory (the embedded store) on its own
// 64 MiB tmpfs and returns a fault that fills it and one that frees it.
// Mounting needs root: without it the test is skipped, or fails under
// PORTCULLIS_REQUIRE_TMPFS=1 (set by .ci/run).
func onFullDisk(t *testing.T, d *deployment) (down, up func(context.Context) error) {
	t.Helper()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "portcullis-e2e", d.dataDir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("mount a tmpfs for the data directory: %v: %s", err, out)
		if os.Getenv("PORTCULLIS_REQUIRE_TMPFS") == "1" {
			t.Fatalf("%s (PORTCULLIS_REQUIRE_TMPFS=1)", msg)
		}
		t.Skip(msg)
	}
	// Registered before the gateway starts, so it runs after the gateway
	// stopped (cleanups run last-in first-out).
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", d.dataDir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", d.dataDir, err, out)
		}
	})
	ballast := filepath.Join(d.dataDir, "ballast")
	down = func(context.Context) error { return fill(ballast) }
	up = func(context.Context) error { return os.Remove(ballast) }
	return down, up
}

// fill writes path until the file system has no free byte left.
func fill(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for len(chunk) > 0 {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				return err
			}
			chunk = chunk[:len(chunk)/2] // take the last pages too
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
		return err
	}
	if st.Bavail != 0 {
		return fmt.Errorf("%s still has %d free blocks", filepath.Dir(path), st.Bavail)
	}
	return nil
}
