//go:build !linux

package exectool

import "github.com/portcullis/portcullis/backends/process"

// resolver remembers nothing outside Linux (no inotify): every lookup walks.
type resolver struct{}

func newResolver() *resolver { return nil }

func (r *resolver) close() {}

func (r *resolver) leadsTo(p string) string { return leadsTo(p) }

func (r *resolver) execChain(p string) []string { return process.ExecChain(p) }
