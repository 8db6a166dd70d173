package cgroup

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// KillTimeout bounds KillAll when its context has no deadline, and the
// background clean-up of Remove: a task that does not die within it is
// stuck in the kernel (uninterruptible sleep), and waiting longer would only
// hold the call.
const KillTimeout = 2 * time.Second

// FindParent locates a writable pids hierarchy for this process and creates
// "portcullis" beneath its cgroup. It returns nil, err when there is none
// (no pids controller, not delegated, read-only cgroupfs). It also looks for
// the memory controller (a v1 memory hierarchy, or memory in the v2 tree's
// subtree_control) and, when it can create "portcullis" there too, calls
// may be given a memory limit (Parent.Memory); a memory controller that is
// missing or not writable only leaves calls without one.
func FindParent() (*Parent, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroup: reading /proc/self/cgroup: %w", err)
	}
	defer f.Close()
	var v1, v1mem, v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			switch c {
			case "pids":
				v1 = parts[2]
			case "memory":
				v1mem = parts[2]
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
	}
	type candidate struct {
		dir     string
		v2, mem bool // a v2 directory; one whose subtree_control enables memory
	}
	var candidates []candidate
	if v1 != "" {
		candidates = append(candidates, candidate{dir: filepath.Join("/sys/fs/cgroup/pids", v1)})
	}
	if v2 != "" {
		for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
			b, err := os.ReadFile(filepath.Join(root, v2, "cgroup.subtree_control"))
			if err == nil && containsField(string(b), "pids") {
				candidates = append(candidates, candidate{dir: filepath.Join(root, v2), v2: true, mem: containsField(string(b), "memory")})
			}
		}
	}
	var errs []error
	for _, c := range candidates {
		dir := filepath.Join(c.dir, "portcullis")
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			errs = append(errs, err)
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "pids.max")); err != nil {
			// cgroup v2: the new directory must enable pids for its children.
			if werr := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids"), 0); werr != nil {
				errs = append(errs, fmt.Errorf("%s: no pids.max and cannot enable pids: %w", dir, werr))
				continue
			}
		}
		sweepEmpty(dir)
		p := &Parent{dir: dir}
		switch {
		case c.v2 && c.mem:
			// One directory for both: enable memory for the calls too.
			if os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory"), 0) == nil {
				p.mem, p.memV2 = dir, true
			}
		case !c.v2 && v1mem != "":
			p.mem = findV1Memory(v1mem)
		}
		return p, nil
	}
	if len(candidates) == 0 {
		return nil, errors.New("cgroup: no pids cgroup controller for this process")
	}
	return nil, fmt.Errorf("cgroup: no writable pids cgroup: %w", errors.Join(errs...))
}

// findV1Memory creates "portcullis" in this process' cgroup of the v1
// memory hierarchy and returns it, or "" when that is not possible or the
// directory does not offer memory.limit_in_bytes.
func findV1Memory(rel string) string {
	dir := filepath.Join("/sys/fs/cgroup/memory", rel, "portcullis")
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return ""
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.limit_in_bytes")); err != nil {
		return ""
	}
	sweepEmpty(dir)
	return dir
}

func containsField(s, want string) bool {
	for _, f := range strings.Fields(s) {
		if f == want {
			return true
		}
	}
	return false
}

// NewCall creates a call cgroup allowing pidsMax tasks (processes and
// threads: the kernel counts both), without a memory limit.
func (p *Parent) NewCall(pidsMax int) (*Call, error) {
	return p.NewCallLimits(Limits{Pids: pidsMax})
}

// NewCallLimits creates a call cgroup with the given limits. When
// l.MemoryBytes is positive the call also gets a memory cgroup limited to
// it (swap included where swap is accounted), and the call fails when that
// is not possible: a caller that asked for a memory bound must not run
// without one.
func (p *Parent) NewCallLimits(l Limits) (*Call, error) {
	if l.Pids <= 0 {
		return nil, fmt.Errorf("cgroup: pids.max %d must be positive", l.Pids)
	}
	if l.MemoryBytes < 0 {
		return nil, fmt.Errorf("cgroup: memory limit %d must not be negative", l.MemoryBytes)
	}
	if l.MemoryBytes > 0 && p.mem == "" {
		return nil, errors.New("cgroup: a memory limit was asked for but there is no writable memory controller")
	}
	name := ""
	var dir string
	for attempt := 0; ; attempt++ {
		name = callName()
		dir = filepath.Join(p.dir, name)
		err := os.Mkdir(dir, 0o700)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || attempt == 3 {
			return nil, fmt.Errorf("cgroup: creating call cgroup: %w", err)
		}
	}
	c := &Call{dir: dir}
	if err := writeFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(l.Pids))); err != nil {
		c.Remove()
		return nil, fmt.Errorf("cgroup: setting pids.max: %w", err)
	}
	if l.MemoryBytes > 0 {
		if err := p.limitMemory(c, name, l.MemoryBytes); err != nil {
			c.Remove()
			return nil, err
		}
	}
	return c, nil
}

