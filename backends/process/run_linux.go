package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/backends/cgroup"
	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// Run executes spec and reports how it ended. The error is only for a run
// that could not start at all (bad spec, helper missing, a limit that could
// not be set, exec refused); the caller maps it to backend_unavailable. A
// program that exits non-zero, is killed, times out or is stopped because
// ctx was done is a normal Result.
func (r *Runner) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	return r.RunLaunch(ctx, spec, Launch{})
}

// RunLaunch is Run with the program wrapped as l describes.
func (r *Runner) RunLaunch(ctx context.Context, spec sandbox.Spec, l Launch) (sandbox.Result, error) {
	extraClosed := false
	closeExtra := func() {
		if !extraClosed {
			extraClosed = true
			for _, f := range l.ExtraFiles {
				_ = f.Close()
			}
		}
	}
	defer closeExtra()
	target, err := r.checkLaunch(ctx, spec, l)
	if err != nil {
		return sandbox.Result{}, err
	}

	// The helper joins the call cgroup before it execs the target, so
	// nothing the target forks is ever outside it.
	var procs []string
	var cg *cgroup.Call
	memoryByCgroup := false
	if !l.Direct {
		cg, memoryByCgroup, err = r.callCgroup(ctx, spec)
		if err != nil {
			return sandbox.Result{}, err
		}
	}
	if cg != nil {
		// Runs after the leader was waited for, which killed everything
		// in the cgroup first (startAndWait).
		defer cg.Remove()
		if procs, err = r.ownProcs(cg); err != nil {
			return sandbox.Result{}, err
		}
	}
	limits, err := r.rlimits(spec.Limits, !memoryByCgroup)
	if err != nil {
		return sandbox.Result{}, err
	}

	user := r.user
	if l.Direct {
		user = nil // the launcher (bwrap) chooses the sandbox's user itself
	}
	dir, cleanup, err := r.workDir(ctx, spec, user)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer cleanup()

	var pipes pipeSet
	defer pipes.closeAll()
	outR, outW, err := pipes.pipe()
	if err != nil {
		return sandbox.Result{}, err
	}
	errR, errW, err := pipes.pipe()
	if err != nil {
		return sandbox.Result{}, err
	}
	statR, statW, err := pipes.pipe()
	if err != nil {
		return sandbox.Result{}, err
	}
	cmd, err := r.command(spec, l, target, procs, user, limits)
	if err != nil {
		return sandbox.Result{}, err
	}
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, outW, errW
	if !l.Direct {
		cmd.ExtraFiles = append([]*os.File{statW}, l.ExtraFiles...)
	}

	g := &group{cg: cg}
	started := make(chan error, 1)
	done := make(chan exitInfo, 1)
	go g.startAndWait(cmd, l.OnThread, started, done)
	err = <-started
	closeExtra()
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("process: starting %s: %w", target[0], err)
	}
	// The child holds its own copies; ours must go so EOF can arrive.
	pipes.close(outW, errW, statW)
	if l.Started != nil {
		l.Started(cmd.Process.Pid)
	}
	res, exit, stdout, stderr := r.await(ctx, spec, g, done, &pipes, outR, errR)

	if l.Direct {
		// No helper, no status: nothing else holds statW.
	} else if msg := readStatus(statR); msg == helperSilent && (res.Canceled || res.TimedOut) {
		// Stopped before the helper got to report: the program never ran,
		// and the run ends as what stopped it, not as a refusal.
	} else if msg != "" {
		r.log.ErrorContext(ctx, "process: helper refused to run the program", "argv0", spec.Argv[0], "reason", msg)
		return sandbox.Result{}, fmt.Errorf("process: helper refused to start %s: %s", spec.Argv[0], msg)
	}
	if exit.err != nil && exit.state == nil {
		return sandbox.Result{}, fmt.Errorf("process: waiting for %s: %w", spec.Argv[0], exit.err)
	}
	exitStatus(&res, exit)
	res.Stdout, res.StdoutTruncated = stdout.Text()
	res.Stderr, res.StderrTruncated = stderr.Text()
	return res, nil
}

