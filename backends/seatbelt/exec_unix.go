//go:build unix

package seatbelt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// How a run is stopped; the same as the process runner's.
const (
	termGrace  = process.TermGrace
	drainGrace = 500 * time.Millisecond
)

// execer starts a launcher argv (sandbox-exec and the program) through the
// rlimit helper in its own session and process group, with exactly the
// spec's environment, a wall-clock timeout (SIGTERM to the group, a grace,
// SIGKILL) and bounded output. It is the part of the macOS runner that does
// not depend on macOS, so it is tested on Linux too.
type execer struct {
	log    *slog.Logger
	helper string // the binary that calls MaybeRunHelper first thing
}

// run executes argv for spec. The error is only for a run that could not
// start (bad spec, helper refusal); a program that fails is a Result.
func (x *execer) run(ctx context.Context, spec sandbox.Spec, argv []string) (sandbox.Result, error) {
	if err := x.check(ctx, spec, argv); err != nil {
		return sandbox.Result{}, err
	}
	limits, err := limitArgs(spec.Limits)
	if err != nil {
		return sandbox.Result{}, err
	}
	dir := spec.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "portcullis-exec-")
		if err != nil {
			return sandbox.Result{}, fmt.Errorf("seatbelt: private working directory: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}

	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
		files = nil
	}
	defer closeAll()
	pipe := func() (*os.File, *os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("seatbelt: pipe: %w", err)
		}
		files = append(files, r, w)
		return r, w, nil
	}
	outR, outW, err := pipe()
	if err != nil {
		return sandbox.Result{}, err
	}
	errR, errW, err := pipe()
	if err != nil {
		return sandbox.Result{}, err
	}
	statR, statW, err := pipe()
	if err != nil {
		return sandbox.Result{}, err
	}

	cmd := x.command(spec, argv, limits)
	cmd.Dir, cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = dir, outW, errW, []*os.File{statW}
	if err := cmd.Start(); err != nil {
		return sandbox.Result{}, fmt.Errorf("seatbelt: starting %s: %w", argv[0], err)
	}
	startedAt := time.Now()
	pid := cmd.Process.Pid
	// The child holds its own copies; ours must go so EOF can arrive.
	for _, f := range []*os.File{outW, errW, statW} {
		_ = f.Close()
	}
	files = []*os.File{outR, errR, statR}

	stdout, stderr := process.NewOutputBuffer(spec.MaxOutputBytes), process.NewOutputBuffer(spec.MaxOutputBytes)
	var drained sync.WaitGroup
	drained.Go(func() { _, _ = io.Copy(stdout, outR) })
	drained.Go(func() { _, _ = io.Copy(stderr, errR) })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var res sandbox.Result
	stop := func() error { return stopGroup(pid, done) }
	timer := time.NewTimer(spec.Timeout)
	defer timer.Stop()
	var waitErr error
	select {
	case waitErr = <-done:
	case <-timer.C:
		res.TimedOut = true
		waitErr = stop()
	case <-ctx.Done():
		res.Canceled = true
		waitErr = stop()
	}
	res.Duration = time.Since(startedAt)
	// Background leftovers of the group never outlive the call. The group
	// id stays reserved while any member lives, so this reaches only them.
	_ = unix.Kill(-pid, unix.SIGKILL)

	drainDone := make(chan struct{})
	go func() { drained.Wait(); close(drainDone) }()
	select {
	case <-drainDone:
	case <-time.After(drainGrace):
		_ = outR.Close()
		_ = errR.Close()
		<-drainDone
	}
	if msg := readStatus(statR); msg != "" {
		x.log.ErrorContext(ctx, "seatbelt: helper refused to run the program", "argv0", argv[0], "reason", msg)
		return sandbox.Result{}, fmt.Errorf("seatbelt: helper refused to start %s: %s", argv[0], msg)
	}
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) {
		return sandbox.Result{}, fmt.Errorf("seatbelt: waiting for %s: %w", argv[0], waitErr)
	}
	res.ExitCode, res.Signal = process.ExitStatus(cmd.ProcessState)
	res.Stdout, res.StdoutTruncated = stdout.Text()
	res.Stderr, res.StderrTruncated = stderr.Text()
	return res, nil
}

// check refuses a run that must not start: a relative launcher or
// helper, no timeout or output bound, a relative working directory, a NUL
// in an argument, a context already done.
func (x *execer) check(ctx context.Context, spec sandbox.Spec, argv []string) error {
	switch {
	case len(argv) == 0 || !filepath.IsAbs(argv[0]):
		return fmt.Errorf("seatbelt: launcher argv %q must start with an absolute path", argv)
	case !filepath.IsAbs(x.helper):
		return fmt.Errorf("seatbelt: helper path %q is not absolute", x.helper)
	case spec.Timeout <= 0:
		return fmt.Errorf("seatbelt: timeout %v must be positive", spec.Timeout)
	case spec.MaxOutputBytes <= 0:
		return fmt.Errorf("seatbelt: max output bytes %d must be positive", spec.MaxOutputBytes)
	case spec.Dir != "" && !filepath.IsAbs(spec.Dir):
		return fmt.Errorf("seatbelt: working directory %q is not absolute", spec.Dir)
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("seatbelt: argv[%d] contains a NUL byte", i)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("seatbelt: not started: %w", err)
	}
	return nil
}

// command runs argv through the rlimit helper with exactly the spec's
// environment, in its own session: its own process group to signal, and
// no controlling terminal to drive.
func (x *execer) command(spec sandbox.Spec, argv []string, limits [nLimits]limit) *exec.Cmd {
	args := []string{"portcullis-seatbelt-helper", helperArg, helperVersion}
	for _, l := range limits {
		args = append(args, l.String())
	}
	args = append(append(args, helperSep), argv...)
	return &exec.Cmd{
		Path:        x.helper,
		Args:        args,
		Env:         append(make([]string, 0, len(spec.Env)), spec.Env...), // never nil: nil inherits the gateway's
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
}

// stopGroup stops the process group pid leads: SIGTERM, a grace, SIGKILL;
// it returns the leader's wait error.
func stopGroup(pid int, done <-chan error) error {
	_ = unix.Kill(-pid, unix.SIGTERM)
	grace := time.NewTimer(termGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		return err
	case <-grace.C:
	}
	_ = unix.Kill(-pid, unix.SIGKILL)
	return <-done
}

// limitArgs turns the spec's limits into helper arguments, lowered to the
// hard limits this process already has (the child could never get more).
func limitArgs(l wire.Limits) ([nLimits]limit, error) {
	var out [nLimits]limit
	if l.CPUSeconds < 0 || l.FsizeBytes < 0 || l.Nofile < 0 || l.MemoryBytes < 0 {
		return out, fmt.Errorf("seatbelt: negative limit in %+v", l)
	}
	want := [nLimits]int64{int64(l.CPUSeconds), l.FsizeBytes, int64(l.Nofile)}
	// RLIM_INFINITY is MaxUint64 on Linux, MaxInt64 on macOS: at or
	// above MaxInt64 is no bound on either.
	args, err := process.LimitArgs(limitResources[:], want[:], true, math.MaxInt64)
	if err != nil {
		return out, fmt.Errorf("seatbelt: %w", err)
	}
	copy(out[:], args)
	return out, nil
}

// readStatus returns the helper's refusal, or "" when it set the limits and
// exec'd the target.
func readStatus(f *os.File) string {
	return process.ReadHelperStatus(f, "the helper exited without reporting (does the gateway's main call seatbelt.MaybeRunHelper?)")
}
