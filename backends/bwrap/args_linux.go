package bwrap

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// systemDirs are bound read-only so that programs and their libraries run.
// Never "/": the host's /root, /home, /var, /run and the gateway's own files
// stay out of sight.
var systemDirs = []string{"/usr"}

// usrAliases are the top-level directories that merged-/usr systems
// (Debian, Fedora) make symlinks into /usr; on others they are bound.
var usrAliases = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles are the parts of /etc programs need to run (dynamic linker,
// TLS roots, time zone, alternatives symlinks), bound read-only when they
// exist. /etc/passwd, /etc/group and /etc/hosts are synthetic; the
// resolver configuration is bound only under posture full, so that no name
// can be resolved otherwise.
var etcFiles = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/crypto-policies",
	"/etc/alternatives", "/etc/localtime", "/etc/nsswitch.conf",
	"/etc/protocols", "/etc/services", "/etc/mime.types",
}

// resolverFiles are bound only under posture full.
var resolverFiles = []string{"/etc/resolv.conf", "/etc/gai.conf"}

// mount is one system entry of the layout.
type mount struct {
	symlink string // target, for a symlink
	path    string
}

// layout is the host's system layout, read once at New.
type layout struct {
	mounts []mount
	etc    []string
	root   bool // the gateway is root: --cap-drop ALL is accepted
}

func detectLayout() layout {
	l := layout{root: os.Geteuid() == 0}
	for _, d := range systemDirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			l.mounts = append(l.mounts, mount{path: d})
		}
	}
	for _, d := range usrAliases {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if t, err := os.Readlink(d); err == nil {
				l.mounts = append(l.mounts, mount{path: d, symlink: t})
			}
		case fi.IsDir():
			l.mounts = append(l.mounts, mount{path: d})
		}
	}
	for _, f := range etcFiles {
		if _, err := os.Lstat(f); err == nil {
			l.etc = append(l.etc, f)
		}
	}
	return l
}

// fds are the descriptor numbers bwrap reads its inputs from.
type fds struct {
	seccomp, status, block, passwd, group, hosts int // block < 0: none
	// autorun are the descriptors of p.AutorunReadOnly, in its order.
	autorun []int
	// sync is the descriptor of the call's sync file (<= 0: none), copied
	// to syncFile after every mount: bwrap's read of it tells the runner
	// the mounts are in place (gate_linux.go).
	sync int
}

// synthetic files: just enough for id, whoami and "localhost".
func passwdData(home string) string {
	if home == "" {
		home = "/tmp"
	}
	return "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
		"nobody:x:65534:65534:portcullis sandbox:" + home + ":/usr/sbin/nologin\n"
}

const groupData = "root:x:0:\nnogroup:x:65534:\n"

const hostsData = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"

// args builds bwrap's argv (without argv[0]) for profile p. Order matters:
// later mounts cover earlier ones, so system, then private dirs, then the
// grants parents-first, then the autorun guard's read-only binds, then the
// deny overlays on top of everything, then roFiles (the exec-restrict
// helper), each read-only at its own path, and last the sync file whose
// copy tells the runner every mount is in place.
func (l layout) args(p sandbox.Profile, f fds, argv []string, roFiles ...string) []string {
	a := []string{
		"--die-with-parent", "--new-session",
		"--unshare-user", "--disable-userns",
		"--uid", strconv.Itoa(SandboxUID), "--gid", strconv.Itoa(SandboxUID),
	}
	if l.root {
		a = append(a, "--cap-drop", "ALL")
	}
	a = append(a, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "portcullis", "--unshare-cgroup-try")
	if p.Network.Posture == wire.PostureOff {
		a = append(a, "--unshare-net")
	}
	for _, m := range l.mounts {
		if m.symlink != "" {
			a = append(a, "--symlink", m.symlink, m.path)
		} else {
			a = append(a, "--ro-bind", m.path, m.path)
		}
	}
	for _, e := range l.etc {
		a = append(a, "--ro-bind-try", e, e)
	}
	if p.Network.Posture == wire.PostureFull {
		for _, e := range resolverFiles {
			a = append(a, "--ro-bind-try", e, e)
		}
	}
	a = append(a,
		"--ro-bind-data", strconv.Itoa(f.passwd), "/etc/passwd",
		"--ro-bind-data", strconv.Itoa(f.group), "/etc/group",
		"--ro-bind-data", strconv.Itoa(f.hosts), "/etc/hosts",
		"--proc", "/proc", "--dev", "/dev",
		"--tmpfs", "/tmp", "--tmpfs", "/var/tmp",
	)
	if p.Home != "" {
		a = append(a, "--tmpfs", p.Home)
	}
	// Destinations mounted since the system binds: a read-only grant equal
	// to a system bind is skipped only when none of them lies below it.
	since := []string{"/etc", "/proc", "/dev", "/tmp", "/var/tmp"}
	if p.Home != "" {
		since = append(since, p.Home)
	}
	for _, g := range grantMounts(p) {
		if !g.rw && l.systemBind(g.path) && !slices.ContainsFunc(since, func(d string) bool { return sandbox.Within(d, g.path) }) {
			// Already bound read-only above and nothing mounted since
			// lies below it: the same bind again would change nothing
			// (the shipped library grants /usr for reading).
			continue
		}
		if g.rw {
			a = append(a, "--bind", g.path, g.path)
		} else {
			a = append(a, "--ro-bind", g.path, g.path)
		}
	}
	// Files that run later for someone else, inside read-write grants,
	// stay as they are (the autorun guard). Each source is a descriptor
	// opened without following symlinks (Profile.Pin): a path source would
	// be resolved by bwrap on the host, through whatever symlink a
	// concurrent call swapped in. bwrap closes these descriptors before
	// the program starts.
	for i, g := range p.AutorunReadOnly {
		if i < len(f.autorun) {
			a = append(a, "--ro-bind-fd", strconv.Itoa(f.autorun[i]), g)
		}
	}
	for _, d := range p.DenyDirs {
		a = append(a, "--perms", "0000", "--tmpfs", d, "--remount-ro", d)
	}
	for _, file := range p.DenyFiles {
		a = append(a, "--ro-bind", "/dev/null", file)
	}
	for _, file := range roFiles {
		a = append(a, "--ro-bind", file, file)
	}
	// Last: bwrap copies this file after every mount above is made.
	if f.sync > 0 {
		a = append(a, "--perms", "0444", "--file", strconv.Itoa(f.sync), syncFile)
	}
	// The root itself is bwrap's tmpfs: read-only, so that nothing but the
	// rw grants, /tmp, /var/tmp and HOME can be written.
	a = append(a, "--remount-ro", "/")
	wd := p.Workdir
	if wd == "" {
		wd = p.Home
	}
	if wd == "" {
		wd = "/tmp"
	}
	a = append(a, "--chdir", wd)
	a = append(a, "--seccomp", strconv.Itoa(f.seccomp), "--json-status-fd", strconv.Itoa(f.status))
	if f.block >= 0 {
		a = append(a, "--block-fd", strconv.Itoa(f.block))
	}
	a = append(a, "--")
	return append(a, argv...)
}

