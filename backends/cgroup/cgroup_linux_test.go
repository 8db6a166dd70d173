package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

func parent(t *testing.T) *Parent {
	t.Helper()
	p, err := FindParent()
	if err != nil {
		t.Skipf("no pids cgroup here: %v", err)
	}
	return p
}

func TestContains(t *testing.T) {
	p := &Parent{dir: "/sys/fs/cgroup/pids/portcullis"}
	tests := []struct {
		path string
		want bool
	}{
		{"/sys/fs/cgroup/pids/portcullis/call-1/cgroup.procs", true},
		{"/sys/fs/cgroup/pids/portcullis", false},
		{"/sys/fs/cgroup/pids/portcullis-evil/cgroup.procs", false},
		{"/sys/fs/cgroup/pids/portcullis/../cgroup.procs", false},
		{"/sys/fs/cgroup/pids/cgroup.procs", false},
		{"sys/fs/cgroup/pids/portcullis/call-1/cgroup.procs", false},
		{"/sys/fs/cgroup/memory/portcullis/call-1/cgroup.procs", false}, // no memory parent
	}
	for _, tt := range tests {
		if got := p.Contains(tt.path); got != tt.want {
			t.Errorf("Contains(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
	if (*Parent)(nil).Contains("/x") {
		t.Error("nil parent contains a path")
	}
}

// TestCallKillAllAndRemove: processes added to a call, and what they fork
// in new sessions, are all dead after KillAll, and the cgroup is removed.
func TestCallKillAllAndRemove(t *testing.T) {
	p := parent(t)
	c, err := p.NewCall(32)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Contains(c.ProcsPath()) {
		t.Fatalf("parent %s does not contain %s", p.Dir(), c.ProcsPath())
	}
	// The shell waits on stdin until it is in the cgroup, so its
	// children are born inside.
	cmd := exec.Command("/bin/sh", "-c", `read go; /usr/bin/setsid /bin/sleep 30 & /usr/bin/setsid /bin/sleep 30 & wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	release, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	if err := c.Add(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		t.Fatal(err)
	}
	if _, err := release.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		pids, err := c.pids()
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) >= 3 && slices.Contains(pids, cmd.Process.Pid) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cgroup holds %v, want the shell and two sleeps", pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if peak := c.Peak(); peak != -1 && peak < 3 {
		t.Errorf("peak %d, want at least 3", peak)
	}
	start := time.Now()
	if err := c.KillAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("KillAll took %v", time.Since(start))
	if pids, _ := c.pids(); len(pids) != 0 {
		t.Errorf("tasks left after KillAll: %v", pids)
	}
	<-waited
	c.Remove()
	for deadline := time.Now().Add(2 * time.Second); ; {
		if _, err := os.Stat(c.Dir()); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists", c.Dir())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A cgroup that is gone counts as empty.
	if err := c.KillAll(context.Background()); err != nil {
		t.Errorf("KillAll on a removed cgroup: %v", err)
	}
}

// TestNewCallPidsMax: pids.max is set, and a non-positive one is refused.
func TestNewCallPidsMax(t *testing.T) {
	p := parent(t)
	if _, err := p.NewCall(0); err == nil {
		t.Error("NewCall(0) succeeded")
	}
	c, err := p.NewCall(17)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove()
	b, err := os.ReadFile(filepath.Join(c.Dir(), "pids.max"))
	if err != nil || string(b) != "17\n" {
		t.Errorf("pids.max = %q (%v), want 17", b, err)
	}
}

func TestContainsMemory(t *testing.T) {
	p := &Parent{dir: "/sys/fs/cgroup/pids/portcullis", mem: "/sys/fs/cgroup/memory/x/portcullis"}
	for path, want := range map[string]bool{
		"/sys/fs/cgroup/memory/x/portcullis/call-1/cgroup.procs": true,
		"/sys/fs/cgroup/memory/x/portcullis":                     false,
		"/sys/fs/cgroup/memory/x/portcullisx/cgroup.procs":       false,
		"/sys/fs/cgroup/memory/x/cgroup.procs":                   false,
	} {
		if got := p.Contains(path); got != want {
			t.Errorf("Contains(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestNewCallMemory: a call given a memory limit really is bounded by it:
// a process that touches more than the limit is killed by the kernel (and
// counted), while the same allocation below the limit succeeds. A call
// without a memory limit gets no memory cgroup, and a memory limit on a
// parent without the controller is refused, never silently dropped.
func TestNewCallMemory(t *testing.T) {
	p := parent(t)
	if !p.Memory() {
		if _, err := p.NewCallLimits(Limits{Pids: 8, MemoryBytes: 64 << 20}); err == nil {
			t.Fatal("a memory limit was accepted without a memory controller")
		}
		t.Skip("no writable memory controller here; the refusal was checked")
	}
	plain, err := p.NewCall(8)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Remove()
	if plain.MemoryLimited() || len(plain.ProcsPaths()) != 1 {
		t.Errorf("a call without a memory limit has memory cgroup paths %v", plain.ProcsPaths())
	}
	if _, err := p.NewCallLimits(Limits{Pids: 8, MemoryBytes: -1}); err == nil {
		t.Error("a negative memory limit was accepted")
	}

	// run allocates and touches mb MiB inside a fresh call limited to 64 MiB.
	run := func(mb int) (int, error) {
		c, err := p.NewCallLimits(Limits{Pids: 8, MemoryBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Remove()
		if !c.MemoryLimited() {
			t.Fatal("call has no memory cgroup")
		}
		for _, procs := range c.ProcsPaths() {
			if !p.Contains(procs) {
				t.Errorf("parent does not contain %s", procs)
			}
		}
		// The shell waits on stdin until it is in the cgroup.
		cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf(`read go; exec /usr/bin/python3 -c 'b = bytearray(%d << 20); print(len(b))'`, mb))
		release, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if err := c.Add(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatal(err)
		}
		_, _ = release.Write([]byte("go\n"))
		err = cmd.Wait()
		return c.OOMKills(), err
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 to allocate with")
	}
	if kills, err := run(16); err != nil || kills != 0 {
		t.Errorf("16 MiB under a 64 MiB limit: %v, %d OOM kills", err, kills)
	}
	kills, err := run(256)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("256 MiB under a 64 MiB limit ended with %v, want SIGKILL", err)
	}
	if kills < 1 {
		t.Errorf("OOM kills %d, want at least 1", kills)
	}
}

// BenchmarkNewCallRemove is the cgroup's own share of a run's cost: mkdir,
// pids.max, the empty check of KillAll and rmdir.
func BenchmarkNewCallRemove(b *testing.B) {
	p, err := FindParent()
	if err != nil {
		b.Skipf("no pids cgroup here: %v", err)
	}
	for b.Loop() {
		c, err := p.NewCall(1024)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.KillAll(context.Background()); err != nil {
			b.Fatal(err)
		}
		c.Remove()
	}
}
