package bwrap

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/backends/cgroup"
	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// New returns a Runner. It never fails: a missing bwrap, or a kernel
// without user namespaces, shows at Probe (and at every Run, which then
// returns an error rather than run the program unconfined).
func New(opts Options) *Runner {
	r := &Runner{log: opts.Logger, opts: opts}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.bwrap = opts.BwrapPath
	if r.bwrap == "" {
		r.bwrap = "/usr/bin/bwrap"
		if _, err := os.Stat(r.bwrap); err != nil {
			if p, err := exec.LookPath("bwrap"); err == nil {
				r.bwrap = p
			}
		}
	}
	if r.opts.PidsMax == 0 {
		r.opts.PidsMax = 1024
	}
	if len(r.opts.Profile.SkipScan) == 0 {
		r.opts.Profile.SkipScan = []string{"/usr", "/etc", "/opt", "/var/lib", "/nix"}
	}
	r.cache = sandbox.NewCache(r.opts.Profile)
	r.frz = newFreezer()
	r.proc = process.New(process.Options{Logger: r.log, HelperPath: opts.HelperPath})
	r.layout = detectLayout()
	if r.opts.PidsMax > 0 {
		cg, err := cgroup.FindParent()
		if err != nil {
			r.log.Warn("bwrap: no pids cgroup; a fork bomb is bounded only by the timeout and the pid namespace", "error", err)
		}
		r.cgroups = cg
	}
	return r
}

// maxBuildAttempts bounds how many times one call's sandbox is built when
// its granted tree keeps changing under it before the program starts
// (sandbox.ErrTreeChanged): past it the call fails, nothing having run.
const maxBuildAttempts = 4

// Run executes spec inside bubblewrap. The error is for a run that could not
// start or whose sandbox could not be set up (the program never ran); it
// wraps sandbox.ErrUnsafePath when a grant or deny path is unsafe to mount,
// when the granted trees are too large to search for secrets
// (sandbox.ErrScanBudget), or when they kept changing while the sandbox was
// built (sandbox.ErrTreeChanged).
func (r *Runner) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	if len(spec.Argv) == 0 {
		return sandbox.Result{}, errors.New("bwrap: empty argv")
	}
	if _, err := os.Stat(r.bwrap); err != nil {
		return sandbox.Result{}, fmt.Errorf("bwrap: %s: %w", r.bwrap, err)
	}
	for attempt := 1; ; attempt++ {
		res, err := r.runOnce(ctx, spec)
		if err == nil || !errors.Is(err, sandbox.ErrTreeChanged) || attempt == maxBuildAttempts || ctx.Err() != nil {
			return res, err
		}
		r.log.DebugContext(ctx, "bwrap: granted tree changed while the sandbox was built; building it again", "attempt", attempt, "error", err)
	}
}

