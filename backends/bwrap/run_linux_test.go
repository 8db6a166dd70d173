package bwrap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// gatewaySecret is planted in this process' environment: no sandboxed
// program may ever see it.
var gatewaySecret = "gw-secret-" + randHex(8)

func TestMain(m *testing.M) {
	process.MaybeRunHelper()
	os.Setenv("PORTCULLIS_TEST_GATEWAY_SECRET", gatewaySecret)
	os.Exit(m.Run())
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// requireBwrap skips (or, with PORTCULLIS_REQUIRE_BWRAP=1, fails) when
// bubblewrap cannot run here.
func requireBwrap(t testing.TB) {
	t.Helper()
	probeOnce.Do(func() { probeErr = New(Options{}).Probe(context.Background()) })
	if probeErr != nil {
		if os.Getenv("PORTCULLIS_REQUIRE_BWRAP") == "1" {
			t.Fatalf("bwrap required (PORTCULLIS_REQUIRE_BWRAP=1) but unusable: %v", probeErr)
		}
		t.Skipf("bwrap unusable here: %v", probeErr)
	}
}

var (
	probeOnce sync.Once
	probeErr  error
)

// fixture is a directory tree with granted and ungranted parts.
type fixture struct {
	root, ro, rw, outside, home string
	secret                      string // content of every file that must stay unseen
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{
		root: root, ro: filepath.Join(root, "ro"), rw: filepath.Join(root, "rw"),
		outside: filepath.Join(root, "outside"), home: filepath.Join(root, "home"),
		secret: "TOPSECRET-" + randHex(8),
	}
	for _, d := range []string{f.ro, f.rw, f.outside, filepath.Join(f.ro, "sub"), filepath.Join(f.home, ".ssh"), filepath.Join(f.home, ".aws")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(f.ro, "data.txt"), "public data\n")
	write(filepath.Join(f.ro, ".env"), f.secret)
	write(filepath.Join(f.ro, "sub", ".env.local"), f.secret)
	write(filepath.Join(f.outside, "secret.txt"), f.secret)
	write(filepath.Join(f.home, ".ssh", "id_ed25519"), f.secret)
	write(filepath.Join(f.home, ".aws", "credentials"), f.secret)
	write(filepath.Join(f.home, "notes.txt"), "home notes\n")
	// Planted escapes: a symlink from a granted dir to an ungranted file.
	if err := os.Symlink(filepath.Join(f.outside, "secret.txt"), filepath.Join(f.rw, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.outside, filepath.Join(f.ro, "dirlink")); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) scope(posture string, allow ...string) wire.Scope {
	return wire.Scope{
		FSGrants: []wire.FSGrant{
			{Path: "/usr", Mode: wire.ModeRead},
			{Path: f.ro, Mode: wire.ModeRead},
			{Path: f.rw, Mode: wire.ModeReadWrite},
			{Path: f.home, Mode: wire.ModeRead},
		},
		Network: wire.Network{Posture: posture, Allow: append([]string{}, allow...)},
	}
}

func (f *fixture) runner() *Runner {
	return New(Options{Profile: sandbox.ProfileOptions{UserHome: f.home}, PidsMax: 128})
}

func spec(scope wire.Scope, argv ...string) sandbox.Spec {
	return sandbox.Spec{
		Argv:           argv,
		Env:            []string{"PATH=/usr/bin:/bin", "HOME=/tmp/portcullis-home-test", "LANG=C.UTF-8"},
		Timeout:        20 * time.Second,
		MaxOutputBytes: 1 << 20,
		Limits:         wire.Limits{CPUSeconds: 30, MemoryBytes: 2 << 30, FsizeBytes: 64 << 20, Nofile: 256},
		Scope:          scope,
	}
}

func sh(t *testing.T, r *Runner, scope wire.Scope, script string) sandbox.Result {
	t.Helper()
	res, err := r.Run(context.Background(), spec(scope, "/bin/sh", "-c", script))
	if err != nil {
		t.Fatalf("Run(%q): %v", script, err)
	}
	return res
}

// TestFilesystemConfinement tries, one way after another, to read what is
// not granted or to write where it may not.
func TestFilesystemConfinement(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	r := f.runner()
	scope := f.scope(wire.PostureOff)
	tests := []struct {
		name   string
		script string
		// wantExit 0 means the attempt must succeed; otherwise it must fail.
		wantOK  bool
		wantOut string // substring of stdout when set
	}{
		{name: "granted read works", script: "cat " + f.ro + "/data.txt", wantOK: true, wantOut: "public data"},
		{name: "rw write works", script: "echo hi > " + f.rw + "/new && cat " + f.rw + "/new", wantOK: true, wantOut: "hi"},
		{name: "write into r grant", script: "echo x > " + f.ro + "/new"},
		{name: "write into /usr", script: "echo x > /usr/portcullis-x"},
		{name: "write into /etc", script: "echo x > /etc/portcullis-x"},
		{name: "chmod r grant file", script: "chmod 777 " + f.ro + "/data.txt"},
		{name: "read ungranted sibling", script: "cat " + f.outside + "/secret.txt"},
		{name: "list ungranted parent shows only grants", script: "ls " + f.root + " | tr '\\n' ' '", wantOK: true, wantOut: "home ro rw"},
		{name: "via /proc/self/root", script: "cat /proc/self/root" + f.outside + "/secret.txt"},
		{name: "via /proc/1/root", script: "cat /proc/1/root" + f.outside + "/secret.txt"},
		{name: "planted file symlink", script: "cat " + f.rw + "/link"},
		{name: "planted dir symlink", script: "cat " + f.ro + "/dirlink/secret.txt"},
		{name: "new symlink out", script: "ln -s " + f.outside + "/secret.txt " + f.rw + "/l2 && cat " + f.rw + "/l2"},
		{name: "hard link from r grant into rw", script: "ln " + f.ro + "/data.txt " + f.rw + "/hl"},
		{name: "hard link of ungranted file", script: "ln " + f.outside + "/secret.txt " + f.rw + "/hl2"},
		{name: "ssh key", script: "cat " + f.home + "/.ssh/id_ed25519"},
		{name: "ssh dir listing", script: "ls -a " + f.home + "/.ssh"},
		{name: "aws credentials", script: "cat " + f.home + "/.aws/credentials"},
		{name: "other home files stay readable", script: "cat " + f.home + "/notes.txt", wantOK: true, wantOut: "home notes"},
		{name: "dotenv file", script: "cat " + f.ro + "/.env"},
		{name: "nested dotenv file", script: "cat " + f.ro + "/sub/.env.local"},
		{name: "unmount the deny overlay", script: "umount " + f.home + "/.ssh && cat " + f.home + "/.ssh/id_ed25519"},
		{name: "gateway root home", script: "ls /root"},
		{name: "host /home", script: "ls /home/*"},
		{name: "host /var", script: "ls /var/lib"},
		{name: "no resolv.conf", script: "cat /etc/resolv.conf"},
		{name: "sys not mounted", script: "ls /sys/kernel"},
		{name: "runs as nobody", script: "id -u", wantOK: true, wantOut: "65534"},
		{name: "no capabilities", script: "grep CapEff /proc/self/status", wantOK: true, wantOut: "0000000000000000"},
		{name: "no new user namespace", script: "unshare -U true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := sh(t, r, scope, tt.script)
			if tt.wantOK != (res.ExitCode == 0) {
				t.Errorf("exit %d (stderr %q), want success=%v", res.ExitCode, res.Stderr, tt.wantOK)
			}
			if !strings.Contains(res.Stdout, tt.wantOut) {
				t.Errorf("stdout %q, want it to contain %q", res.Stdout, tt.wantOut)
			}
			if strings.Contains(res.Stdout+res.Stderr, f.secret) {
				t.Errorf("the secret leaked: stdout %q stderr %q", res.Stdout, res.Stderr)
			}
		})
	}
	// Nothing was written outside the rw grant on the host.
	if _, err := os.Stat(filepath.Join(f.ro, "new")); err == nil {
		t.Error("a file appeared in the read-only grant on the host")
	}
	if _, err := os.Stat("/usr/portcullis-x"); err == nil {
		t.Error("a file appeared in /usr on the host")
	}
}

// TestGatewayEnvironmentInvisible: neither the environment of the sandbox's
// processes nor any process outside the pid namespace holds the gateway's.
func TestGatewayEnvironmentInvisible(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	script := fmt.Sprintf("cat /proc/*/environ | tr '\\0' '\\n'; cat /proc/%d/environ; ls /proc | grep -c '^[0-9]'; env", os.Getpid())
	res := sh(t, f.runner(), f.scope(wire.PostureOff), script)
	if strings.Contains(res.Stdout+res.Stderr, gatewaySecret) {
		t.Fatalf("gateway environment visible in the sandbox: %q", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "HOME=/tmp/portcullis-home-test") {
		t.Errorf("the spec's environment is missing: %q", res.Stdout)
	}
	for _, line := range strings.Split(res.Stdout, "\n") {
		if n, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && n > 4 {
			t.Errorf("sandbox sees %d processes; the pid namespace should hold only its own", n)
		}
	}
}

// TestEnvIsExactlySpecEnv: bwrap inherits the spec's environment and adds
// nothing of the gateway's.
func TestEnvIsExactlySpecEnv(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	res, err := f.runner().Run(context.Background(), spec(f.scope(wire.PostureOff), "/usr/bin/env"))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	// bwrap adds PWD for its --chdir; nothing else.
	want := append(spec(wire.Scope{}, "x").Env, "PWD=/tmp/portcullis-home-test")
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("env = %q, want %q", got, want)
	}
}

// breakoutBin builds testdata/breakout once.
var breakout struct {
	once sync.Once
	path string
	err  error
}

func breakoutBin(t *testing.T) string {
	t.Helper()
	breakout.once.Do(func() {
		dir, err := os.MkdirTemp("", "portcullis-breakout-")
		if err != nil {
			breakout.err = err
			return
		}
		dir, _ = filepath.EvalSymlinks(dir)
		breakout.path = filepath.Join(dir, "breakout")
		cmd := exec.Command("go", "build", "-o", breakout.path, "./testdata/breakout")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			breakout.err = fmt.Errorf("go build breakout: %v\n%s", err, out)
		}
	})
	if breakout.err != nil {
		t.Fatal(breakout.err)
	}
	return breakout.path
}

