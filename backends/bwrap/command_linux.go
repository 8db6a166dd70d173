package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// Command builds a long-running program's command inside bubblewrap (an
// upstream MCP server on stdio): the same mount layout, namespaces,
// seccomp filter and dropped capabilities as a call, over the scope's
// grants, with stdin, stdout and stderr left to the caller. Unlike Run it
// has no timeout, no per-call cgroup and no egress proxy: posture
// allowlist is refused (off or full only). release closes the descriptors
// bwrap read its data from; call it once the program has exited.
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
	prof, win, err := r.cache.Build(sandbox.Spec{Argv: argv, Env: env, Scope: scope, Limits: scope.Limits})
	if err != nil {
		return nil, nil, fmt.Errorf("bwrap: %w", err)
	}
	win.Close() // no post-run autorun check for a server that runs on
	filter, err := seccompFilter()
	if err != nil {
		return nil, nil, err
	}
	c := &bwrapCall{prof: prof}
	if err := c.openDataFiles(filter); err != nil {
		c.files.closeAll()
		return nil, nil, err
	}
	c.fds.block = -1
	cmd := exec.CommandContext(ctx, r.bwrap, r.layout.args(c.prof, c.fds, argv)...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.ExtraFiles = c.extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	release := func() {
		c.files.closeAll()
		c.closeExtra()
	}
	return cmd, release, nil
}
