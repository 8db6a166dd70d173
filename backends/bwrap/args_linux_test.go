package bwrap

import (
	"context"
	"encoding/binary"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/internal/testutil"
	"github.com/portcullis/portcullis/wire"
)

var update = flag.Bool("update", false, "rewrite golden files")

// goldenLayout is a fixed Debian-like host, so the golden argv does not
// depend on the machine running the test.
var goldenLayout = layout{
	mounts: []mount{{path: "/usr"}, {path: "/bin", symlink: "usr/bin"}, {path: "/lib", symlink: "usr/lib"}, {path: "/lib64", symlink: "usr/lib64"}, {path: "/sbin", symlink: "usr/sbin"}},
	etc:    []string{"/etc/ld.so.cache", "/etc/ssl", "/etc/alternatives"},
	root:   true,
}

// TestArgsGolden pins the exact bwrap argv per posture: every flag is a
// security property, so any change must be a reviewed golden diff.
func TestArgsGolden(t *testing.T) {
	t.Parallel()
	p := sandbox.Profile{
		ReadOnly:        []string{"/srv/data", "/srv/work/vendor"},
		ReadWrite:       []string{"/srv/work"},
		DenyFiles:       []string{"/srv/work/.env"},
		DenyDirs:        []string{"/srv/work/.ssh"},
		AutorunReadOnly: []string{"/srv/work/.git/hooks", "/srv/work/.git/config"},
		Home:            "/tmp/portcullis-home-1",
		Workdir:         "/srv/work",
	}
	f := fds{seccomp: 4, status: 5, passwd: 6, group: 7, hosts: 8, block: 9, autorun: []int{10, 11}, sync: 12}
	for _, posture := range []string{wire.PostureOff, wire.PostureAllowlist, wire.PostureFull} {
		t.Run(posture, func(t *testing.T) {
			t.Parallel()
			p := p
			p.Network = wire.Network{Posture: posture}
			got := strings.Join(goldenLayout.args(p, f, []string{"/usr/bin/git", "status"}), "\n") + "\n"
			path := filepath.Join("testdata", "args-"+posture+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("argv differs from %s (run with -update after review):\n%s", path, got)
			}
			// Properties that must hold whatever the golden says.
			args := strings.Split(got, "\n")
			if i := slices.Index(args, "--ro-bind"); i >= 0 && args[i+1] == "/" {
				t.Error("the host root is bound")
			}
			if (posture == wire.PostureOff) != slices.Contains(args, "--unshare-net") {
				t.Errorf("--unshare-net present=%v for posture %s", slices.Contains(args, "--unshare-net"), posture)
			}
			if (posture == wire.PostureFull) != slices.Contains(args, "/etc/resolv.conf") {
				t.Errorf("resolv.conf bound=%v for posture %s", !slices.Contains(args, "/etc/resolv.conf"), posture)
			}
		})
	}
}

// TestGrantOrderParentsFirst: a read-only grant nested in a read-write one
// is mounted after it, so it stays read-only.
func TestGrantOrderParentsFirst(t *testing.T) {
	t.Parallel()
	got := grantMounts(sandbox.Profile{ReadOnly: []string{"/a/b/c", "/z"}, ReadWrite: []string{"/a/b", "/a"}})
	want := []grantMount{{"/a", true}, {"/z", false}, {"/a/b", true}, {"/a/b/c", false}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// seccompData encodes struct seccomp_data the way the x/net/bpf VM loads
// it (big-endian words), so the filter can be exercised without a kernel.
func seccompData(nr, arch uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		// The kernel's low word sits at offset 16+8i on little-endian.
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[20+8*i:], uint32(a>>32))
	}
	return b
}

