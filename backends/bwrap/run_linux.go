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
	// The running programs of other calls that could change a path this
	// sandbox's bwrap resolves are stopped until its mounts are verified
	// (freeze_linux.go): from before the profile is computed, those that
	// could write to the trees it searches when these may hold something
	// to mask or bind read-only, else those that could move a grant; and,
	// once the argv is built (launch), those that could change any path in
	// it.
	roots := sandbox.ScanRoots(spec.Scope.FSGrants, r.opts.Profile.SkipScan)
	var hold *setupHold
	if r.cache.MayMask(spec) {
		hold = r.frz.beginHold(roots, nil)
	} else {
		hold = r.frz.beginHold(nil, grantPaths(spec.Scope.FSGrants))
	}
	defer hold.end()
	prof, win, err := r.cache.Build(spec)
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("bwrap: %w", err)
	}
	c := &bwrapCall{spec: spec, prof: prof, win: win, hold: hold, roots: roots}
	defer func() {
		if !c.released {
			win.Close()
		}
	}()
	defer c.files.closeAll()

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
	if c.limits, err = process.Rlimits(spec.Limits, rlimitData); err != nil {
		return sandbox.Result{}, fmt.Errorf("bwrap: %w", err)
	}
	if err := c.openDataFiles(filter); err != nil {
		return sandbox.Result{}, err
	}
	// bwrap's child blocks on --block-fd until the runner has applied the
	// rlimits to it (prlimit) and moved it into the call's pids cgroup, so
	// nothing runs unlimited and nothing it forks escapes the cgroup.
	if c.cg, err = r.callCgroup(ctx, memBytes); err != nil {
		return sandbox.Result{}, err
	}
	if c.cg != nil {
		// The pid namespace is already torn down when Run returns; the
		// kernel may still be releasing its tasks, so the empty cgroup is
		// removed off the call's path (Remove finishes in the background).
		defer c.cg.Remove()
	}
	blockR, blockW, err := os.Pipe()
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("bwrap: pipe: %w", err)
	}
	c.files.add(blockW)
	c.blockW = blockW
	c.extra = append(c.extra, blockR)
	// The autorun guard's read-only binds, by descriptor; a target that
	// moved since the profile was computed means building it again.
	pinned, err := c.prof.Pin()
	if err != nil {
		c.closeExtra()
		return sandbox.Result{}, fmt.Errorf("bwrap: %w", err)
	}
	for _, p := range pinned {
		c.files.add(p)
		c.fds.autorun = append(c.fds.autorun, 3+len(c.extra))
		c.extra = append(c.extra, p)
	}
	// The mount check's signal (gate_linux.go).
	if win.Active() {
		var wd int
		c.syncF, wd, c.ready, err = r.sync.watch()
		if err != nil {
			c.closeExtra()
			return sandbox.Result{}, err
		}
		defer r.sync.done(c.syncF, wd)
		c.fds.sync = 3 + len(c.extra)
		c.extra = append(c.extra, c.syncF)
	}
	c.env = spec.Env
	if c.prof.Network.Posture == wire.PostureAllowlist {
		if c.net, err = r.newNetSandbox(ctx, c.prof.Network.Allow); err != nil {
			c.closeExtra()
			return sandbox.Result{}, err
		}
		defer c.net.close()
		c.env = withEnv(c.env, proxyEnv())
		c.prof.EnvNames = envNames(c.env)
	}
	return r.launch(ctx, c)
}

// bwrapCall is one sandboxed run as runOnce sets it up and launch runs it.
type bwrapCall struct {
	spec sandbox.Spec
	prof sandbox.Profile
	win  *sandbox.Window
	hold *setupHold
	// roots are the trees the profile searched.
	roots []string
	// released: the program may have run, so the window's autorun guard
	// has finished (and closed) it.
	released bool

	files  openFiles
	extra  []*os.File // ExtraFiles: fds 3, 4, ... in this order (Launch.Direct)
	fds    fds
	limits []process.Rlimit
	// statusR is bwrap's --json-status-fd; blockW releases its child.
	statusR, blockW *os.File
	cg              *cgroup.Call
	syncF           *os.File
	ready           <-chan struct{}
	net             *netSandbox
	env             []string
}

