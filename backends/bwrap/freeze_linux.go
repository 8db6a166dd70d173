package bwrap

import (
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/backends/cgroup"
	"github.com/portcullis/portcullis/backends/sandbox"
)

// While bwrap builds a sandbox it resolves every mount source and
// destination by path, and creates a missing destination with stat then
// creat(2), which truncates. A program in another sandbox with write access
// to a directory on such a path, renaming directories in a loop, can
// therefore move a masked secret (or a guarded file) into a path between
// bwrap's stat and its creat, and have bwrap truncate it; or leave mount
// points behind; or swap a bind's source for a symlink. The masks' check
// (Window.Verify) keeps such a sandbox from running, but cannot undo a
// truncation.
//
// So the runner stops (SIGSTOP) every running program of its own calls that
// could change a path the new sandbox's bwrap resolves, until the sandbox's
// mounts are verified (a few milliseconds), and continues them (SIGCONT)
// afterwards. A call released while another's setup holds it starts
// stopped. Only calls with a pids cgroup can be enumerated; others are not
// stopped (docs/sandbox.md).
//
// A running program can change a path when one of its read-write grants
// lies strictly above it: it can rename the path, or a directory on its
// way, but not the grant's own mount point. A setup holds such programs
// for every path bwrap will resolve (setupHold.paths, the sources and
// destinations of the final argv: extend), and, from before its profile is
// computed, every program whose read-write grant overlaps a tree it
// searches when that tree may hold something the profile masks or binds
// read-only (setupHold.roots). A sandbox whose mounts all lie outside
// every other call's writable trees (a project grant with no secret-shaped
// or guarded entry, say) stops nobody: its bwrap creates nothing in them.

// freezer tracks the runner's running calls and the setups in progress.
type freezer struct {
	mu      sync.Mutex
	running map[*runningCall]struct{}
	setups  map[*setupHold]struct{}
}

// runningCall is a call whose program may run.
type runningCall struct {
	rw      []string     // its read-write grants
	cg      *cgroup.Call // its processes
	holds   int          // setups holding it stopped
	stopped []int        // the pids stopped for them
}

// setupHold is a setup in progress and the calls it holds stopped.
type setupHold struct {
	f *freezer
	// roots: a running call whose read-write grant overlaps one is held.
	roots []string
	// paths are host paths bwrap resolves: a running call that may write
	// a directory strictly above one is held.
	paths []string
	held  []*runningCall
	done  bool
}

func newFreezer() *freezer {
	return &freezer{running: map[*runningCall]struct{}{}, setups: map[*setupHold]struct{}{}}
}

func overlaps(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if sandbox.Within(x, y) || sandbox.Within(y, x) {
				return true
			}
		}
	}
	return false
}

// above reports whether some path lies strictly below one of dirs: a
// program that may write in dirs can rename it or a directory on its way.
func above(dirs, paths []string) bool {
	for _, d := range dirs {
		for _, p := range paths {
			if p != d && sandbox.Within(p, d) {
				return true
			}
		}
	}
	return false
}

// begin stops the running calls that could write to roots, and keeps any
// call released meanwhile stopped, until end.
func (f *freezer) begin(roots []string) *setupHold { return f.beginHold(roots, nil) }

// beginHold stops the running calls that could write to roots or change
// paths (setupHold), and keeps any call released meanwhile that could
// stopped, until end. extend adds paths.
func (f *freezer) beginHold(roots, paths []string) *setupHold {
	s := &setupHold{f: f, roots: roots, paths: paths}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setups[s] = struct{}{}
	for rc := range f.running {
		if s.holds(rc.rw) {
			s.hold(rc)
		}
	}
	return s
}

// holds reports whether this setup must stop a call that may write rw.
func (s *setupHold) holds(rw []string) bool {
	return overlaps(rw, s.roots) || above(rw, s.paths)
}

// extend holds, from now on, the running calls that could change paths
// too: called with every path bwrap will resolve, before it starts.
func (s *setupHold) extend(paths []string) { s.add(nil, paths) }

// extendRoots is extend for trees: the running calls whose read-write
// grants overlap roots are held from now on.
func (s *setupHold) extendRoots(roots []string) { s.add(roots, nil) }

// add widens the setup's roots and paths and holds the running calls the
// wider setup must stop (holds) that it does not hold yet.
func (s *setupHold) add(roots, paths []string) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.done {
		return
	}
	s.roots = append(s.roots, roots...)
	s.paths = append(s.paths, paths...)
	for rc := range f.running {
		if !slices.Contains(s.held, rc) && (overlaps(rc.rw, roots) || above(rc.rw, paths)) {
			s.hold(rc)
		}
	}
}

func (s *setupHold) hold(rc *runningCall) {
	s.held = append(s.held, rc)
	rc.holds++
	if rc.holds == 1 {
		rc.stopped = stopAll(rc.cg)
	}
}

// end continues what begin stopped (once; safe to call again).
func (s *setupHold) end() {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.endLocked()
}

func (s *setupHold) endLocked() {
	if s.done {
		return
	}
	s.done = true
	delete(s.f.setups, s)
	for _, rc := range s.held {
		rc.holds--
		if rc.holds == 0 {
			for _, pid := range rc.stopped {
				_ = unix.Kill(pid, unix.SIGCONT)
			}
			rc.stopped = nil
		}
	}
	s.held = nil
}

// release ends this setup and records its call, about to be released, as
// running, in one step: a setup that begins afterwards finds it and stops
// it. When another setup in progress holds its tree, its (still blocked)
// sandbox process is stopped first, so that it starts only when that setup
// ends. A call that cannot write to any tree, or has no cgroup to
// enumerate, is not recorded (nil).
func (s *setupHold) release(rw []string, cg *cgroup.Call, pid int) *runningCall {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	s.endLocked()
	if len(rw) == 0 || cg == nil {
		return nil
	}
	rc := &runningCall{rw: rw, cg: cg}
	f.running[rc] = struct{}{}
	for other := range f.setups {
		if other.holds(rw) {
			other.held = append(other.held, rc)
			rc.holds++
		}
	}
	if rc.holds > 0 {
		_ = unix.Kill(pid, unix.SIGSTOP)
		rc.stopped = []int{pid}
	}
	return rc
}

// unregister forgets a call whose program has ended.
func (f *freezer) unregister(rc *runningCall) {
	if rc == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.running, rc)
	rc.stopped = nil // its processes are gone: no SIGCONT to a reused pid
}

// stopAll sends SIGSTOP to every process of cg, again for processes forked
// meanwhile. It does not wait for them to stop: a signal is taken on the way
// back from a system call, so a rename in flight completes within
// microseconds, before the profile is even computed, and anything that still
// lands later is seen by the mount check. Waiting, under the freezer's lock,
// would let one slow task hold every other call's setup.
func stopAll(cg *cgroup.Call) []int {
	var stopped []int
	if cg == nil {
		return nil // not enumerable (only the freezer's own tests make one)
	}
	for range 8 {
		pids, err := cg.Pids()
		if err != nil {
			return stopped
		}
		fresh := false
		for _, pid := range pids {
			if !slices.Contains(stopped, pid) {
				_ = unix.Kill(pid, unix.SIGSTOP)
				stopped = append(stopped, pid)
				fresh = true
			}
		}
		if !fresh {
			break
		}
	}
	return stopped
}