// TestSeccompBlocks runs each forbidden operation for real.
func TestSeccompBlocks(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	bin := breakoutBin(t)
	f := newFixture(t)
	scope := f.scope(wire.PostureFull) // full: the filter, not the netns, must stop unix sockets
	scope.FSGrants = append(scope.FSGrants, wire.FSGrant{Path: filepath.Dir(bin), Mode: wire.ModeRead})
	r := f.runner()
	tests := []struct {
		op, want string
	}{
		{"tiocsti", "blocked operation not permitted"},
		{"tiocsti-high", "blocked operation not permitted"},
		{"unix", "blocked operation not permitted"},
		{"unix-dgram", "blocked operation not permitted"},
		{"socketpair", "blocked operation not permitted"},
		{"io_uring", "blocked operation not permitted"},
		{"bpf", "blocked operation not permitted"},
		{"keyctl", "blocked operation not permitted"},
		{"ptrace", "blocked operation not permitted"},
		{"mount", "blocked operation not permitted"},
		{"unshare-net", "blocked operation not permitted"},
		{"unshare-user", "blocked operation not permitted"},
		{"x32", "blocked"},
		{"inet", "allowed"},              // the filter is not a blanket socket ban
		{"socketpair-stream", "allowed"}, // anonymous stream pairs reach nothing; Deno needs one
	}
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			t.Parallel()
			res, err := r.Run(context.Background(), spec(scope, bin, tt.op))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(res.Stdout); !strings.HasPrefix(got, tt.want) {
				t.Errorf("%s: got %q (stderr %q, exit %d), want %q", tt.op, got, res.Stderr, res.ExitCode, tt.want)
			}
		})
	}
}