// openDataFiles opens the pipes bwrap reads its data from (the seccomp
// filter, /etc/passwd, /etc/group, /etc/hosts) and its status pipe, in
// the order of fds.
func (c *bwrapCall) openDataFiles(filter []byte) error {
	c.fds = fds{seccomp: 3, status: 4, passwd: 5, group: 6, hosts: 7, block: 8, sync: -1}
	data := func(b []byte) (*os.File, error) {
		rd, wr, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("bwrap: pipe: %w", err)
		}
		c.files.add(rd)
		defer wr.Close()
		if len(b) > 60<<10 {
			return nil, errors.New("bwrap: data too large for a pipe")
		}
		if _, err := wr.Write(b); err != nil {
			return nil, fmt.Errorf("bwrap: writing sandbox data: %w", err)
		}
		return rd, nil
	}
	seccompR, err := data(filter)
	if err != nil {
		return err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("bwrap: pipe: %w", err)
	}
	c.files.add(statusR)
	c.statusR = statusR
	passwdR, err := data([]byte(passwdData(c.prof.Home)))
	if err != nil {
		return err
	}
	groupR, err := data([]byte(groupData))
	if err != nil {
		return err
	}
	hostsR, err := data([]byte(hostsData))
	if err != nil {
		return err
	}
	c.extra = append(c.extra, seccompR, statusW, passwdR, groupR, hostsR)
	return nil
}

// closeExtra closes the descriptors handed to bwrap so far (a setup step
// failed before launch).
func (c *bwrapCall) closeExtra() {
	for _, e := range c.extra {
		_ = e.Close()
	}
}

// callCgroup is the call's own cgroup (pids, and memory when memBytes is
// set), or nil where none is available and none is required.
func (r *Runner) callCgroup(ctx context.Context, memBytes int64) (*cgroup.Call, error) {
	if r.cgroups == nil {
		if r.opts.RequirePidsLimit && r.opts.PidsMax > 0 {
			return nil, errors.New("bwrap: a pids cgroup is required but none is available")
		}
		return nil, nil
	}
	cg, err := r.cgroups.NewCallLimits(cgroup.Limits{Pids: r.opts.PidsMax, MemoryBytes: memBytes})
	if err != nil && (r.opts.RequirePidsLimit || memBytes > 0) {
		return nil, err
	}
	if err != nil {
		r.log.WarnContext(ctx, "bwrap: running without a pids cgroup", "error", err)
	}
	return cg, nil
}

// execArgv is the argv bwrap runs and the files it binds read-only for
// it. An exec restriction cannot be put on bwrap (Landlock forbids the
// mounts it makes): the helper, bound read-only into the sandbox,
// restricts itself there and then execs the program.
func (r *Runner) execArgv(spec sandbox.Spec) (argv, roFiles []string, err error) {
	if spec.ExecAllow == nil {
		return spec.Argv, nil, nil
	}
	helper, err := r.proc.HelperPath()
	if err != nil {
		return nil, nil, fmt.Errorf("bwrap: the exec-restrict helper: %w", err)
	}
	if process.LandlockABI() < 1 {
		return nil, nil, process.ErrNoLandlock
	}
	allow := append(process.ExecChain(spec.Argv[0]), spec.ExecAllow...)
	return append([]string{helper}, process.RestrictArgs(allow, spec.Argv)...), []string{helper}, nil
}

