package bwrap

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// Probe really runs /bin/true through the runner, with the full flag set,
// seccomp filter and posture off, so that a missing bwrap, a kernel without
// unprivileged user namespaces or a broken helper is found at start, not at
// the first call. The gateway uses it to choose between bwrap and the
// process fallback, and to fail at start when bwrap is required.
func (r *Runner) Probe(ctx context.Context) error {
	return r.probePosture(ctx, wire.PostureOff)
}

func (r *Runner) probePosture(ctx context.Context, posture string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	// A granted directory, so that the probe also goes through the search
	// for secrets and the check of the mounts before the program starts.
	dir, err := os.MkdirTemp("", "portcullis-probe-")
	if err != nil {
		return fmt.Errorf("bwrap probe: %w", err)
	}
	defer os.RemoveAll(dir)
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	res, err := r.Run(ctx, sandbox.Spec{
		Argv:           []string{"/bin/true"},
		Env:            []string{"PATH=/usr/bin:/bin"},
		Timeout:        10 * time.Second,
		MaxOutputBytes: 4096,
		Scope: wire.Scope{Network: wire.Network{Posture: posture, Allow: []string{}},
			FSGrants: []wire.FSGrant{{Path: dir, Mode: wire.ModeRead}}},
	})
	if err != nil {
		return fmt.Errorf("bwrap probe (posture %s): %w", posture, err)
	}
	if res.ExitCode != 0 || res.Signal != nil || res.TimedOut {
		return fmt.Errorf("bwrap probe (posture %s): /bin/true exited %d (signal %v, timed out %v): %s",
			posture, res.ExitCode, res.Signal, res.TimedOut, strings.TrimSpace(res.Stderr))
	}
	return nil
}

// Report is what `gateway doctor` shows about the OS sandbox.
type Report struct {
	BwrapPath      string            `json:"bwrap_path"`
	BwrapVersion   string            `json:"bwrap_version"`
	UserNamespaces bool              `json:"user_namespaces"`
	Seccomp        bool              `json:"seccomp"`
	LandlockABI    int               `json:"landlock_abi"`
	PidsCgroup     string            `json:"pids_cgroup"`
	Postures       map[string]bool   `json:"postures"`
	Errors         map[string]string `json:"errors,omitempty"`
}

// Report probes every posture and collects what works.
func (r *Runner) Report(ctx context.Context) Report {
	rep := Report{BwrapPath: r.bwrap, Postures: map[string]bool{}, Errors: map[string]string{}, LandlockABI: landlockABI()}
	if out, err := exec.CommandContext(ctx, r.bwrap, "--version").Output(); err == nil {
		rep.BwrapVersion = strings.TrimSpace(string(out))
	} else {
		rep.Errors["bwrap"] = err.Error()
	}
	rep.UserNamespaces = userNamespaces()
	rep.Seccomp = seccompAvailable()
	if r.cgroups != nil {
		rep.PidsCgroup = r.cgroups.Dir()
	}
	for _, p := range []string{wire.PostureOff, wire.PostureAllowlist, wire.PostureFull} {
		err := r.probePosture(ctx, p)
		rep.Postures[p] = err == nil
		if err != nil {
			rep.Errors[p] = err.Error()
		}
	}
	return rep
}

// landlockABI returns the kernel's Landlock ABI version, 0 without it.
func landlockABI() int {
	const createRulesetVersion = 1
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, createRulesetVersion)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// userNamespaces reports whether new user namespaces may be created.
func userNamespaces() bool {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil {
		return false
	}
	return strings.TrimSpace(string(b)) != "0"
}

// seccompAvailable reports whether this kernel supports seccomp filters.
func seccompAvailable() bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "Seccomp:") {
			return true
		}
	}
	return false
}