// TestNetworkOff: no route anywhere, not even to the host's loopback.
func TestNetworkOff(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer srv.Close()
	f := newFixture(t)
	res := sh(t, f.runner(), f.scope(wire.PostureOff),
		"curl -sS --max-time 3 "+srv.URL+"/; echo curl=$?; getent hosts example.com; echo getent=$?")
	if !strings.Contains(res.Stdout, "curl=7") {
		t.Errorf("curl to the host's loopback: %q %q, want exit 7 (cannot connect)", res.Stdout, res.Stderr)
	}
	if !strings.Contains(res.Stdout, "getent=2") {
		t.Errorf("DNS lookup: %q, want getent exit 2 (not found)", res.Stdout)
	}
	if hits.Load() != 0 {
		t.Errorf("the host listener was reached %d times", hits.Load())
	}
	if res.Network != nil {
		t.Errorf("posture off reported proxy stats %+v", res.Network)
	}
}

// TestNetworkAllowlist: the allowed host:port works through the proxy, the
// rest is refused and recorded, DNS and direct connections fail.
func TestNetworkAllowlist(t *testing.T) {
	requireBwrap(t)
	if os.Geteuid() != 0 {
		t.Skip("posture allowlist needs root")
	}
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello from loopback") }))
	defer srv.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "must not be reached") }))
	defer other.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	otherPort := other.Listener.Addr().(*net.TCPAddr).Port
	f := newFixture(t)
	scope := f.scope(wire.PostureAllowlist, fmt.Sprintf("localhost:%d", port), "127.0.0.0/8:"+strconv.Itoa(port))
	script := fmt.Sprintf(`
curl -sS --max-time 5 http://localhost:%[1]d/; echo " http=$?"
curl -sS --max-time 5 --socks5-hostname %[3]s http://localhost:%[1]d/; echo " socks=$?"
curl -sS --max-time 5 -o /dev/null -w '%%{http_code}' http://localhost:%[2]d/; echo " other=$?"
curl -sS --max-time 5 https://example.com/; echo " external=$?"
curl -sS --max-time 3 --noproxy '*' http://127.0.0.1:%[1]d/; echo " direct=$?"
getent hosts example.com; echo " getent=$?"
`, port, otherPort, ProxyAddr)
	res := sh(t, f.runner(), scope, script)
	for _, want := range []string{"hello from loopback http=0", "hello from loopback socks=0", "403 other=", "external=56", "direct=7", "getent=2"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, res.Stdout, res.Stderr)
		}
	}
	if strings.Contains(res.Stdout, "must not be reached") {
		t.Error("the non-allowed server was reached")
	}
	n := res.Network
	if n == nil {
		t.Fatal("no network stats")
	}
	allowed := fmt.Sprintf("localhost:%d", port)
	if len(n.Allowed) != 1 || n.Allowed[0] != allowed {
		t.Errorf("allowed = %q, want [%s]", n.Allowed, allowed)
	}
	for _, want := range []string{fmt.Sprintf("localhost:%d", otherPort), "example.com:443"} {
		if _, ok := n.Denials[want]; !ok {
			t.Errorf("refused %q not recorded: %+v", want, n)
		}
	}
	if n.Connections != 4 {
		t.Errorf("connections = %d, want 4 (2 allowed, 2 refused)", n.Connections)
	}
	if res.Profile == nil || !strings.Contains(strings.Join(res.Profile.EnvNames, ","), "HTTPS_PROXY") {
		t.Errorf("profile env names lack the proxy variables: %+v", res.Profile)
	}
}