func TestSeccompProgramDecisions(t *testing.T) {
	t.Parallel()
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("no filter for", runtime.GOARCH)
	}
	prog, err := seccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	arch, _ := nativeArch()
	tests := []struct {
		name string
		data []byte
		want uint32
	}{
		{"read allowed", seccompData(unix.SYS_READ, arch), retAllow},
		{"inet socket allowed", seccompData(unix.SYS_SOCKET, arch, unix.AF_INET), retAllow},
		{"unix socket", seccompData(unix.SYS_SOCKET, arch, unix.AF_UNIX), retEPERM},
		{"unix socket, junk high word", seccompData(unix.SYS_SOCKET, arch, 1<<40|unix.AF_UNIX), retEPERM},
		{"socketpair dgram", seccompData(unix.SYS_SOCKETPAIR, arch, unix.AF_UNIX, unix.SOCK_DGRAM), retEPERM},
		{"socketpair seqpacket", seccompData(unix.SYS_SOCKETPAIR, arch, unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC), retEPERM},
		{"socketpair dgram, stream bit in the high word", seccompData(unix.SYS_SOCKETPAIR, arch, unix.AF_UNIX, 1<<32|unix.SOCK_DGRAM), retEPERM},
		{"socketpair stream allowed", seccompData(unix.SYS_SOCKETPAIR, arch, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK), retAllow},
		{"unix socket stream", seccompData(unix.SYS_SOCKET, arch, unix.AF_UNIX, unix.SOCK_STREAM), retEPERM},
		{"ioctl TIOCSTI", seccompData(unix.SYS_IOCTL, arch, 0, unix.TIOCSTI), retEPERM},
		{"ioctl TIOCLINUX", seccompData(unix.SYS_IOCTL, arch, 0, unix.TIOCLINUX), retEPERM},
		{"ioctl TCGETS allowed", seccompData(unix.SYS_IOCTL, arch, 0, unix.TCGETS), retAllow},
		{"io_uring_setup", seccompData(unix.SYS_IO_URING_SETUP, arch), retEPERM},
		{"bpf", seccompData(unix.SYS_BPF, arch), retEPERM},
		{"ptrace", seccompData(unix.SYS_PTRACE, arch), retEPERM},
		{"setns", seccompData(unix.SYS_SETNS, arch), retEPERM},
		{"open_by_handle_at", seccompData(unix.SYS_OPEN_BY_HANDLE_AT, arch), retEPERM},
		{"last blocked entry", seccompData(blockedSyscalls()[len(blockedSyscalls())-1], arch), retEPERM},
		{"foreign arch killed", seccompData(unix.SYS_READ, 0x40000003), retKill},
	}
	if runtime.GOARCH == "amd64" {
		tests = append(tests, struct {
			name string
			data []byte
			want uint32
		}{"x32 ABI", seccompData(x32Bit|unix.SYS_GETPID, arch), retEPERM})
	}
	for _, blocked := range blockedSyscalls() {
		out, err := vm.Run(seccompData(blocked, arch))
		if err != nil || uint32(out) != retEPERM {
			t.Errorf("syscall %d: got %#x, want EPERM", blocked, out)
		}
	}
	for _, tt := range tests {
		out, err := vm.Run(tt.data)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if uint32(out) != tt.want {
			t.Errorf("%s: got %#x, want %#x", tt.name, uint32(out), tt.want)
		}
	}
}

// BenchmarkRunnerTrue is /bin/true through the runner (helper + bwrap +
// seccomp + status handling + pids cgroup), posture off.
func BenchmarkRunnerTrue(b *testing.B) {
	requireBwrap(b)
	r := New(Options{})
	s := sandbox.Spec{Argv: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}, Timeout: 10 * time.Second, MaxOutputBytes: 4096,
		Scope: wire.Scope{Network: wire.Network{Posture: wire.PostureOff}}}
	testutil.MedianMS(b, func() error {
		_, err := r.Run(context.Background(), s)
		return err
	})
}

// BenchmarkBareBwrapTrue is bwrap with the same flags and no runner.
func BenchmarkBareBwrapTrue(b *testing.B) {
	requireBwrap(b)
	r := New(Options{PidsMax: -1})
	p, err := sandbox.BuildProfile(sandbox.Spec{Scope: wire.Scope{Network: wire.Network{Posture: wire.PostureOff}}}, sandbox.ProfileOptions{})
	if err != nil {
		b.Fatal(err)
	}
	bareBwrap(b, r, p)
}

// bareBwrap runs /bin/true in bwrap with profile p's argv, without the
// runner around it.
func bareBwrap(b *testing.B, r *Runner, p sandbox.Profile) {
	filter, _ := seccompFilter()
	testutil.MedianMS(b, func() error { return runBare(r, p, filter) })
}

func treeScope(tree string) wire.Scope {
	return wire.Scope{Network: wire.Network{Posture: wire.PostureOff},
		FSGrants: []wire.FSGrant{{Path: "/usr", Mode: wire.ModeRead}, {Path: tree, Mode: wire.ModeReadWrite}}}
}