// runOnce builds the sandbox from the scan cache and runs the program in it.
// Once bwrap has every mount in place, and before the program starts, the
// profile's window is verified: a change in the granted trees since the
// profile was computed that could leave a mask on the wrong file discards
// this sandbox (ErrTreeChanged). After the run, the autorun guard moves
// aside what the program planted.
func (r *Runner) runOnce(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	// The running programs of other calls that could write to the trees
	// this sandbox searches are stopped until its mounts are verified
	// (freeze_linux.go).
	hold := r.frz.begin(sandbox.ScanRoots(spec.Scope.FSGrants, r.opts.Profile.SkipScan))
	defer hold.end()
	prof, win, err := r.cache.Build(spec)
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("bwrap: %w", err)
	}
	released := false
	defer func() {
		if !released {
			win.Close()
		}
	}()

	var files openFiles
	defer files.closeAll()
	data := func(b []byte) (*os.File, error) {
		rd, wr, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("bwrap: pipe: %w", err)
		}
		files.add(rd)
		defer wr.Close()
		if len(b) > 60<<10 {
			return nil, errors.New("bwrap: data too large for a pipe")
		}
		if _, err := wr.Write(b); err != nil {
			return nil, fmt.Errorf("bwrap: writing sandbox data: %w", err)
		}
		return rd, nil
	}
	filter, err := seccompFilter()
	if err != nil {
		return sandbox.Result{}, err
	}
	// memory_bytes: the call cgroup's memory limit, or RLIMIT_DATA without
	// one (process.MemoryPlan; the scope may have fixed the mechanism).
	memBytes, rlimitData, err := process.MemoryPlan(r.cgroups, spec)
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("bwrap: %w", err)
	}
	limits, err := process.Rlimits(spec.Limits, rlimitData)
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("bwrap: %w", err)
	}
	// ExtraFiles become fds 3, 4, ... in this order (Launch.Direct).
	var extra []*os.File
	f := fds{seccomp: 3, status: 4, passwd: 5, group: 6, hosts: 7, block: 8, sync: -1}
	seccompR, err := data(filter)
	if err != nil {
		return sandbox.Result{}, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("bwrap: pipe: %w", err)
	}
	files.add(statusR)
	passwdR, err := data([]byte(passwdData(prof.Home)))
	if err != nil {
		return sandbox.Result{}, err
	}
	groupR, err := data([]byte(groupData))
	if err != nil {
		return sandbox.Result{}, err
	}
	hostsR, err := data([]byte(hostsData))
	if err != nil {
		return sandbox.Result{}, err
	}
	extra = append(extra, seccompR, statusW, passwdR, groupR, hostsR)

	// bwrap's child blocks on --block-fd until the runner has applied the
	// rlimits to it (prlimit) and moved it into the call's pids cgroup, so
	// nothing runs unlimited and nothing it forks escapes the cgroup.
	var cg *cgroup.Call
	if r.cgroups != nil {
		cg, err = r.cgroups.NewCallLimits(cgroup.Limits{Pids: r.opts.PidsMax, MemoryBytes: memBytes})
		if err != nil && (r.opts.RequirePidsLimit || memBytes > 0) {
			return sandbox.Result{}, err
		}
		if err != nil {
			r.log.WarnContext(ctx, "bwrap: running without a pids cgroup", "error", err)
		}
	} else if r.opts.RequirePidsLimit && r.opts.PidsMax > 0 {
		return sandbox.Result{}, errors.New("bwrap: a pids cgroup is required but none is available")
	}
	if cg != nil {
		// The pid namespace is already torn down when Run returns; the
		// kernel may still be releasing its tasks, so the empty cgroup is
		// removed off the call's path (Remove finishes in the background).
		defer cg.Remove()
	}
	blockR, blockW, err := os.Pipe()
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("bwrap: pipe: %w", err)
	}
	files.add(blockW)
	extra = append(extra, blockR)
	// The autorun guard's read-only binds, by descriptor; a target that
	// moved since the profile was computed means building it again.
	pinned, err := prof.Pin()
	if err != nil {
		for _, e := range extra {
			_ = e.Close()
		}
		return sandbox.Result{}, fmt.Errorf("bwrap: %w", err)
	}
	for _, p := range pinned {
		files.add(p)
		f.autorun = append(f.autorun, 3+len(extra))
		extra = append(extra, p)
	}
	// The mount check's signal (gate_linux.go).
	var syncF *os.File
	var ready <-chan struct{}
	if win.Active() {
		var wd int
		syncF, wd, ready, err = r.sync.watch()
		if err != nil {
			for _, e := range extra {
				_ = e.Close()
			}
			return sandbox.Result{}, err
		}
		defer r.sync.done(syncF, wd)
		f.sync = 3 + len(extra)
		extra = append(extra, syncF)
	}

	env := spec.Env
	var net *netSandbox
	switch prof.Network.Posture {
	case wire.PostureAllowlist:
		net, err = r.newNetSandbox(ctx, prof.Network.Allow)
		if err != nil {
			for _, e := range extra {
				_ = e.Close()
			}
			return sandbox.Result{}, err
		}
		defer net.close()
		env = withEnv(env, proxyEnv())
		prof.EnvNames = envNames(env)
	}

	inner := spec
	inner.Dir = "/"
	inner.Env = env
	// An exec restriction cannot be put on bwrap (Landlock forbids the
	// mounts it makes): the helper, bound read-only into the sandbox,
	// restricts itself there and then execs the program.
	argv, roFiles := spec.Argv, []string(nil)
	if spec.ExecAllow != nil {
		helper, err := r.proc.HelperPath()
		if err != nil {
			return sandbox.Result{}, fmt.Errorf("bwrap: the exec-restrict helper: %w", err)
		}
		if process.LandlockABI() < 1 {
			return sandbox.Result{}, process.ErrNoLandlock
		}
		allow := append(process.ExecChain(spec.Argv[0]), spec.ExecAllow...)
		argv = append([]string{helper}, process.RestrictArgs(allow, spec.Argv)...)
		roFiles = []string{helper}
		inner.ExecAllow = nil
	}
	launch := process.Launch{
		Argv:       append([]string{r.bwrap}, r.layout.args(prof, f, argv, roFiles...)...),
		ExtraFiles: extra,
		Direct:     true,
	}
	if net != nil {
		launch.OnThread = net.enter
	}

	st := &statusReader{cg: cg, block: blockW, limits: limits}
	var running *runningCall // set by the gate, read after statusDone
	exited := make(chan struct{})
	st.gate = func(pid int) error {
		if win.Active() {
			err := awaitReady(ctx, ready, exited, syncF)
			if err != nil {
				// bwrap fails when a bind's source vanished (a tree
				// change since the profile): then build again.
				if verr := win.Verify(); errors.Is(verr, sandbox.ErrTreeChanged) {
					err = verr
				} else {
					err = fmt.Errorf("bwrap: waiting for the sandbox's mounts: %w", err)
				}
			} else {
				err = win.Verify()
			}
			if err != nil {
				hold.end()
				return err
			}
		}
		running = hold.release(prof.ReadWrite, cg, pid)
		return nil
	}

	statusDone := make(chan struct{})
	go func() {
		defer close(statusDone)
		st.read(statusR)
	}()

	res, runErr := r.proc.RunLaunch(ctx, inner, launch)
	close(exited)
	// bwrap is gone; its status pipe reaches EOF unless a stray holder
	// keeps it open, which the deadline covers.
	_ = statusR.SetReadDeadline(time.Now().Add(time.Second))
	<-statusDone
	r.frz.unregister(running)
	if net != nil {
		stats := net.finish()
		res.Network = &stats
	}
	if st.wasReleased() {
		// The program may have run: the guard looks at what it left.
		released = true
		res.Autorun = win.Finish()
		for _, ch := range res.Autorun {
			r.log.WarnContext(ctx, "bwrap: autorun guard: the run created or replaced a file that runs later for someone else",
				"path", ch.Path, "reason", ch.Reason, "moved_to", ch.QuarantinedAs, "error", ch.Error)
		}
	}
	if runErr != nil {
		return sandbox.Result{}, fmt.Errorf("bwrap: %w", runErr)
	}
	if err := st.error(); err != nil {
		return sandbox.Result{}, err
	}
	exit, ran := st.exit()
	if ran && spec.ExecAllow != nil && exit == process.HelperExitCode && strings.HasPrefix(lastLine(strings.TrimSpace(res.Stderr)), process.RestrictRefusal) {
		return sandbox.Result{}, fmt.Errorf("bwrap: the program's exec restriction could not be applied: %s", lastLine(strings.TrimSpace(res.Stderr)))
	}
	switch {
	case ran:
		res.ExitCode, res.Signal = exit, nil
		// bwrap reports a death by signal n as exit status 128+n; it cannot
		// be told apart from exit(128+n), so like a shell we name the signal.
		if exit > 128 && exit < 128+32 {
			if name := unix.SignalName(unix.Signal(exit - 128)); name != "" {
				res.ExitCode, res.Signal = -1, &name
			}
		}
	case res.TimedOut || res.Canceled || res.OutputCapped:
		// Stopped by us; the process runner's signal is the honest answer.
	default:
		msg := strings.TrimSpace(res.Stderr)
		r.log.ErrorContext(ctx, "bwrap: the sandbox could not be set up", "argv0", spec.Argv[0], "bwrap_stderr", lastLine(msg))
		return sandbox.Result{}, fmt.Errorf("bwrap: the sandbox could not be set up or the program could not be executed: %s", lastLine(msg))
	}
	res.Profile = &prof
	return res, nil
}