// TestTimeoutKillsBackground: a program and its background children are
// all gone when the timeout fires, within timeout + grace.
func TestTimeoutKillsBackground(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	marker := fmt.Sprintf("41.%06d7", time.Now().UnixNano()%1000000)
	s := spec(f.scope(wire.PostureOff), "/bin/sh", "-c", "sleep "+marker+" & setsid sleep "+marker+" & sleep "+marker)
	s.Timeout = time.Second
	start := time.Now()
	res, err := f.runner().Run(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut {
		t.Errorf("TimedOut false: %+v", res)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("took %v, want within timeout + 2 s", d)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		left := procsWithArg(marker)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("processes survived the timeout: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExitKillsBackground: leftovers die when the program exits.
func TestExitKillsBackground(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	marker := fmt.Sprintf("42.%06d7", time.Now().UnixNano()%1000000)
	res := sh(t, f.runner(), f.scope(wire.PostureOff), "setsid sleep "+marker+" & echo started")
	if res.ExitCode != 0 {
		t.Fatalf("exit %d", res.ExitCode)
	}
	time.Sleep(200 * time.Millisecond)
	if left := procsWithArg(marker); len(left) > 0 {
		for _, p := range left {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		t.Fatalf("background process outlived the call: %v", left)
	}
}

func procsWithArg(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), marker) {
			out = append(out, pid)
		}
	}
	return out
}

// TestForkBombContained: the pids cgroup stops the bomb; the call ends.
func TestForkBombContained(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	r := New(Options{Profile: sandbox.ProfileOptions{UserHome: f.home}, PidsMax: 64, RequirePidsLimit: true})
	if r.cgroups == nil {
		t.Skip("no pids cgroup here: fork bombs are bounded only by the timeout (documented)")
	}
	bomb := `
import os, time
n, err = 0, ""
for i in range(400):
    try:
        pid = os.fork()
    except OSError as e:
        err = e.strerror
        break
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    n += 1
print(n, err)
`
	s := spec(f.scope(wire.PostureOff), "/usr/bin/python3", "-c", bomb)
	s.Timeout = 15 * time.Second
	start := time.Now()
	res, err := r.Run(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	n, reason, _ := strings.Cut(strings.TrimSpace(res.Stdout), " ")
	forks, err := strconv.Atoi(n)
	if err != nil || forks >= 64 || reason != "Resource temporarily unavailable" {
		t.Errorf("bomb output %q (stderr %q): want fewer than 64 forks, then EAGAIN", res.Stdout, res.Stderr)
	}
	// The program's exit ends the call: its sleeping children do not hold it.
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("call took %v; the pid namespace teardown should end it at once", d)
	}
}

// TestMemoryHogContained: memory_bytes binds the program inside the
// sandbox by either mechanism: the call's memory cgroup (the kernel kills
// the call) or, when the scope says so, RLIMIT_DATA (the allocation fails).
// The Go toolchain, which the old RLIMIT_AS killed at start, runs under the
// same limit.
func TestMemoryHogContained(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	r := f.runner()
	mechanisms := []string{wire.MemoryLimitRlimitData}
	if r.MemoryLimit() == wire.MemoryLimitCgroup {
		mechanisms = append(mechanisms, wire.MemoryLimitCgroup)
	}
	for _, m := range mechanisms {
		s := spec(f.scope(wire.PostureOff), "/usr/bin/python3", "-c", "b = bytearray(1 << 30); print('allocated')")
		s.Limits.MemoryBytes = 256 << 20
		s.Scope.MemoryLimit = m
		res, err := r.Run(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		killed := res.Signal != nil && *res.Signal == "SIGKILL"
		if res.ExitCode == 0 || strings.Contains(res.Stdout, "allocated") ||
			(m == wire.MemoryLimitRlimitData && !strings.Contains(res.Stderr, "MemoryError")) || (m == wire.MemoryLimitCgroup && !killed) {
			t.Errorf("%s: 1 GiB allocation under a 256 MiB limit: exit %d signal %v stdout %q stderr %q", m, res.ExitCode, res.Signal, res.Stdout, res.Stderr)
		}
		gobin, err := filepath.EvalSymlinks("/usr/local/go/bin/go")
		if err != nil {
			continue
		}
		g := spec(f.scope(wire.PostureOff), gobin, "version")
		g.Limits.MemoryBytes = 512 << 20
		g.Scope.MemoryLimit = m
		g.Scope.FSGrants = append(g.Scope.FSGrants, wire.FSGrant{Path: filepath.Dir(filepath.Dir(gobin)), Mode: wire.ModeRead})
		res, err = r.Run(context.Background(), g)
		if err != nil || res.ExitCode != 0 {
			t.Errorf("%s: go version under 512 MiB: %v exit %d stderr %.300q", m, err, res.ExitCode, res.Stderr)
		}
	}
}

// TestUnsafeDenyTargetRefused: a secret path that is a symlink fails the
// call instead of being followed by the mount.
func TestUnsafeDenyTargetRefused(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	if err := os.Symlink(filepath.Join(f.outside, "secret.txt"), filepath.Join(f.rw, ".env")); err != nil {
		t.Fatal(err)
	}
	_, err := f.runner().Run(context.Background(), spec(f.scope(wire.PostureOff), "/bin/true"))
	if err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("Run = %v, want a refusal naming the symlink", err)
	}
}

// TestSetupFailureIsAnError: a sandbox that cannot be built never looks
// like a program that ran and failed.
func TestSetupFailureIsAnError(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	_, err := f.runner().Run(context.Background(), spec(f.scope(wire.PostureOff), f.outside+"/not-there"))
	if err == nil {
		t.Fatal("Run of a missing program returned no error")
	}
	res, err := f.runner().Run(context.Background(), spec(f.scope(wire.PostureOff), "/bin/sh", "-c", "exit 1"))
	if err != nil || res.ExitCode != 1 {
		t.Fatalf("exit 1: res %+v err %v", res, err)
	}
	res, err = f.runner().Run(context.Background(), spec(f.scope(wire.PostureOff), "/bin/sh", "-c", "kill -KILL $$"))
	if err != nil || res.Signal == nil || *res.Signal != "SIGKILL" || res.ExitCode != -1 {
		t.Fatalf("killed: res %+v err %v", res, err)
	}
}

// TestWorkdir: cwd is honoured; without one the program starts in HOME.
func TestWorkdir(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	s := spec(f.scope(wire.PostureOff), "/bin/pwd")
	s.Dir = f.rw
	res, err := f.runner().Run(context.Background(), s)
	if err != nil || strings.TrimSpace(res.Stdout) != f.rw {
		t.Errorf("pwd with Dir: %q %v", res.Stdout, err)
	}
	res, err = f.runner().Run(context.Background(), spec(f.scope(wire.PostureOff), "/bin/pwd"))
	if err != nil || strings.TrimSpace(res.Stdout) != "/tmp/portcullis-home-test" {
		t.Errorf("pwd without Dir: %q %v", res.Stdout, err)
	}
}