// BenchmarkRunnerTree is /bin/true through the runner with a read-write
// grant of a 20k-file tree (warm scan cache, masks, autorun binds, the
// mount check before release and the post-run guard).
func BenchmarkRunnerTree(b *testing.B) {
	requireBwrap(b)
	tree := testutil.ProjectTree(b)
	r := New(Options{})
	s := sandbox.Spec{Argv: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}, Timeout: 10 * time.Second, MaxOutputBytes: 4096,
		Scope: treeScope(tree)}
	if _, err := r.Run(context.Background(), s); err != nil { // warm the cache
		b.Fatal(err)
	}
	testutil.MedianMS(b, func() error {
		_, err := r.Run(context.Background(), s)
		return err
	})
}

// BenchmarkBareBwrapTree is bwrap alone with the same mounts as
// BenchmarkRunnerTree (the profile computed once, outside the loop).
func BenchmarkBareBwrapTree(b *testing.B) {
	requireBwrap(b)
	tree := testutil.ProjectTree(b)
	r := New(Options{PidsMax: -1})
	p, err := sandbox.BuildProfile(sandbox.Spec{Scope: treeScope(tree)}, r.opts.Profile)
	if err != nil {
		b.Fatal(err)
	}
	bareBwrap(b, r, p)
}

// BenchmarkRunnerVsBareTree alternates the two above in one loop, so that
// the load of a shared machine weighs on both alike, and reports both
// medians and their ratio (the runner's cost over bare bwrap).
func BenchmarkRunnerVsBareTree(b *testing.B) {
	requireBwrap(b)
	tree := testutil.ProjectTree(b)
	r := New(Options{})
	s := sandbox.Spec{Argv: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"}, Timeout: 10 * time.Second, MaxOutputBytes: 4096,
		Scope: treeScope(tree)}
	if _, err := r.Run(context.Background(), s); err != nil {
		b.Fatal(err)
	}
	p, err := sandbox.BuildProfile(sandbox.Spec{Scope: treeScope(tree)}, r.opts.Profile)
	if err != nil {
		b.Fatal(err)
	}
	bare := New(Options{PidsMax: -1})
	filter, _ := seccompFilter()
	var runner, plain []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := r.Run(context.Background(), s); err != nil {
			b.Fatal(err)
		}
		runner = append(runner, time.Since(t0))
		t0 = time.Now()
		if err := runBare(bare, p, filter); err != nil {
			b.Fatal(err)
		}
		plain = append(plain, time.Since(t0))
	}
	slices.Sort(runner)
	slices.Sort(plain)
	rm, pm := runner[len(runner)/2], plain[len(plain)/2]
	b.ReportMetric(float64(rm.Microseconds())/1000, "runner-p50-ms")
	b.ReportMetric(float64(pm.Microseconds())/1000, "bare-p50-ms")
	b.ReportMetric(float64(rm)/float64(pm), "ratio")
	// The fastest runs approach what an idle machine would show.
	b.ReportMetric(float64(runner[0].Microseconds())/1000, "runner-min-ms")
	b.ReportMetric(float64(plain[0].Microseconds())/1000, "bare-min-ms")
}

func runBare(r *Runner, p sandbox.Profile, filter []byte) error {
	files := make([]*os.File, 0, 5)
	var status *os.File
	for _, d := range [][]byte{filter, nil, []byte(passwdData("")), []byte(groupData), []byte(hostsData)} {
		rd, wr, _ := os.Pipe()
		if d != nil {
			_, _ = wr.Write(d)
			wr.Close()
			files = append(files, rd)
		} else {
			files = append(files, wr)
			status = rd
		}
	}
	defer status.Close()
	pinned, err := p.Pin()
	if err != nil {
		return err
	}
	f := fds{seccomp: 3, status: 4, passwd: 5, group: 6, hosts: 7, block: -1, sync: -1}
	for _, pf := range pinned {
		f.autorun = append(f.autorun, 3+len(files))
		files = append(files, pf)
	}
	cmd := exec.Command(r.bwrap, r.layout.args(p, f, []string{"/bin/true"})...)
	cmd.ExtraFiles = files
	err = cmd.Run()
	for _, f := range files {
		f.Close()
	}
	return err
}

// BenchmarkForkExecTrue is the floor: /bin/true, no sandbox.
func BenchmarkForkExecTrue(b *testing.B) {
	testutil.MedianMS(b, func() error { return exec.Command("/bin/true").Run() })
}
