//go:build !linux

package bwrap

import (
	"context"
	"errors"
	"os/exec"

	"github.com/portcullis/portcullis/wire"

	"github.com/portcullis/portcullis/backends/sandbox"
)

var errNotLinux = errors.New("bwrap: bubblewrap exists only on Linux")

// layout exists only on Linux.
type layout struct{}

// New returns a Runner whose every Run fails: there is no bubblewrap here.
func New(opts Options) *Runner { return &Runner{opts: opts} }

// Run refuses outside Linux.
func (r *Runner) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	return sandbox.Result{}, errNotLinux
}

// Command refuses outside Linux.
func (r *Runner) Command(ctx context.Context, argv, env []string, scope wire.Scope) (*exec.Cmd, func(), error) {
	return nil, nil, errNotLinux
}

// Probe fails outside Linux, so "auto" picks another backend.
func (r *Runner) Probe(ctx context.Context) error { return errNotLinux }

// Report is what `gateway doctor` shows about the OS sandbox.
type Report struct {
	Errors map[string]string `json:"errors,omitempty"`
}

// Report says bubblewrap is unavailable.
func (r *Runner) Report(ctx context.Context) Report {
	return Report{Errors: map[string]string{"bwrap": errNotLinux.Error()}}
}

// freezer exists only on Linux.
type freezer struct{}

// syncWatcher exists only on Linux.
type syncWatcher struct{}
