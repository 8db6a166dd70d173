package cgroup

import (
	"context"
	"errors"
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
