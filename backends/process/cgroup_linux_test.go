package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/backends/cgroup"
	"github.com/portcullis/portcullis/wire"
)

// requireCgroup skips tests of the call cgroup where the host has no
// writable pids hierarchy; the runner then falls back to the group kill,
// which TestRunEscapedChildCannotHoldTheRun covers.
func requireCgroup(t *testing.T) {
	t.Helper()
	if _, err := cgroup.FindParent(); err != nil {
		t.Skipf("no pids cgroup here: %v", err)
	}
}

// killSurvivors is a cleanup that leaves no marked process behind even when
// a test fails.
func killSurvivors(t *testing.T, marker string) {
	t.Cleanup(func() {
		for _, pid := range survivors(t, marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// TestRunSetsidChildDiesWithCall: a descendant that leaves the call's
// session and group (setsid) is dead when Run returns, because it never
// left the call cgroup. The control rows run the same escape without a
// cgroup and prove that the scan finds it alive.
func TestRunSetsidChildDiesWithCall(t *testing.T) {
	requireCgroup(t)
	t.Parallel()
	tests := []struct {
		name    string
		argv    func(marker string) []string
		wantOut string
		control bool // PidsMax -1: the child must be found alive
	}{
		// The e2e suite's case. Without a cgroup the escape races the
		// group kill (setsid(1) forks, its parent exits at once), so it
		// has no control row; the shell rows let the child finish its
		// escape before the leader exits, which their controls prove.
		{name: "setsid is the program", argv: func(m string) []string { return []string{"/usr/bin/setsid", m, "20"} }},
		{name: "setsid from a shell", argv: func(m string) []string {
			return []string{"/bin/sh", "-c", `/usr/bin/setsid "$0" 20 & /bin/sleep 0.3; echo hi`, m}
		}, wantOut: "hi\n"},
		{name: "double fork and setsid", argv: func(m string) []string {
			return []string{"/bin/sh", "-c", `( /usr/bin/setsid "$0" 20 & ) ; /bin/sleep 0.3; echo hi`, m}
		}, wantOut: "hi\n"},
		{name: "control: setsid from a shell", control: true, argv: func(m string) []string {
			return []string{"/bin/sh", "-c", `/usr/bin/setsid "$0" 20 & /bin/sleep 0.3; echo hi`, m}
		}, wantOut: "hi\n"},
		{name: "control: double fork and setsid", control: true, argv: func(m string) []string {
			return []string{"/bin/sh", "-c", `( /usr/bin/setsid "$0" 20 & ) ; /bin/sleep 0.3; echo hi`, m}
		}, wantOut: "hi\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			marker := markedSleep(t)
			killSurvivors(t, marker)
			opts := Options{}
			if tt.control {
				opts.PidsMax = -1
			}
			start := time.Now()
			res, err := New(opts).Run(context.Background(), spec(tt.argv(marker)...))
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 8*time.Second {
				t.Errorf("returned after %v", took)
			}
			if res.ExitCode != 0 || res.Stdout != tt.wantOut || res.TimedOut {
				t.Errorf("result %+v", res)
			}
			if !tt.control {
				// No waiting: dead when Run returns.
				if left := survivors(t, marker); len(left) > 0 {
					t.Errorf("detached child outlived the call: %v", left)
				}
				return
			}
			deadline := time.Now().Add(3 * time.Second)
			for len(survivors(t, marker)) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("control: the escaped child was not found alive; the scan proves nothing")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestRunStopKillsSetsidChild: a timeout or cancellation kills a setsid
// child too (SIGTERM to the group, grace, SIGKILL to the group and the
// cgroup), and it is dead when Run returns.
func TestRunStopKillsSetsidChild(t *testing.T) {
	requireCgroup(t)
	t.Parallel()
	for _, cancel := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancel=%v", cancel), func(t *testing.T) {
			t.Parallel()
			marker := markedSleep(t)
			killSurvivors(t, marker)
			s := spec("/bin/sh", "-c", `/usr/bin/setsid "$0" 100 & exec "$0" 100`, marker)
			ctx := context.Background()
			if cancel {
				c, stop := context.WithCancel(ctx)
				defer stop()
				time.AfterFunc(time.Second, stop)
				ctx, s.Timeout = c, time.Minute
			} else {
				s.Timeout = time.Second
			}
			start := time.Now()
			res, err := New(Options{}).Run(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 8*time.Second {
				t.Errorf("returned after %v", took)
			}
			if res.TimedOut == cancel || res.Canceled != cancel || sig(res) != "SIGTERM" {
				t.Errorf("timed out %v canceled %v signal %q", res.TimedOut, res.Canceled, sig(res))
			}
			if left := survivors(t, marker); len(left) > 0 {
				t.Errorf("setsid child outlived the stopped call: %v", left)
			}
		})
	}
}

// TestRunForkBombContained: pids.max stops the bomb, the call ends when
// the program exits, and its children, each in a session of its own, are
// dead when Run returns.
func TestRunForkBombContained(t *testing.T) {
	requireCgroup(t)
	t.Parallel()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("python3 not installed")
	}
	marker := fmt.Sprintf("bomb-marker-%d-%d", os.Getpid(), time.Now().UnixNano())
	killSurvivors(t, marker)
	bomb := `
import os, time
n, err = 0, ""
for i in range(400):
    try:
        pid = os.fork()
    except OSError as e:
        err = e.strerror
        break
    if pid == 0:
        os.setsid()
        time.sleep(30)
        os._exit(0)
    n += 1
print(n, err)
# ` + marker
	s := spec("/usr/bin/python3", "-c", bomb)
	s.Timeout = 15 * time.Second
	start := time.Now()
	res, err := New(Options{PidsMax: 64}).Run(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	// Leftover forks would hold the call until its 15 s timeout: the
	// program's exit must end it well before (the bound leaves room for a
	// loaded machine, not for the timeout).
	if d := time.Since(start); res.TimedOut || d > 12*time.Second {
		t.Errorf("call took %v (timed out: %v); the program's exit should end it", d, res.TimedOut)
	}
	n, reason, _ := strings.Cut(strings.TrimSpace(res.Stdout), " ")
	forks, err := strconv.Atoi(n)
	if err != nil || forks >= 64 || reason != "Resource temporarily unavailable" {
		t.Errorf("bomb output %q (stderr %q): want fewer than 64 forks, then EAGAIN", res.Stdout, res.Stderr)
	}
	if res.TimedOut || res.ExitCode != 0 {
		t.Errorf("result %+v", res)
	}
	if left := survivors(t, marker); len(left) > 0 {
		t.Errorf("%d bomb children outlived the call", len(left))
	}
}

// TestRunHelperRefusesWhenCgroupJoinFails: the call cgroup vanishes between
// its creation and the helper's join; the helper refuses (fail closed) and
// the target never runs.
func TestRunHelperRefusesWhenCgroupJoinFails(t *testing.T) {
	requireCgroup(t)
	t.Parallel()
	proof := filepath.Join(t.TempDir(), "ran")
	r := New(Options{})
	r.testAfterNewCall = func(c *cgroup.Call) {
		if err := syscall.Rmdir(c.Dir()); err != nil {
			t.Errorf("removing the call cgroup: %v", err)
		}
	}
	_, err := r.Run(context.Background(), spec("/bin/touch", proof))
	if err == nil || !strings.Contains(err.Error(), "cgroup: joining") {
		t.Errorf("Run err = %v, want a helper refusal naming the cgroup join", err)
	}
	if _, statErr := os.Stat(proof); !os.IsNotExist(statErr) {
		t.Errorf("the target ran outside its cgroup (stat: %v)", statErr)
	}
}

// TestRunTargetInCallCgroup: the target runs inside its own call cgroup,
// which is gone after the run.
func TestRunTargetInCallCgroup(t *testing.T) {
	requireCgroup(t)
	t.Parallel()
	r := New(Options{})
	var dir string
	r.testAfterNewCall = func(c *cgroup.Call) { dir = c.Dir() }
	res, err := r.Run(context.Background(), spec("/bin/cat", "/proc/self/cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	if dir == "" || !strings.Contains(res.Stdout, "/portcullis/"+filepath.Base(dir)+"\n") {
		t.Errorf("target's /proc/self/cgroup %q does not name the call cgroup %q", res.Stdout, dir)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("call cgroup %s still exists after the run", dir)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunMemoryCgroup: with a memory cgroup, memory_bytes bounds what the
// call really uses: a program that touches more is killed by the kernel,
// the target sits in the call's memory cgroup, no RLIMIT_DATA is set (so
// runtimes that reserve large writable regions are not killed for what
// they never touch), and the Go toolchain, which RLIMIT_AS used to kill at
// start, runs. A scope that promised a memory cgroup is refused by a
// runner that cannot give one.
func TestRunMemoryCgroup(t *testing.T) {
	requireCgroup(t)
	t.Parallel()
	p, _ := cgroup.FindParent()
	if !p.Memory() {
		r := New(Options{})
		s := spec("/bin/true")
		s.Limits.MemoryBytes = 64 << 20
		s.Scope.MemoryLimit = wire.MemoryLimitCgroup
		if _, err := r.Run(context.Background(), s); err == nil {
			t.Fatal("a scope promising a memory cgroup ran without one")
		}
		t.Skip("no memory cgroup here; the refusal was checked")
	}
	r := New(Options{})
	if got := r.MemoryLimit(); got != wire.MemoryLimitCgroup {
		t.Errorf("MemoryLimit %q, want cgroup", got)
	}
	hog := spec("/usr/bin/python3", "-c", "b = bytearray(512 << 20); print('allocated')")
	hog.Limits.MemoryBytes = 128 << 20
	hog.Scope.MemoryLimit = wire.MemoryLimitCgroup
	hog.Timeout = 20 * time.Second
	res, err := r.Run(context.Background(), hog)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Stdout, "allocated") || sig(res) != "SIGKILL" {
		t.Errorf("512 MiB under a 128 MiB cgroup: exit %d signal %q stdout %q, want SIGKILL", res.ExitCode, sig(res), res.Stdout)
	}

	probe := spec("/bin/sh", "-c", "ulimit -d; cat /proc/self/cgroup")
	probe.Limits.MemoryBytes = 64 << 20
	probe.Scope.MemoryLimit = wire.MemoryLimitCgroup
	res, err = r.Run(context.Background(), probe)
	if err != nil {
		t.Fatal(err)
	}
	inMemoryCgroup := false
	for _, line := range strings.Split(res.Stdout, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (slices.Contains(strings.Split(parts[1], ","), "memory") || parts[0] == "0") &&
			strings.Contains(parts[2], "/portcullis/call-") {
			inMemoryCgroup = true
		}
	}
	if !strings.HasPrefix(res.Stdout, "unlimited\n") || !inMemoryCgroup {
		t.Errorf("probe: %q, want no RLIMIT_DATA and a call memory cgroup under %s", res.Stdout, p.MemoryDir())
	}

	if gobin := goBinary(); gobin != "" {
		g := spec(gobin, "version")
		g.Limits.MemoryBytes = 512 << 20
		g.Scope.MemoryLimit = wire.MemoryLimitCgroup
		res, err = r.Run(context.Background(), g)
		if err != nil || res.ExitCode != 0 {
			t.Errorf("go version under a 512 MiB cgroup: %v exit %d stderr %.300q", err, res.ExitCode, res.Stderr)
		}
	}

	disabled := New(Options{PidsMax: -1})
	if got := disabled.MemoryLimit(); got != wire.MemoryLimitRlimitData {
		t.Errorf("MemoryLimit without cgroups %q, want rlimit_data", got)
	}
	s := spec("/bin/true")
	s.Limits.MemoryBytes = 64 << 20
	s.Scope.MemoryLimit = wire.MemoryLimitCgroup
	if _, err := disabled.Run(context.Background(), s); err == nil || !strings.Contains(err.Error(), "memory cgroup") {
		t.Errorf("a runner without cgroups ran a call promised a memory cgroup: %v", err)
	}
}