// checkLaunch checks a launch before anything is made for it, and returns
// what is executed: the launcher's argv when there is one, else the
// program's.
func (r *Runner) checkLaunch(ctx context.Context, spec sandbox.Spec, l Launch) ([]string, error) {
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	target := spec.Argv
	if len(l.Argv) > 0 {
		if !filepath.IsAbs(l.Argv[0]) {
			return nil, fmt.Errorf("process: launcher %q is not absolute", l.Argv[0])
		}
		target = l.Argv
	}
	if !filepath.IsAbs(r.helper) {
		return nil, fmt.Errorf("process: helper path %q is not absolute", r.helper)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("process: not started: %w", err)
	}
	return target, nil
}

// ownProcs are cg's cgroup.procs paths, each checked to be one of this
// runner's own call cgroups: the helper writes to whatever path it is
// given, as root here.
func (r *Runner) ownProcs(cg *cgroup.Call) ([]string, error) {
	procs := cg.ProcsPaths()
	for _, p := range procs {
		if !r.cgParent.Contains(p) {
			return nil, fmt.Errorf("process: call cgroup %q is not under %q", p, r.cgParent.Dir())
		}
	}
	return procs, nil
}

// workDir is the program's working directory: spec.Dir, or a private one
// (owned by the program's user) that cleanup removes. The spec's private
// directories are handed to that user as well.
func (r *Runner) workDir(ctx context.Context, spec sandbox.Spec, user *Credential) (dir string, cleanup func(), err error) {
	dir, cleanup = spec.Dir, func() {}
	if dir == "" {
		tmp, err := os.MkdirTemp("", "portcullis-exec-")
		if err != nil {
			return "", cleanup, fmt.Errorf("process: private working directory: %w", err)
		}
		cleanup = func() {
			if err := os.RemoveAll(tmp); err != nil {
				r.log.WarnContext(ctx, "process: removing private working directory", "dir", tmp, "error", err)
			}
		}
		dir = tmp
		if user != nil {
			if err := os.Lchown(tmp, int(user.UID), int(user.GID)); err != nil {
				return "", cleanup, fmt.Errorf("process: private working directory: %w", err)
			}
		}
	}
	if user != nil {
		for _, d := range spec.PrivateDirs {
			if err := giveTree(d, *user); err != nil {
				return "", cleanup, fmt.Errorf("process: handing %s to uid %d: %w", d, user.UID, err)
			}
		}
	}
	return dir, cleanup, nil
}

// command is the process to start: the helper, which joins the cgroup,
// sets the limits and the user, restricts exec and then execs the target;
// or, for a direct launch, the target itself. ExtraFiles are the launch's
// (a helper launch puts its status pipe first).
func (r *Runner) command(spec sandbox.Spec, l Launch, target, procs []string, user *Credential, limits [nLimits]rlimitArg) (*exec.Cmd, error) {
	env := make([]string, 0, len(spec.Env)) // never nil: nil would inherit the gateway's environment
	env = append(env, spec.Env...)
	// The exec restriction covers what this runner execs itself (the
	// program, or the launcher) besides what the spec allows.
	var execAllow []string
	if spec.ExecAllow != nil {
		execAllow = append(ExecChain(target[0]), spec.ExecAllow...)
		if len(execAllow) > maxExecAllow {
			return nil, fmt.Errorf("process: %d exec restriction paths, more than %d", len(execAllow), maxExecAllow)
		}
		if LandlockABI() < 1 {
			return nil, ErrNoLandlock
		}
	}
	path, args := r.helper, helperArgs(procs, user, execAllow, limits, target)
	if l.Direct {
		if execAllow != nil {
			// Without the helper nothing here restricts the program; a
			// launcher restricts it itself (RestrictArgs) and clears
			// ExecAllow. Landlock on the launcher would also forbid the
			// mounts a sandbox launcher makes.
			return nil, errors.New("process: a direct launch cannot restrict exec; the launcher must (RestrictArgs)")
		}
		path, args = target[0], target
	}
	return &exec.Cmd{
		Path:       path,
		Args:       args,
		Env:        env,
		ExtraFiles: l.ExtraFiles,
		SysProcAttr: &syscall.SysProcAttr{
			// A new session is a new process group (pgid = pid) without a
			// controlling terminal, so the whole group can be signalled
			// and no terminal can be driven from inside.
			Setsid:    true,
			Pdeathsig: syscall.SIGKILL,
		},
	}, nil
}

