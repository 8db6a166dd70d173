package process

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/wire"
)

// nobody is the unprivileged user the tests drop to.
var nobody = &Credential{UID: 65534, GID: 65534}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("dropping to another user needs root")
	}
}

// runAs runs s as nobody and fails the test if it could not start.
func runAs(t *testing.T, argv ...string) (string, int) {
	t.Helper()
	r := New(Options{User: nobody})
	res, err := r.Run(context.Background(), spec(argv...))
	if err != nil {
		t.Fatalf("Run(%q) as nobody: %v", argv, err)
	}
	return res.Stdout + res.Stderr, res.ExitCode
}

// TestUserDrop: with Options.User the program runs as that user with
// every id changed, no supplementary groups, no capabilities and
// no_new_privs, so it can neither act as root nor climb back to it.
func TestUserDrop(t *testing.T) {
	t.Parallel()
	needRoot(t)
	out, code := runAs(t, "/bin/cat", "/proc/self/status")
	if code != 0 {
		t.Fatalf("cat exit %d: %s", code, out)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	for k, want := range map[string]string{
		"Uid": "65534 65534 65534 65534", "Gid": "65534 65534 65534 65534", "Groups": "",
		"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1",
	} {
		if got := fields[k]; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

// TestUserDropAttacker: the program, as nobody, tries what a hostile one
// would against the gateway that runs it (this test process, root): read a
// 0600 secret, its environment and memory through /proc, signal it. Every
// attempt must fail; the positive control shows the program did run.
func TestUserDropAttacker(t *testing.T) {
	t.Parallel()
	needRoot(t)
	secret := filepath.Join(t.TempDir(), "secret.key")
	if err := os.WriteFile(secret, []byte("PRIVATE+KEY+x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The directory is traversable, so only the file's own mode stops it.
	if err := os.Chmod(filepath.Dir(secret), 0o755); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		name string
		argv []string
	}{
		{"read a 0600 key", []string{"/bin/cat", secret}},
		{"read the runner's environ", []string{"/bin/cat", "/proc/" + pid + "/environ"}},
		{"read the runner's memory", []string{"/bin/dd", "if=/proc/" + pid + "/mem", "bs=1", "count=1", "skip=4194304"}},
		{"signal the runner", []string{"/bin/kill", "-0", pid}},
		{"open the runner's fds", []string{"/bin/ls", "/proc/" + pid + "/fd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, code := runAs(t, tc.argv...)
			if code == 0 {
				t.Errorf("%q as nobody succeeded: %q", tc.argv, out)
			}
			if strings.Contains(out, "PRIVATE+KEY") {
				t.Errorf("secret leaked: %q", out)
			}
		})
	}
	if out, code := runAs(t, "/usr/bin/id", "-u"); code != 0 || strings.TrimSpace(out) != "65534" {
		t.Errorf("control: id -u = %q (exit %d), want 65534", out, code)
	}
}

// TestUserDropPrivateDirs: the runner's own working directory and the
// spec's private directories are handed to the user, so a program as
// nobody can write its HOME and working directory; a directory that is
// not private stays root's.
func TestUserDropPrivateDirs(t *testing.T) {
	t.Parallel()
	needRoot(t)
	home := privateTemp(t) // 0700 root under /tmp, like exectool's private HOME
	if err := os.MkdirAll(filepath.Join(home, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	other := privateTemp(t)
	if err := os.Chmod(other, 0o755); err != nil {
		t.Fatal(err)
	}
	s := spec("/bin/sh", "-c", `touch "$HOME/sub/x" && touch ./y && ! touch "$OTHER/z" 2>/dev/null`)
	s.Env = append(s.Env, "HOME="+home, "OTHER="+other)
	s.PrivateDirs = []string{home}
	res, err := New(Options{User: nobody}).Run(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(home, "sub", "x")); err != nil {
		t.Error(err)
	}
}

// privateTemp is a 0700 directory directly under the system temp dir (as
// the tools make theirs), removed when t ends.
func privateTemp(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "process-user-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestUserDropPdeathsig: the kernel clears the parent-death signal when
// the credentials change; the helper sets it again, so the program still
// dies with the gateway.
func TestUserDropPdeathsig(t *testing.T) {
	t.Parallel()
	needRoot(t)
	// The system python: one under root's home is not nobody's to run.
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no /usr/bin/python3 (used to read PR_GET_PDEATHSIG)")
	}
	out, code := runAs(t, py, "-c", "import ctypes;s=ctypes.c_int();ctypes.CDLL(None).prctl(2,ctypes.byref(s));print(s.value)")
	if code != 0 || strings.TrimSpace(out) != "9" {
		t.Errorf("PR_GET_PDEATHSIG = %q (exit %d), want 9 (SIGKILL)", out, code)
	}
}

// TestUserDropKeepsLimits: the limits still apply after the drop.
func TestUserDropKeepsLimits(t *testing.T) {
	t.Parallel()
	needRoot(t)
	s := spec("/bin/sh", "-c", "ulimit -n")
	s.Limits = wire.Limits{Nofile: 77}
	res, err := New(Options{User: nobody}).Run(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(res.Stdout) != "77" {
		t.Errorf("ulimit -n = %q, want 77", res.Stdout)
	}
}
