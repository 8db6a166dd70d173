package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"

	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// Command builds a long-running program's command inside bubblewrap (an
// upstream MCP server on stdio): the same mount layout, namespaces,
// seccomp filter and dropped capabilities as a call, over the scope's
// grants, with stdin, stdout and stderr left to the caller. The scope's
// limits hold as for a call: bwrap's child waits on --block-fd until the
// rlimits (cpu_seconds, fsize_bytes, nofile, and memory_bytes as
// RLIMIT_DATA without a memory cgroup) are set on it and it is in its own
// cgroup (pids.max, and memory_bytes where a memory cgroup is available),
// so nothing the server runs is ever unlimited; a limit that cannot be set
// kills it before it starts. A server that may write to a tree another
// sandbox's setup searches is stopped during that setup, as a call is. Unlike Run it has no timeout (timeout_s and
// max_output_bytes do not apply to a server that runs on) and no egress
// proxy: posture allowlist is refused (off or full only). release closes
// the descriptors bwrap read its data from and removes the cgroup (killing
// whatever is left in it); call it once the program has exited.
func (r *Runner) Command(ctx context.Context, argv, env []string, scope wire.Scope) (*exec.Cmd, func(), error) {
	if len(argv) == 0 {
		return nil, nil, errors.New("bwrap: empty argv")
	}
	if _, err := os.Stat(r.bwrap); err != nil {
		return nil, nil, fmt.Errorf("bwrap: %s: %w", r.bwrap, err)
	}
	if scope.Network.Posture == wire.PostureAllowlist {
		return nil, nil, errors.New("bwrap: a long-running program takes network posture off or full, not allowlist")
	}
	spec := sandbox.Spec{Argv: argv, Env: env, Scope: scope, Limits: scope.Limits}
	memBytes, rlimitData, err := process.MemoryPlan(r.cgroups, spec)
	if err != nil {
		return nil, nil, fmt.Errorf("bwrap: %w", err)
	}
	limits, err := process.Rlimits(scope.Limits, rlimitData)
	if err != nil {
		return nil, nil, fmt.Errorf("bwrap: %w", err)
	}
	// Like a call's setup, this one stops the running programs that could
	// write to the trees it searches until its child is released; then the
	// server is one of them, stopped in turn while another sandbox is set
	// up over a tree it may write (freeze_linux.go).
	hold := r.frz.begin(sandbox.ScanRoots(scope.FSGrants, r.opts.Profile.SkipScan))
	prof, win, err := r.cache.Build(spec)
	if err != nil {
		hold.end()
		return nil, nil, fmt.Errorf("bwrap: %w", err)
	}
	win.Close() // no post-run autorun check for a server that runs on
	filter, err := seccompFilter()
	if err != nil {
		hold.end()
		return nil, nil, err
	}
	c := &bwrapCall{prof: prof}
	if err := c.openDataFiles(filter); err != nil {
		hold.end()
		c.files.closeAll()
		return nil, nil, err
	}
	cg, err := r.callCgroup(ctx, memBytes)
	if err != nil {
		hold.end()
		c.files.closeAll()
		c.closeExtra()
		return nil, nil, err
	}
	blockR, blockW, err := os.Pipe()
	if err != nil {
		hold.end()
		c.files.closeAll()
		c.closeExtra()
		if cg != nil {
			cg.Remove()
		}
		return nil, nil, fmt.Errorf("bwrap: pipe: %w", err)
	}
	c.files.add(blockW)
	c.fds.block = 3 + len(c.extra)
	c.extra = append(c.extra, blockR)
	cmd := exec.CommandContext(ctx, r.bwrap, r.layout.args(c.prof, c.fds, argv)...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.ExtraFiles = c.extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Once the command starts, bwrap reports its child's pid on the status
	// pipe; the reader limits it, moves it into the cgroup and releases it
	// (or kills it when that fails). A command that never starts leaves the
	// reader waiting until release closes the pipe.
	var running atomic.Pointer[runningCall]
	st := &statusReader{cg: cg, block: blockW, limits: limits, gate: func(pid int) error {
		running.Store(hold.release(c.prof.ReadWrite, cg, pid))
		return nil
	}}
	go func() {
		st.read(c.statusR)
		if err := st.error(); err != nil {
			r.log.ErrorContext(ctx, "bwrap: the program's limits or cgroup could not be applied; it was killed before it ran", "argv0", argv[0], "error", err)
		}
	}()
	release := func() {
		hold.end() // a command that never started
		c.files.closeAll()
		c.closeExtra()
		r.frz.unregister(running.Load())
		if cg != nil {
			cg.Remove()
		}
	}
	return cmd, release, nil
}
