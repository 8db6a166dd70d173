// Package cgroup gives each sandboxed call its own pids cgroup, so that
// everything the call starts can be counted (pids.max stops a fork bomb)
// and found again to be killed when the call ends, including descendants
// that left the call's process group or session (setsid) and are therefore
// out of reach of a process-group kill.
//
// Both hierarchies are supported: cgroup v1's pids controller and a cgroup
// v2 tree whose subtree_control enables pids. Call cgroups live in a
// "portcullis" directory beneath this process' own cgroup, so a gateway
// never touches cgroups it did not create.
package cgroup

import (
	"path/filepath"
	"strings"
)

// Parent is the directory under which each call gets its own cgroup.
type Parent struct {
	dir string
}

// Dir is the parent's directory in the cgroup filesystem.
func (p *Parent) Dir() string { return p.dir }

// Contains reports whether path lies strictly beneath the parent, after
// cleaning, so that a caller handing a cgroup path to a less trusted party
// (the exec helper joins whatever cgroup.procs it is given) can refuse
// anything that is not one of its own call cgroups.
func (p *Parent) Contains(path string) bool {
	if p == nil || !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return false
	}
	return strings.HasPrefix(path, p.dir+"/")
}

// Call is one call's cgroup.
type Call struct {
	dir string
}

// Dir is the call cgroup's directory.
func (c *Call) Dir() string { return c.dir }

// ProcsPath is the call cgroup's cgroup.procs: writing "0" to it moves the
// writing process (all its threads) into the call, and everything it forks
// afterwards is born inside.
func (c *Call) ProcsPath() string { return filepath.Join(c.dir, "cgroup.procs") }