// launch starts bwrap on the set-up call, holds its child until its mounts
// are verified (the gate), and reads how it ended.
func (r *Runner) launch(ctx context.Context, c *bwrapCall) (sandbox.Result, error) {
	inner := c.spec
	inner.Dir = "/"
	inner.Env = c.env
	argv, roFiles, err := r.execArgv(c.spec)
	if err != nil {
		return sandbox.Result{}, err
	}
	if c.spec.ExecAllow != nil {
		inner.ExecAllow = nil // the helper applies it inside
	}
	launch := process.Launch{
		Argv:       append([]string{r.bwrap}, r.layout.args(c.prof, c.fds, argv, roFiles...)...),
		ExtraFiles: c.extra,
		Direct:     true,
	}
	if c.net != nil {
		launch.OnThread = c.net.enter
	}
	// Before bwrap starts: hold every running call that could change a
	// path it resolves (freeze_linux.go).
	if paths, ok := hostPaths(launch.Argv[1:]); ok {
		c.hold.extend(paths)
	} else {
		c.hold.extendRoots(c.roots)
	}

	st := &statusReader{cg: c.cg, block: c.blockW, limits: c.limits}
	var running *runningCall // set by the gate, read after statusDone
	exited := make(chan struct{})
	st.gate = func(pid int) error {
		if c.win.Active() {
			err := awaitReady(ctx, c.ready, exited, c.syncF)
			if err != nil {
				// bwrap fails when a bind's source vanished (a tree
				// change since the profile): then build again.
				if verr := c.win.Verify(); errors.Is(verr, sandbox.ErrTreeChanged) {
					err = verr
				} else {
					err = fmt.Errorf("bwrap: waiting for the sandbox's mounts: %w", err)
				}
			} else {
				err = c.win.Verify()
			}
			if err != nil {
				c.hold.end()
				return err
			}
		}
		running = c.hold.release(c.prof.ReadWrite, c.cg, pid)
		return nil
	}

	statusDone := make(chan struct{})
	go func() {
		defer close(statusDone)
		st.read(c.statusR)
	}()

	res, runErr := r.proc.RunLaunch(ctx, inner, launch)
	close(exited)
	// bwrap is gone; its status pipe reaches EOF unless a stray holder
	// keeps it open, which the deadline covers.
	_ = c.statusR.SetReadDeadline(time.Now().Add(time.Second))
	<-statusDone
	r.frz.unregister(running)
	if c.net != nil {
		stats := c.net.finish()
		res.Network = &stats
	}
	if st.wasReleased() {
		// The program may have run: the guard looks at what it left.
		c.released = true
		res.Autorun = c.win.Finish()
		for _, ch := range res.Autorun {
			r.log.WarnContext(ctx, "bwrap: autorun guard: the run created or replaced a file that runs later for someone else",
				"path", ch.Path, "reason", ch.Reason, "moved_to", ch.QuarantinedAs, "error", ch.Error)
		}
	}
	if runErr != nil {
		return sandbox.Result{}, fmt.Errorf("bwrap: %w", runErr)
	}
	return r.exitOf(ctx, c, st, res)
}

// exitOf is how the program ended, from bwrap's status: its exit code or
// signal, or the error of a sandbox that could not be set up.
func (r *Runner) exitOf(ctx context.Context, c *bwrapCall, st *statusReader, res sandbox.Result) (sandbox.Result, error) {
	if err := st.error(); err != nil {
		return sandbox.Result{}, err
	}
	exit, ran := st.exit()
	if ran && c.spec.ExecAllow != nil && exit == process.HelperExitCode && strings.HasPrefix(lastLine(strings.TrimSpace(res.Stderr)), process.RestrictRefusal) {
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
		r.log.ErrorContext(ctx, "bwrap: the sandbox could not be set up", "argv0", c.spec.Argv[0], "bwrap_stderr", lastLine(msg))
		return sandbox.Result{}, fmt.Errorf("bwrap: the sandbox could not be set up or the program could not be executed: %s", lastLine(msg))
	}
	res.Profile = &c.prof
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
				if !errors.Is(err, unix.ESRCH) {
					s.setErr(err)
				}
				// ESRCH: the child is already gone (its sandbox setup
				// failed, say a mount whose path an agent moved); nothing
				// ran, and bwrap's exit says why, as for any setup failure.
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

// grantPaths are the grants' paths: bind sources bwrap resolves.
func grantPaths(grants []wire.FSGrant) []string {
	out := make([]string, 0, len(grants))
	for _, g := range grants {
		out = append(out, g.Path)
	}
	return out
}
