// Package cgroup gives each sandboxed call its own cgroup, so that
// everything the call starts can be counted (pids.max stops a fork bomb),
// its memory bounded (memory.max, or memory.limit_in_bytes on cgroup v1,
// which measure the memory the call really uses, not the address space it
// reserves), and found again to be killed when the call ends, including
// descendants that left the call's process group or session (setsid) and
// are therefore out of reach of a process-group kill.
//
// Both hierarchies are supported: cgroup v1's pids and memory controllers
// (two separate hierarchies, so a call has two directories) and a cgroup v2
// tree whose subtree_control enables pids and, when available, memory (one
// directory). Call cgroups live in a "portcullis" directory beneath this
// process' own cgroup of each hierarchy, so a gateway never touches cgroups
// it did not create.
package cgroup

import (
	"path/filepath"
	"strings"
)

// Parent is the directory under which each call gets its own cgroup: the
// pids hierarchy's, and the memory hierarchy's when there is one (the same
// directory on cgroup v2).
type Parent struct {
	dir string
	// mem is the memory controller's parent directory, "" without one.
	mem string
	// memV2 says mem is a cgroup v2 directory (memory.max) rather than a
	// v1 one (memory.limit_in_bytes).
	memV2 bool
}

// Dir is the parent's directory in the cgroup filesystem.
func (p *Parent) Dir() string { return p.dir }

// MemoryDir is the memory controller's parent directory, "" when calls get
// no memory cgroup.
func (p *Parent) MemoryDir() string {
	if p == nil {
		return ""
	}
	return p.mem
}

// Memory reports whether calls can be given a memory limit by their cgroup.
func (p *Parent) Memory() bool { return p != nil && p.mem != "" }

// Contains reports whether path lies strictly beneath the parent (either of
// its directories), after cleaning, so that a caller handing a cgroup path
// to a less trusted party (the exec helper joins whatever cgroup.procs it is
// given) can refuse anything that is not one of its own call cgroups.
func (p *Parent) Contains(path string) bool {
	if p == nil || !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return false
	}
	if strings.HasPrefix(path, p.dir+"/") {
		return true
	}
	return p.mem != "" && strings.HasPrefix(path, p.mem+"/")
}

// Limits are what a call cgroup bounds.
type Limits struct {
	// Pids caps the tasks (processes and threads: the kernel counts both).
	// Must be positive.
	Pids int
	// MemoryBytes caps the memory the call's tasks use together (anonymous
	// memory and page cache, and swap where it is accounted). 0: no memory
	// limit. A positive value on a parent without a memory controller is an
	// error: the caller promised a memory bound it would not get.
	MemoryBytes int64
}

// Call is one call's cgroup.
type Call struct {
	dir string
	// mem is the call's memory cgroup directory: "" without one, dir
	// itself on cgroup v2.
	mem string
}

// Dir is the call cgroup's directory.
func (c *Call) Dir() string { return c.dir }

// ProcsPath is the call cgroup's cgroup.procs: writing "0" to it moves the
// writing process (all its threads) into the call, and everything it forks
// afterwards is born inside.
func (c *Call) ProcsPath() string { return filepath.Join(c.dir, "cgroup.procs") }

// ProcsPaths are the cgroup.procs files a task must be written to so that
// it is inside every hierarchy of the call: one on cgroup v2, or when the
// call has no memory cgroup; the pids and the memory one on cgroup v1.
func (c *Call) ProcsPaths() []string {
	out := []string{c.ProcsPath()}
	if c.mem != "" && c.mem != c.dir {
		out = append(out, filepath.Join(c.mem, "cgroup.procs"))
	}
	return out
}

// MemoryLimited reports whether the call's memory is bounded by its cgroup.
func (c *Call) MemoryLimited() bool { return c != nil && c.mem != "" }