// await collects the started group's output until it exits, times out,
// is cancelled or (StopAtOutputCap) says more than it may, stopping it in
// the last three cases; then it waits a grace period for the pipes.
func (r *Runner) await(ctx context.Context, spec sandbox.Spec, g *group, done chan exitInfo, pipes *pipeSet, outR, errR *os.File) (sandbox.Result, exitInfo, *OutputBuffer, *OutputBuffer) {
	startedAt := g.startedAt
	stdout, stderr := NewOutputBuffer(spec.MaxOutputBytes), NewOutputBuffer(spec.MaxOutputBytes)
	var capped chan struct{} // nil (never ready) unless StopAtOutputCap
	if spec.StopAtOutputCap {
		capped = make(chan struct{})
		var once sync.Once
		stdout.over = func() { once.Do(func() { close(capped) }) }
		stderr.over = stdout.over
	}
	var drained sync.WaitGroup
	drained.Go(func() { drain(outR, stdout) })
	drained.Go(func() { drain(errR, stderr) })

	var res sandbox.Result
	timer := time.NewTimer(spec.Timeout)
	defer timer.Stop()
	var exit exitInfo
	select {
	case exit = <-done:
	case <-timer.C:
		res.TimedOut = true
		exit = g.stop(done)
	case <-ctx.Done():
		res.Canceled = true
		exit = g.stop(done)
	case <-capped:
		// No grace: the program is past what it was allowed to say.
		res.OutputCapped = true
		exit = g.kill(done)
	}
	res.Duration = exit.at.Sub(startedAt)
	if exit.killErr != nil {
		r.log.WarnContext(ctx, "process: tasks left in the call cgroup", "argv0", spec.Argv[0], "error", exit.killErr)
	}

	// The group is dead; a process that left it may still hold the pipes.
	// Past the grace the drains stop waiting for EOF, but first take what
	// the pipes already hold: when this process was off the CPU for longer
	// than the grace, the timer and the data are ready at once, and closing
	// the pipes would lose output the program did write.
	drainDone := make(chan struct{})
	go func() { drained.Wait(); close(drainDone) }()
	select {
	case <-drainDone:
	case <-time.After(drainGrace):
		for _, f := range []*os.File{outR, errR} {
			if f.SetReadDeadline(time.Now()) != nil {
				pipes.close(f) // not pollable: no deadline, so close it
			}
		}
		<-drainDone
	}
	return res, exit, stdout, stderr
}

// exitStatus sets res's exit code, or its signal, from how the process
// ended.
func exitStatus(res *sandbox.Result, exit exitInfo) {
	res.ExitCode, res.Signal = ExitStatus(exit.state)
}

// giveTree chowns dir and everything below it to c without following
// symlinks. Only for a run's private directories: the caller made them for
// this run, 0700, so nothing in them was planted by anyone else.
func giveTree(dir string, c Credential) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("private directory %q is not absolute", dir)
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(c.UID), int(c.GID))
	})
}

