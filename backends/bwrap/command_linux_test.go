package bwrap

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/wire"
)

// TestCommandLimits: a long-running program (an upstream MCP server) gets
// the scope's limits before its first instruction, by either memory
// mechanism: its nofile limit is the scope's, a small allocation works,
// and an allocation past memory_bytes fails (RLIMIT_DATA: MemoryError) or
// gets it killed (the memory cgroup), never succeeds.
func TestCommandLimits(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	r := f.runner()
	mechanisms := []string{wire.MemoryLimitRlimitData}
	if r.MemoryLimit() == wire.MemoryLimitCgroup {
		mechanisms = append(mechanisms, wire.MemoryLimitCgroup)
	}
	const script = `
import sys
for line in open('/proc/self/limits'):
    if line.startswith(('Max open files', 'Max data size', 'Max cpu time')):
        print(' '.join(line.split()))
sys.stdout.flush()
small = bytearray(16 << 20)
print('small ok', flush=True)
big = bytearray(1 << 30)
print('allocated', flush=True)
`
	for _, m := range mechanisms {
		t.Run(m, func(t *testing.T) {
			scope := f.scope(wire.PostureOff)
			scope.Limits = wire.Limits{MemoryBytes: 256 << 20, Nofile: 64, CPUSeconds: 30}
			scope.MemoryLimit = m
			cmd, release, err := r.Command(context.Background(), []string{"/usr/bin/python3", "-c", script},
				[]string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}, scope)
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			runErr := cmd.Run()
			release()
			out := stdout.String()
			if !strings.Contains(out, "Max open files 64 64 files") || !strings.Contains(out, "Max cpu time 30 31 seconds") {
				t.Errorf("limits inside the sandbox:\n%s\nstderr %s", out, stderr.String())
			}
			if m == wire.MemoryLimitRlimitData && !strings.Contains(out, "Max data size 268435456 268435456 bytes") {
				t.Errorf("RLIMIT_DATA inside the sandbox:\n%s", out)
			}
			if !strings.Contains(out, "small ok") {
				t.Errorf("a 16 MiB allocation under 256 MiB failed: %s / %s", out, stderr.String())
			}
			if runErr == nil || strings.Contains(out, "allocated") {
				t.Errorf("a 1 GiB allocation under 256 MiB: err %v stdout %q stderr %q", runErr, out, stderr.String())
			}
			if m == wire.MemoryLimitRlimitData && !strings.Contains(stderr.String(), "MemoryError") {
				t.Errorf("RLIMIT_DATA: want MemoryError, stderr %q", stderr.String())
			}
		})
	}
}

// TestCommandRegistersWriter: a server with a read-write grant is one of
// the running programs another sandbox's setup stops (freeze_linux.go)
// while it runs, and is forgotten once released.
func TestCommandRegistersWriter(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	r := f.runner()
	if r.cgroups == nil {
		t.Skip("no pids cgroup here: running programs cannot be enumerated to be stopped (documented)")
	}
	writers := func() (n int) {
		r.frz.mu.Lock()
		defer r.frz.mu.Unlock()
		for rc := range r.frz.running {
			for _, p := range rc.rw {
				if p == f.rw {
					n++
				}
			}
		}
		return n
	}
	cmd, release, err := r.Command(context.Background(), []string{"/bin/sh", "-c", "read line"},
		[]string{"PATH=/usr/bin:/bin"}, f.scope(wire.PostureOff))
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); writers() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the running server is not registered as a writer of its read-write grant")
		}
	}
	_, _ = stdin.Write([]byte("done\n"))
	_ = cmd.Wait()
	release()
	if n := writers(); n != 0 {
		t.Fatalf("%d writers registered after the server ended", n)
	}
}