// systemBind reports whether path is one of the layout's read-only
// system binds (a directory, not a merged-/usr symlink).
func (l layout) systemBind(path string) bool {
	for _, m := range l.mounts {
		if m.symlink == "" && m.path == path {
			return true
		}
	}
	return false
}

type grantMount struct {
	path string
	rw   bool
}

// grantMounts merges the read-only and read-write grants parents-first, so
// a nested grant (rw inside r, or r inside rw) is mounted over its parent.
func grantMounts(p sandbox.Profile) []grantMount {
	var out []grantMount
	for _, g := range p.ReadOnly {
		out = append(out, grantMount{path: g})
	}
	for _, g := range p.ReadWrite {
		out = append(out, grantMount{path: g, rw: true})
	}
	slices.SortStableFunc(out, func(a, b grantMount) int {
		if c := len(a.path) - len(b.path); c != 0 {
			return c
		}
		if a.path < b.path {
			return -1
		}
		if a.path > b.path {
			return 1
		}
		return 0
	})
	return out
}

// proxyEnv are the variables that point programs at the egress proxy.
func proxyEnv() []string {
	u := "http://" + ProxyAddr
	s := "socks5h://" + ProxyAddr
	return []string{
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "ALL_PROXY=" + s,
		"http_proxy=" + u, "https_proxy=" + u, "all_proxy=" + s,
	}
}

// withEnv returns env with the entries of set replacing same-named ones.
func withEnv(env, set []string) []string {
	names := map[string]bool{}
	for _, kv := range set {
		names[kvName(kv)] = true
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		if !names[kvName(kv)] {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}

func kvName(kv string) string {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i]
		}
	}
	return kv
}

// bwrapOperands says, for each bwrap option args uses, how many operands
// follow it and which of them are host-side paths bwrap resolves (a source,
// or a destination it may create inside a bound tree). Symlink targets,
// descriptors, numbers and names are not paths.
var bwrapOperands = map[string][]bool{
	"--die-with-parent": {}, "--new-session": {}, "--unshare-user": {}, "--disable-userns": {},
	"--unshare-pid": {}, "--unshare-ipc": {}, "--unshare-uts": {}, "--unshare-cgroup-try": {},
	"--unshare-net": {}, "--unshare-all": {},
	"--uid": {false}, "--gid": {false}, "--cap-drop": {false}, "--hostname": {false},
	"--perms": {false}, "--seccomp": {false}, "--json-status-fd": {false}, "--block-fd": {false},
	"--tmpfs": {true}, "--proc": {true}, "--dev": {true}, "--remount-ro": {true}, "--chdir": {true},
	"--bind": {true, true}, "--ro-bind": {true, true}, "--ro-bind-try": {true, true},
	"--symlink": {false, true}, "--ro-bind-fd": {false, true}, "--ro-bind-data": {false, true},
	"--file": {false, true},
}

// hostPaths lists the paths bwrap resolves for the options of argv (args'
// output, up to "--"): what a program writing in a tree strictly above one
// of them could change while bwrap sets the sandbox up (freeze_linux.go).
// ok is false for an option it does not know or a path that is not clean
// and absolute: the caller then holds every writer of the searched trees.
func hostPaths(argv []string) (paths []string, ok bool) {
	for i := 0; i < len(argv); i++ {
		opt := argv[i]
		if opt == "--" {
			return paths, true
		}
		ops, known := bwrapOperands[opt]
		if !known || i+len(ops) >= len(argv) {
			return nil, false
		}
		for j, isPath := range ops {
			v := argv[i+1+j]
			if !isPath {
				continue
			}
			if !filepath.IsAbs(v) || filepath.Clean(v) != v {
				return nil, false
			}
			paths = append(paths, v)
		}
		i += len(ops)
	}
	return nil, false // no "--": not args' output
}