// checkSpec refuses specs a caller should never build.
func checkSpec(spec sandbox.Spec) error {
	switch {
	case len(spec.Argv) == 0:
		return errors.New("process: empty argv")
	case !filepath.IsAbs(spec.Argv[0]):
		return fmt.Errorf("process: argv[0] %q is not absolute", spec.Argv[0])
	case spec.Timeout <= 0:
		return fmt.Errorf("process: timeout %v must be positive", spec.Timeout)
	case spec.MaxOutputBytes <= 0:
		return fmt.Errorf("process: max output bytes %d must be positive", spec.MaxOutputBytes)
	case spec.Dir != "" && !filepath.IsAbs(spec.Dir):
		return fmt.Errorf("process: working directory %q is not absolute", spec.Dir)
	}
	l := spec.Limits
	if l.CPUSeconds < 0 || l.MemoryBytes < 0 || l.FsizeBytes < 0 || l.Nofile < 0 {
		return fmt.Errorf("process: negative limit in %+v", l)
	}
	for i, a := range spec.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("process: argv[%d] contains a NUL byte", i)
		}
	}
	for i, e := range spec.Env {
		if strings.IndexByte(e, 0) >= 0 || !strings.Contains(e, "=") {
			return fmt.Errorf("process: env entry %d is not KEY=VALUE without NUL", i)
		}
	}
	return nil
}

// rlimits turns the spec's limits into helper arguments. A limit above the
// hard limit this process already has is lowered to it: the child could
// never get more, and asking would fail. memory_bytes becomes RLIMIT_DATA
// only when rlimitData is set (the call's memory is not bounded by its
// cgroup).
func (r *Runner) rlimits(l wire.Limits, rlimitData bool) ([nLimits]rlimitArg, error) {
	var out [nLimits]rlimitArg
	want := [nLimits]int64{int64(l.CPUSeconds), l.FsizeBytes, int64(l.Nofile), 0}
	if rlimitData {
		want[3] = l.MemoryBytes
	}
	args, err := LimitArgs(limitResources[:], want[:], !r.noClamp, math.MaxUint64) // RLIM_INFINITY
	if err != nil {
		return out, fmt.Errorf("process: %w", err)
	}
	copy(out[:], args)
	return out, nil
}

// MemoryLimit is how this runner bounds a call's memory_bytes when the
// scope leaves it to the runner: wire.MemoryLimitCgroup when every call
// gets its own memory cgroup (found out once, at the first call), else
// wire.MemoryLimitRlimitData. Exec records it in the enforced scope.
func (r *Runner) MemoryLimit() string {
	if r.parent().Memory() {
		return wire.MemoryLimitCgroup
	}
	return wire.MemoryLimitRlimitData
}

// parent probes the cgroup hierarchy once; nil when runs go without a call
// cgroup (disabled, or no writable pids hierarchy).
func (r *Runner) parent() *cgroup.Parent {
	if r.pidsMax < 0 {
		return nil
	}
	r.cgOnce.Do(func() {
		p, err := cgroup.FindParent()
		if err != nil {
			r.log.Warn("process: no pids cgroup; descendants that leave the process group can outlive a call, a fork bomb is bounded only by the timeout, and memory only per process (RLIMIT_DATA)", "error", err)
			return
		}
		if !p.Memory() {
			r.log.Warn("process: no writable memory cgroup controller; memory_bytes is enforced per process (RLIMIT_DATA)")
		}
		r.cgParent = p
	})
	return r.cgParent
}

// MemoryPlan decides how spec's memory_bytes is enforced given the call
// cgroups' parent (nil: none): the bytes the call cgroup must be limited to
// (0: none) and whether RLIMIT_DATA carries the limit instead. It follows
// spec.Scope.MemoryLimit when set, and refuses a scope that promised a
// memory cgroup this parent cannot give; with no mechanism in the scope it
// takes the cgroup when there is one.
func MemoryPlan(parent *cgroup.Parent, spec sandbox.Spec) (cgroupBytes int64, rlimitData bool, err error) {
	mem := spec.Limits.MemoryBytes
	switch spec.Scope.MemoryLimit {
	case wire.MemoryLimitRlimitData:
		return 0, true, nil
	case wire.MemoryLimitCgroup:
		if mem > 0 && !parent.Memory() {
			return 0, false, errors.New("the enforced scope bounds memory with a cgroup, but no memory cgroup is available to this runner")
		}
		return mem, false, nil
	case "":
		if mem > 0 && parent.Memory() {
			return mem, false, nil
		}
		return 0, true, nil
	default:
		return 0, false, fmt.Errorf("unknown memory limit mechanism %q", spec.Scope.MemoryLimit)
	}
}