func envNames(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		out = append(out, kvName(kv))
	}
	slices.Sort(out)
	return out
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 512 {
		s = s[:512]
	}
	return s
}

// statusReader follows bwrap's --json-status-fd: the child's pid (to move
// it into the pids cgroup before releasing --block-fd) and, only when the
// program was really exec'd, its exit code.
type statusReader struct {
	cg     *cgroup.Call
	block  *os.File
	limits []process.Rlimit
	// gate, when set, runs after the limits and the cgroup and before the
	// child is released; an error kills the child instead.
	gate func(pid int) error

	mu       sync.Mutex
	err      error
	code     int
	gotExit  bool
	released bool
}

func (s *statusReader) read(rd io.Reader) {
	released := false
	defer func() {
		if !released {
			_ = s.block.Close() // only reached when the child never started
		}
	}()
	sc := bufio.NewScanner(rd)
	for sc.Scan() {
		var m struct {
			ChildPID *int `json:"child-pid"`
			ExitCode *int `json:"exit-code"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue
		}
		if m.ChildPID != nil && !released {
			if err := s.release(*m.ChildPID); err != nil {
				// Fail closed: the child is still held before exec.
				_ = unix.Kill(*m.ChildPID, unix.SIGKILL)
				s.setErr(err)
				continue
			}
			released = true
		}
		if m.ExitCode != nil {
			s.mu.Lock()
			s.code, s.gotExit = *m.ExitCode, true
			s.mu.Unlock()
		}
	}
}

// release limits the held child, moves it into the cgroup and lets it go.
func (s *statusReader) release(pid int) error {
	for _, l := range s.limits {
		want := unix.Rlimit{Cur: l.Cur, Max: l.Max}
		if err := unix.Prlimit(pid, l.Resource, &want, nil); err != nil {
			return fmt.Errorf("bwrap: setting %s on the sandbox: %w", l.Name, err)
		}
		var got unix.Rlimit
		if err := unix.Prlimit(pid, l.Resource, nil, &got); err != nil || got != want {
			return fmt.Errorf("bwrap: %s on the sandbox is %d:%d, want %d:%d (%v)", l.Name, got.Cur, got.Max, want.Cur, want.Max, err)
		}
	}
	if s.cg != nil {
		if err := s.cg.Add(pid); err != nil {
			return err
		}
	}
	if s.gate != nil {
		if err := s.gate(pid); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.released = true
	s.mu.Unlock()
	if _, err := s.block.Write([]byte{'1'}); err != nil {
		return fmt.Errorf("bwrap: releasing the sandbox: %w", err)
	}
	_ = s.block.Close()
	return nil
}

// wasReleased reports whether the child was let go (the program may have
// run).
func (s *statusReader) wasReleased() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.released
}

func (s *statusReader) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

func (s *statusReader) error() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *statusReader) exit() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.code, s.gotExit
}

// openFiles closes the runner's own descriptors once, at the end.
type openFiles struct{ fs []*os.File }

func (o *openFiles) add(f *os.File) { o.fs = append(o.fs, f) }
func (o *openFiles) closeAll() {
	for _, f := range o.fs {
		_ = f.Close()
	}
}