// limitMemory gives c its memory cgroup (dir itself on v2, a directory of
// the same name in the v1 memory hierarchy) limited to max bytes.
func (p *Parent) limitMemory(c *Call, name string, max int64) error {
	v := []byte(strconv.FormatInt(max, 10))
	if p.memV2 {
		c.mem = c.dir
		if err := writeFile(filepath.Join(c.mem, "memory.max"), v); err != nil {
			return fmt.Errorf("cgroup: setting memory.max: %w", err)
		}
		// Swap would let the call use more than max; best effort where
		// swap is not accounted (no memory.swap.max) or off.
		_ = writeFile(filepath.Join(c.mem, "memory.swap.max"), []byte("0"))
		// Kill the whole call when one task hits the limit: a half-killed
		// call is harder to read than an OOM-killed one.
		_ = writeFile(filepath.Join(c.mem, "memory.oom.group"), []byte("1"))
		return c.checkMemory("memory.max", max)
	}
	mem := filepath.Join(p.mem, name)
	if err := os.Mkdir(mem, 0o700); err != nil {
		return fmt.Errorf("cgroup: creating the call's memory cgroup: %w", err)
	}
	c.mem = mem
	if err := writeFile(filepath.Join(mem, "memory.limit_in_bytes"), v); err != nil {
		return fmt.Errorf("cgroup: setting memory.limit_in_bytes: %w", err)
	}
	// memory+swap, where swap is accounted (memsw exists only then); it
	// must not be below limit_in_bytes, which it now equals.
	if _, err := os.Stat(filepath.Join(mem, "memory.memsw.limit_in_bytes")); err == nil {
		if err := writeFile(filepath.Join(mem, "memory.memsw.limit_in_bytes"), v); err != nil {
			return fmt.Errorf("cgroup: setting memory.memsw.limit_in_bytes: %w", err)
		}
	}
	return c.checkMemory("memory.limit_in_bytes", max)
}

// checkMemory reads the limit back: the kernel rounds it down to whole
// pages, and anything else means it did not take.
func (c *Call) checkMemory(file string, want int64) error {
	b, err := readFile(filepath.Join(c.mem, file))
	if err != nil {
		return fmt.Errorf("cgroup: reading %s back: %w", file, err)
	}
	got, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || got > want || got < want-int64(os.Getpagesize()) {
		return fmt.Errorf("cgroup: %s is %q after setting %d", file, strings.TrimSpace(string(b)), want)
	}
	return nil
}

// callSeq numbers this process' call cgroups.
var callSeq atomic.Uint64

// callName names a call cgroup uniquely among live gateways (pid and
// sequence) and, through random bits, among cgroups a previous gateway with
// the same pid may have left. Not a UUID: this package is linked into the
// small exec helper, whose start-up is paid on every call, and the uuid
// package pulls in crypto and net.
func callName() string {
	var b [8]byte
	_, _ = unix.Getrandom(b[:], 0) // best effort: mkdir refuses a clash and NewCall retries
	return "call-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(callSeq.Add(1), 10) +
		"-" + strconv.FormatUint(binary.LittleEndian.Uint64(b[:]), 16)
}

// Add moves pid into the call's cgroups (pids, and memory when the call
// has its own); children it forks afterwards follow.
func (c *Call) Add(pid int) error {
	for _, procs := range c.ProcsPaths() {
		if err := writeFile(procs, []byte(strconv.Itoa(pid))); err != nil {
			return fmt.Errorf("cgroup: moving pid %d into %s: %w", pid, filepath.Dir(procs), err)
		}
	}
	return nil
}