// callCgroup returns a new cgroup for one run, or nil when runs go without
// one: disabled (PidsMax < 0), no pids hierarchy (found out once, at the
// first run, and logged once), or this call's cgroup could not be made
// (logged; the run falls back to the process group, as bwrap's runner does
// without RequirePidsLimit) while no memory limit depends on it. The bool
// says the call's memory is bounded by the cgroup. An error means the run
// must not start: its memory bound was to come from a cgroup that could not
// be made.
func (r *Runner) callCgroup(ctx context.Context, spec sandbox.Spec) (*cgroup.Call, bool, error) {
	p := r.parent()
	memBytes, _, err := MemoryPlan(p, spec)
	if err != nil {
		return nil, false, fmt.Errorf("process: %w", err)
	}
	if p == nil {
		return nil, false, nil
	}
	c, err := p.NewCallLimits(cgroup.Limits{Pids: r.pidsMax, MemoryBytes: memBytes})
	if err != nil {
		if memBytes > 0 {
			return nil, false, fmt.Errorf("process: the call's memory cgroup: %w", err)
		}
		r.log.WarnContext(ctx, "process: running without a call cgroup", "error", err)
		return nil, false, nil
	}
	if r.testAfterNewCall != nil {
		r.testAfterNewCall(c)
	}
	return c, memBytes > 0, nil
}

// exitInfo is how the child's wait ended.
type exitInfo struct {
	state *os.ProcessState
	err   error
	at    time.Time
	// killErr says the call cgroup could not be emptied in time.
	killErr error
}

// group tracks the child's process group so that it is signalled only while
// its pgid is still pinned by the unreaped leader, and the call cgroup, if
// any, that holds every descendant wherever its group or session.
type group struct {
	cg     *cgroup.Call
	mu     sync.Mutex
	pid    int
	reaped bool
	// startedAt is taken on the waiting goroutine before the leader can
	// be seen to exit, so a run's duration is never negative; read it
	// only after the start was reported.
	startedAt time.Time
}

// startAndWait starts and waits for cmd on one locked OS thread: PDEATHSIG
// fires when the thread that forked the child exits, so the thread must live
// exactly as long as the child (golang/go#27505).
//
// onThread, when set, prepares the thread (e.g. enters a namespace) before
// the start; such a thread is tainted and is left locked so that it exits
// with this goroutine.
func (g *group) startAndWait(cmd *exec.Cmd, onThread func() error, started chan<- error, done chan<- exitInfo) {
	runtime.LockOSThread()
	if onThread == nil {
		defer runtime.UnlockOSThread()
	} else if err := onThread(); err != nil {
		started <- fmt.Errorf("preparing the start thread: %w", err)
		return
	}
	if err := cmd.Start(); err != nil {
		started <- err
		return
	}
	g.mu.Lock()
	g.pid = cmd.Process.Pid
	g.mu.Unlock()
	g.startedAt = time.Now()
	started <- nil

	// Wait for the leader's exit without reaping it, so its pid (the pgid)
	// cannot be reused while the rest of the group is killed.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, g.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	at := time.Now()
	g.mu.Lock()
	_ = unix.Kill(-g.pid, unix.SIGKILL) // background leftovers never outlive the call
	g.mu.Unlock()
	// Then whatever left the group. Before the leader is reaped, so that
	// its pid (the pgid) stays pinned while stop may still signal it.
	killErr := g.killCgroup()
	g.mu.Lock()
	g.reaped = true
	g.mu.Unlock()
	err := cmd.Wait()
	done <- exitInfo{state: cmd.ProcessState, err: err, at: at, killErr: killErr}
}

// killCgroup SIGKILLs everything in the call cgroup until it is empty,
// for at most cgroupKillTimeout.
func (g *group) killCgroup() error {
	if g.cg == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cgroupKillTimeout)
	defer cancel()
	return g.cg.KillAll(ctx)
}

