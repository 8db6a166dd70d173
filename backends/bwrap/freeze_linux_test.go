package bwrap

import (
	"slices"
	"testing"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// TestHostPaths: every option args writes is known, and every path bwrap
// resolves on the host (sources, destinations, the working directory) is
// listed, so that the freezer holds each program that could move one.
func TestHostPaths(t *testing.T) {
	t.Parallel()
	p := sandbox.Profile{
		ReadOnly:        []string{"/srv/data", "/srv/work/vendor"},
		ReadWrite:       []string{"/srv/work"},
		DenyFiles:       []string{"/srv/work/.env"},
		DenyDirs:        []string{"/srv/work/.ssh"},
		AutorunReadOnly: []string{"/srv/work/.git/hooks", "/srv/work/.git/config"},
		Home:            "/tmp/portcullis-home-1",
		Workdir:         "/srv/work/src",
	}
	f := fds{seccomp: 4, status: 5, passwd: 6, group: 7, hosts: 8, block: 9, autorun: []int{10, 11}, sync: 12}
	want := []string{"/srv/data", "/srv/work/vendor", "/srv/work", "/srv/work/.env", "/srv/work/.ssh",
		"/srv/work/.git/hooks", "/srv/work/.git/config", "/tmp/portcullis-home-1", "/srv/work/src",
		"/usr", "/bin", "/etc/ssl", "/etc/passwd", "/opt/helper", syncFile, "/"}
	for _, posture := range []string{wire.PostureOff, wire.PostureAllowlist, wire.PostureFull} {
		t.Run(posture, func(t *testing.T) {
			t.Parallel()
			p := p
			p.Network = wire.Network{Posture: posture}
			argv := goldenLayout.args(p, f, []string{"/opt/helper", "--", "/usr/bin/git", "-C", "relative"}, "/opt/helper")
			got, ok := hostPaths(argv)
			if !ok {
				t.Fatalf("hostPaths refused args' own output: %q", argv)
			}
			for _, w := range want {
				if !slices.Contains(got, w) {
					t.Errorf("%s is not among the host paths %q", w, got)
				}
			}
			// The program's own arguments (after "--") are not bwrap's.
			if slices.Contains(got, "relative") || slices.Contains(got, "/usr/bin/git") {
				t.Errorf("the program's argv counted as bwrap's paths: %q", got)
			}
		})
	}
	for _, tt := range []struct {
		name string
		argv []string
	}{
		{"unknown option", []string{"--bind", "/a", "/a", "--overlay-src", "/b", "--", "/bin/true"}},
		{"relative path", []string{"--bind", "a", "/a", "--", "/bin/true"}},
		{"unclean path", []string{"--ro-bind", "/a/../etc", "/a", "--", "/bin/true"}},
		{"missing operand", []string{"--bind", "/a"}},
		{"no end of options", []string{"--bind", "/a", "/a"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, ok := hostPaths(tt.argv); ok {
				t.Errorf("hostPaths(%q) = %q, ok; want refused (the caller then holds every writer of the trees)", tt.argv, got)
			}
		})
	}
}

// TestFreezerHolds: a setup holds exactly the running calls that could
// change a path its bwrap resolves (a read-write grant strictly above it),
// or, when it holds by trees, those whose read-write grant overlaps one;
// extend holds the new ones at once and end lets them all go.
func TestFreezerHolds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name         string
		rw           []string
		roots, paths []string
		extend       []string
		before, then bool // held after begin; after extend
	}{
		{"same grant, no path below it", []string{"/proj"}, nil, []string{"/proj", "/usr"}, []string{"/proj", "/etc/ssl", "/tmp/home"}, false, false},
		{"a mask inside the grant", []string{"/proj"}, nil, []string{"/proj"}, []string{"/proj/.env"}, false, true},
		{"a guarded bind deep inside", []string{"/proj"}, nil, []string{"/proj"}, []string{"/proj/a/.git/config"}, false, true},
		{"a grant inside the writer's grant", []string{"/srv"}, nil, []string{"/srv/proj"}, nil, true, true},
		{"a writer inside the grant, nothing below it", []string{"/proj/sub"}, nil, []string{"/proj"}, []string{"/proj/other/.env"}, false, false},
		{"a writer inside the grant, a mask below it", []string{"/proj/sub"}, nil, []string{"/proj"}, []string{"/proj/sub/.env"}, false, true},
		{"by trees: overlapping", []string{"/proj/sub"}, []string{"/proj"}, nil, nil, true, true},
		{"by trees: apart", []string{"/other"}, []string{"/proj"}, nil, []string{"/proj/.env"}, false, false},
		{"prefix is not a parent", []string{"/pro"}, nil, []string{"/proj"}, []string{"/proj/.env"}, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFreezer()
			rc := &runningCall{rw: tt.rw}
			f.running[rc] = struct{}{}
			s := f.beginHold(tt.roots, tt.paths)
			if got := rc.holds > 0; got != tt.before {
				t.Errorf("after begin: held %v, want %v", got, tt.before)
			}
			s.extend(tt.extend)
			if got := rc.holds > 0; got != tt.then {
				t.Errorf("after extend: held %v, want %v", got, tt.then)
			}
			if rc.holds > 1 {
				t.Errorf("held %d times by one setup", rc.holds)
			}
			if got := s.holds(tt.rw); got != tt.then {
				t.Errorf("a call released now: held %v, want %v", got, tt.then)
			}
			s.end()
			if rc.holds != 0 {
				t.Errorf("still held %d times after end", rc.holds)
			}
			s.extend([]string{tt.rw[0] + "/x/.env"}) // after end: nothing
			if rc.holds != 0 || len(f.setups) != 0 {
				t.Errorf("extend after end held again (%d) or left the setup registered (%d)", rc.holds, len(f.setups))
			}
		})
	}
}

// TestArgsSystemGrant: a read-only grant of a directory the layout binds
// read-only already is not bound twice, unless something mounted since
// lies below it (then the grant's bind must cover it, as before); a
// read-write grant of it is always bound.
func TestArgsSystemGrant(t *testing.T) {
	t.Parallel()
	count := func(argv []string, opt, path string) (n int) {
		for i := 0; i+2 < len(argv); i++ {
			if argv[i] == opt && argv[i+1] == path && argv[i+2] == path {
				n++
			}
		}
		return n
	}
	f := fds{seccomp: 4, status: 5, passwd: 6, group: 7, hosts: 8, block: 9, sync: -1}
	for _, tt := range []struct {
		name     string
		p        sandbox.Profile
		opt      string
		path     string
		wantBind int
	}{
		{"ro /usr once", sandbox.Profile{ReadOnly: []string{"/usr"}, Home: "/tmp/h"}, "--ro-bind", "/usr", 1},
		{"rw /usr bound", sandbox.Profile{ReadWrite: []string{"/usr"}, Home: "/tmp/h"}, "--bind", "/usr", 1},
		{"home below /usr: bound again", sandbox.Profile{ReadOnly: []string{"/usr"}, Home: "/usr/tmp/h"}, "--ro-bind", "/usr", 2},
		{"ro /usr/share kept", sandbox.Profile{ReadOnly: []string{"/usr/share"}, Home: "/tmp/h"}, "--ro-bind", "/usr/share", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			argv := goldenLayout.args(tt.p, f, []string{"/bin/true"})
			if n := count(argv, tt.opt, tt.path); n != tt.wantBind {
				t.Errorf("%s %s bound %d times, want %d: %q", tt.opt, tt.path, n, tt.wantBind, argv)
			}
		})
	}
}