// KillAll SIGKILLs every task in the cgroup and repeats until cgroup.procs
// is empty (an exited task leaves it at once, even before it is reaped), so
// that a task forked between two passes is caught by the next one. It gives
// up when ctx is done, or after KillTimeout when ctx has no deadline, and
// then says how many tasks were left. A cgroup that is already gone counts
// as empty.
//
// cgroup v2's cgroup.kill is used when present: it kills atomically, with
// forks blocked meanwhile. Otherwise each pid is pinned with a pidfd and
// signalled only if it is still listed after the pin, so a pid that exited
// and was reused by an unrelated process between reading cgroup.procs and
// the kill is never signalled.
func (c *Call) KillAll(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, KillTimeout)
		defer cancel()
	}
	pause := time.Millisecond
	for {
		pids, err := c.pids()
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if !c.writeKill() {
			c.killListed(pids)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("cgroup: %d tasks still in %s: %w", len(pids), c.dir, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// writeKill uses cgroup v2's cgroup.kill; false when there is none.
func (c *Call) writeKill() bool {
	return writeFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1")) == nil
}

// killListed kills pids through pidfds opened before a second read of
// cgroup.procs confirms them (see KillAll).
func (c *Call) killListed(pids []int) {
	fds := make(map[int]int, len(pids))
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		switch {
		case err == nil:
			fds[pid] = fd
		case errors.Is(err, unix.ENOSYS):
			// Before Linux 5.3: no pidfds, the plain kill is all there is.
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		// ESRCH: already gone.
	}
	still, err := c.pids()
	if err != nil {
		return
	}
	for _, pid := range still {
		if fd, ok := fds[pid]; ok {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
	}
}

// Pids lists the processes in the call's cgroup now (the runner stops and
// continues them around another call's sandbox setup).
func (c *Call) Pids() ([]int, error) { return c.pids() }

// pids lists the cgroup's processes.
func (c *Call) pids() ([]int, error) {
	b, err := readFile(c.ProcsPath())
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out, nil
}

// Remove removes the cgroup. When that fails (tasks left, or the kernel
// still releasing them) it kills what is left and retries in the
// background for up to KillTimeout, so the caller's path never waits on a
// slow teardown.
func (c *Call) Remove() {
	if c.rmdirAll() {
		return
	}
	go func() {
		deadline := time.Now().Add(KillTimeout)
		for {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			_ = c.KillAll(ctx)
			cancel()
			if c.rmdirAll() || time.Now().After(deadline) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// rmdirAll removes the call's directories (the memory one first: on v1 it
// is a separate directory) and reports whether none is left.
func (c *Call) rmdirAll() bool {
	ok := true
	if c.mem != "" && c.mem != c.dir {
		if err := unix.Rmdir(c.mem); err != nil && !errors.Is(err, unix.ENOENT) {
			ok = false
		}
	}
	if err := unix.Rmdir(c.dir); err != nil && !errors.Is(err, unix.ENOENT) {
		ok = false
	}
	return ok
}

// OOMKills returns how many tasks of the call the kernel killed because
// the call reached its memory limit (memory.events or memory.oom_control),
// or 0 when the call has no memory cgroup or the count cannot be read.
func (c *Call) OOMKills() int {
	if c == nil || c.mem == "" {
		return 0
	}
	for _, f := range []string{"memory.events", "memory.oom_control"} {
		b, err := os.ReadFile(filepath.Join(c.mem, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, " "); ok && k == "oom_kill" {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				return n
			}
		}
	}
	return 0
}

// Peak returns the highest task count seen (pids.peak), or -1.
func (c *Call) Peak() int {
	b, err := os.ReadFile(filepath.Join(c.dir, "pids.peak"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// sweepEmpty removes call cgroups left behind by a gateway that exited
// before removing them. rmdir only succeeds on a cgroup without tasks, and
// young ones are skipped, so a live call of another runner is never
// disturbed.
func sweepEmpty(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "call-") {
			continue
		}
		// A young, empty cgroup may be a call of another runner between
		// creation and the move of its first task: leave it.
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		_ = unix.Rmdir(filepath.Join(dir, e.Name()))
	}
}

// writeFile writes data to the existing cgroup file at path in one
// write(2). Raw descriptors, not os.File: the per-call cgroup files are
// opened several times a call, and an os.File registers each with the
// runtime's poller and a finalizer for nothing.
func writeFile(path string, data []byte) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Write(fd, data)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "write", Path: path, Err: err}
		}
		if n != len(data) {
			return &os.PathError{Op: "write", Path: path, Err: io.ErrShortWrite}
		}
		return nil
	}
}

// readFile reads the cgroup file at path whole (see writeFile).
func readFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n <= 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}
