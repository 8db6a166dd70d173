//go:build !linux

package exectool

// resolver remembers nothing outside Linux (no inotify): every lookup walks.
type resolver struct{}

func newResolver() *resolver { return nil }

func (r *resolver) close() {}

func (r *resolver) leadsTo(p string) string { return leadsTo(p) }