// signal sends sig to the whole group unless it is already gone.
func (g *group) signal(sig unix.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.reaped && g.pid > 0 {
		_ = unix.Kill(-g.pid, sig)
	}
}

// stop ends the run: SIGTERM to the group, TermGrace, then SIGKILL to the
// group and to everything in the call cgroup.
func (g *group) stop(done <-chan exitInfo) exitInfo {
	g.signal(unix.SIGTERM)
	grace := time.NewTimer(TermGrace)
	defer grace.Stop()
	select {
	case e := <-done:
		return e
	case <-grace.C:
	}
	g.signal(unix.SIGKILL)
	_ = g.killCgroup() // startAndWait repeats it once the leader is dead, and reports
	return <-done
}

// kill ends the run at once: SIGKILL to the group and to everything in the
// call cgroup.
func (g *group) kill(done <-chan exitInfo) exitInfo {
	g.signal(unix.SIGKILL)
	_ = g.killCgroup()
	return <-done
}

// drain copies r into buf until EOF, until r is closed, or until its read
// deadline passes; then it takes whatever r still holds without waiting.
func drain(r *os.File, buf *OutputBuffer) {
	p := make([]byte, 32<<10)
	for {
		n, err := r.Read(p)
		if n > 0 {
			_, _ = buf.Write(p[:n])
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			drainHeld(r, buf, p)
			return
		}
		if err != nil {
			return
		}
	}
}

// drainHeld copies into buf what the pipe r holds now, without waiting
// (its descriptor is non-blocking: r is in the runtime's poller).
func drainHeld(r *os.File, buf *OutputBuffer, p []byte) {
	// A raw read checks the deadline first: lift it (the callback below
	// never asks to wait, so nothing blocks).
	if r.SetReadDeadline(time.Time{}) != nil {
		return
	}
	rc, err := r.SyscallConn()
	if err != nil {
		return
	}
	for more := true; more; {
		more = false
		_ = rc.Read(func(fd uintptr) bool {
			n, err := unix.Read(int(fd), p)
			if n > 0 {
				_, _ = buf.Write(p[:n])
				more = err == nil
			}
			return true // never wait
		})
	}
}

// readStatus returns the helper's refusal, or "" when it set the limits and
// exec'd the target.
func readStatus(f *os.File) string {
	return ReadHelperStatus(f, helperSilent)
}

// helperSilent is readStatus's answer when the helper reported nothing.
const helperSilent = "the helper exited without reporting (does the helper binary call MaybeRunHelper?)"

// pipeSet owns the pipe ends of one run and closes each exactly once.
type pipeSet struct {
	mu    sync.Mutex
	files []*os.File
}

func (p *pipeSet) pipe() (*os.File, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("process: pipe: %w", err)
	}
	p.mu.Lock()
	p.files = append(p.files, r, w)
	p.mu.Unlock()
	return r, w, nil
}

func (p *pipeSet) close(fs ...*os.File) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range fs {
		for i, have := range p.files {
			if have == f {
				_ = f.Close()
				p.files = append(p.files[:i], p.files[i+1:]...)
				break
			}
		}
	}
}

func (p *pipeSet) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.files {
		_ = f.Close()
	}
	p.files = nil
}

// Rlimit is one resource limit as Run sets it.
type Rlimit struct {
	Resource int
	Name     string
	Cur, Max uint64
}

// Rlimits returns the limits Run would set for l, clamped to this process'
// hard limits the same way, so a runner that applies them by other means
// (bwrap: prlimit on a held child) sets exactly the same ones.
// memory_bytes becomes RLIMIT_DATA only when rlimitData is set (MemoryPlan).
func Rlimits(l wire.Limits, rlimitData bool) ([]Rlimit, error) {
	args, err := (&Runner{}).rlimits(l, rlimitData)
	if err != nil {
		return nil, err
	}
	var out []Rlimit
	for i, a := range args {
		if a.Set {
			out = append(out, Rlimit{Resource: limitResources[i].Res, Name: limitResources[i].Name, Cur: a.Soft, Max: a.Hard})
		}
	}
	return out, nil
}
