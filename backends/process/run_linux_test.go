package process

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

func TestMain(m *testing.M) {
	MaybeRunHelper()
	os.Exit(m.Run())
}

// spec returns a Spec with sane defaults for tests.
// goBinary is the go command's real path, "" when it is not installed.
func goBinary() string {
	p, err := exec.LookPath("go")
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return ""
}

func spec(argv ...string) sandbox.Spec {
	return sandbox.Spec{
		Argv:           argv,
		Env:            []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
		Timeout:        10 * time.Second,
		MaxOutputBytes: 64 << 10,
	}
}

func run(t *testing.T, s sandbox.Spec) sandbox.Result {
	t.Helper()
	res, err := New(Options{}).Run(context.Background(), s)
	if err != nil {
		t.Fatalf("Run(%q): %v", s.Argv, err)
	}
	return res
}

func sig(r sandbox.Result) string {
	if r.Signal == nil {
		return ""
	}
	return *r.Signal
}

func TestRunExitAndStreams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name               string
		argv               []string
		wantExit           int
		wantSig            string
		wantOut, wantErr   string
		wantStdoutTrunc    bool
		wantStderrTrunc    bool
		wantTimedOut       bool
		wantCanceled       bool
		wantDurationAtMost time.Duration
	}{
		{name: "true", argv: []string{"/bin/true"}, wantExit: 0},
		{name: "false", argv: []string{"/bin/false"}, wantExit: 1},
		{name: "exit 42", argv: []string{"/bin/sh", "-c", "exit 42"}, wantExit: 42},
		{name: "separate streams", argv: []string{"/bin/sh", "-c", "echo out; echo err >&2"}, wantOut: "out\n", wantErr: "err\n"},
		{name: "no shell interpretation", argv: []string{"/bin/echo", "; pwd", "$HOME", "*"}, wantOut: "; pwd $HOME *\n"},
		{name: "killed by signal", argv: []string{"/bin/sh", "-c", "kill -KILL $$"}, wantExit: -1, wantSig: "SIGKILL"},
		{name: "terminated by signal", argv: []string{"/bin/sh", "-c", "kill -TERM $$"}, wantExit: -1, wantSig: "SIGTERM"},
		{name: "status fd not inherited", argv: []string{"/bin/sh", "-c", "echo leak >&3"}, wantExit: 2, wantErr: "/bin/sh: 1: 3: Bad file descriptor\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, spec(tt.argv...))
			if res.ExitCode != tt.wantExit || sig(res) != tt.wantSig {
				t.Errorf("exit %d signal %q, want %d %q", res.ExitCode, sig(res), tt.wantExit, tt.wantSig)
			}
			if res.Stdout != tt.wantOut || res.Stderr != tt.wantErr {
				t.Errorf("stdout %q stderr %q, want %q %q", res.Stdout, res.Stderr, tt.wantOut, tt.wantErr)
			}
			if res.TimedOut || res.Canceled || res.StdoutTruncated || res.StderrTruncated {
				t.Errorf("unexpected flags: %+v", res)
			}
			if res.Duration <= 0 || res.Duration > 5*time.Second {
				t.Errorf("duration %v", res.Duration)
			}
		})
	}
}

func TestRunOutputCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		script    string
		cap       int
		wantOut   func(string) bool
		wantTrunc bool
	}{
		{
			name:      "1 MB stdout under 1024 cap",
			script:    "head -c 1048576 /dev/zero | tr '\\0' a",
			cap:       1024,
			wantOut:   func(s string) bool { return s == strings.Repeat("a", 1024) },
			wantTrunc: true,
		},
		{
			name:      "exactly at cap is not truncated",
			script:    "head -c 1024 /dev/zero | tr '\\0' b",
			cap:       1024,
			wantOut:   func(s string) bool { return s == strings.Repeat("b", 1024) },
			wantTrunc: false,
		},
		{
			name:   "invalid bytes replaced",
			script: `printf 'ok\377\376end'`,
			cap:    1024,
			wantOut: func(s string) bool {
				return s == "ok\uFFFD\uFFFDend"
			},
		},
		{
			name:   "invalid bytes at the cap stay within it",
			script: `head -c 5000 /dev/zero | tr '\0' '\377'`,
			cap:    1024,
			wantOut: func(s string) bool {
				return len(s) <= 1024 && len(s) >= 1021 && utf8.ValidString(s) && strings.Trim(s, "\uFFFD") == ""
			},
			wantTrunc: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := spec("/bin/sh", "-c", tt.script)
			s.MaxOutputBytes = tt.cap
			res := run(t, s)
			if res.ExitCode != 0 {
				t.Fatalf("exit %d stderr %q", res.ExitCode, res.Stderr)
			}
			if len(res.Stdout) > tt.cap || !utf8.ValidString(res.Stdout) || !tt.wantOut(res.Stdout) {
				t.Errorf("stdout (%d bytes) %.80q... not as wanted", len(res.Stdout), res.Stdout)
			}
			if res.StdoutTruncated != tt.wantTrunc {
				t.Errorf("truncated %v, want %v", res.StdoutTruncated, tt.wantTrunc)
			}
		})
	}
}

func TestRunStderrDrainedPastCap(t *testing.T) {
	t.Parallel()
	// 8 MB on stderr would block forever on a full pipe if the runner
	// stopped reading at the cap; the trailing echo proves it ran to the end.
	s := spec("/bin/sh", "-c", "head -c 8388608 /dev/zero >&2; echo done")
	s.MaxOutputBytes = 1024
	res := run(t, s)
	if res.Stdout != "done\n" || !res.StderrTruncated || len(res.Stderr) != 1024 || res.TimedOut {
		t.Errorf("stdout %q stderr %d bytes truncated %v timed out %v", res.Stdout, len(res.Stderr), res.StderrTruncated, res.TimedOut)
	}
}

func TestRunEnvIsExactlySpecEnv(t *testing.T) {
	t.Setenv("PORTCULLIS_TEST_GATEWAY_SECRET", "must-not-leak")
	s := spec("/usr/bin/env")
	s.Env = []string{"A=1", "B=two words", "PATH=/bin"}
	res := run(t, s)
	got := strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n")
	if !slices.Equal(got, s.Env) {
		t.Errorf("child env %q, want exactly %q", got, s.Env)
	}

	s.Env = nil
	res = run(t, s)
	if res.Stdout != "" {
		t.Errorf("nil Env gave the child %q, want an empty environment", res.Stdout)
	}
}

func TestRunDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := spec("/bin/pwd")
	s.Dir = dir
	if res := run(t, s); res.Stdout != dir+"\n" {
		t.Errorf("pwd %q, want %q", res.Stdout, dir)
	}

	s = spec("/bin/sh", "-c", "pwd; touch made-here")
	res := run(t, s)
	tmp := strings.TrimSpace(res.Stdout)
	if !strings.Contains(filepath.Base(tmp), "portcullis-exec-") {
		t.Fatalf("default dir %q is not a private temp dir", tmp)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("private dir %s still exists after the run (stat: %v)", tmp, err)
	}
}

// markedSleep makes a uniquely named symlink to /bin/sleep so that leftover
// processes can be found by scanning /proc/*/cmdline (argv[0] is the
// link's path). A link, not a copy: a copy's write descriptor can be
// inherited by a child that a parallel test forks at that moment, and
// exec'ing the copy then fails with ETXTBSY (golang/go#22315).
func markedSleep(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	marker := filepath.Join(dir, fmt.Sprintf("sleep-marker-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Symlink("/bin/sleep", marker); err != nil {
		t.Fatal(err)
	}
	return marker
}

// survivors lists pids whose command line mentions marker.
func survivors(t *testing.T, marker string) []int {
	t.Helper()
	var pids []int
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue // gone, or a zombie
		}
		if bytes.Contains(b, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func waitNoSurvivors(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		left := survivors(t, marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("processes left behind: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRunTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		script  string // $0 is the marked sleep
		wantSig string
	}{
		{name: "sleep", script: `exec "$0" 10`, wantSig: "SIGTERM"},
		{name: "background child holding pipes", script: `"$0" 100 & "$0" 100`, wantSig: "SIGTERM"},
		{name: "ignores SIGTERM", script: `trap "" TERM; "$0" 100 & "$0" 100`, wantSig: "SIGKILL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			marker := markedSleep(t)
			s := spec("/bin/sh", "-c", tt.script, marker)
			s.Timeout = time.Second
			start := time.Now()
			res := run(t, s)
			took := time.Since(start)
			// The sleeps last 10 s and more: a run that waited for them
			// took that long. The bound leaves the grace, the cgroup
			// sweep and a loaded machine their time, and nothing more.
			if bound := s.Timeout + TermGrace + cgroupKillTimeout + 2*time.Second; took > bound {
				t.Errorf("returned after %v, want < %v", took, bound)
			}
			if !res.TimedOut || res.ExitCode != -1 || sig(res) != tt.wantSig {
				t.Errorf("timed out %v exit %d signal %q, want true -1 %q", res.TimedOut, res.ExitCode, sig(res), tt.wantSig)
			}
			waitNoSurvivors(t, marker)
		})
	}
}

func TestRunExitKillsBackgroundLeftovers(t *testing.T) {
	t.Parallel()
	marker := markedSleep(t)
	s := spec("/bin/sh", "-c", `"$0" 100 & echo started`, marker)
	start := time.Now()
	res := run(t, s)
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("returned after %v: a background child held the run", took)
	}
	if res.ExitCode != 0 || res.Stdout != "started\n" || res.TimedOut {
		t.Errorf("result %+v", res)
	}
	waitNoSurvivors(t, marker)
}

func TestRunContextCancelKillsGroup(t *testing.T) {
	t.Parallel()
	marker := markedSleep(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := spec("/bin/sh", "-c", `"$0" 100 & "$0" 100`, marker)
	s.Timeout = time.Minute
	time.AfterFunc(500*time.Millisecond, cancel)
	start := time.Now()
	res, err := New(Options{}).Run(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("returned %v after cancel", took)
	}
	if !res.Canceled || res.TimedOut || res.Signal == nil {
		t.Errorf("canceled %v timed out %v signal %v", res.Canceled, res.TimedOut, sig(res))
	}
	waitNoSurvivors(t, marker)

	if _, err := New(Options{}).Run(ctx, spec("/bin/true")); err == nil {
		t.Error("Run with a done context started anyway")
	}
}

func TestRunRlimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		argv    []string
		limits  wire.Limits
		memory  string // Scope.MemoryLimit
		check   func(sandbox.Result) bool
		explain string
	}{
		{
			name:   "RLIMIT_DATA stops a memory hog",
			argv:   []string{"/usr/bin/python3", "-c", "b = bytearray(512 * 1024 * 1024); print('allocated')"},
			limits: wire.Limits{MemoryBytes: 128 << 20},
			memory: wire.MemoryLimitRlimitData,
			check: func(r sandbox.Result) bool {
				return r.ExitCode != 0 && !strings.Contains(r.Stdout, "allocated") && strings.Contains(r.Stderr, "MemoryError")
			},
			explain: "want MemoryError and no 'allocated'",
		},
		{
			// The Go runtime reserves far more address space than this at
			// start; under RLIMIT_AS (the old mechanism) it died with
			// "failed to reserve page summary memory".
			name:    "the Go toolchain runs under RLIMIT_DATA",
			argv:    []string{goBinary(), "version"},
			limits:  wire.Limits{MemoryBytes: 512 << 20},
			memory:  wire.MemoryLimitRlimitData,
			check:   func(r sandbox.Result) bool { return r.ExitCode == 0 && strings.HasPrefix(r.Stdout, "go version ") },
			explain: "want go version to succeed under a 512 MiB memory limit",
		},
		{
			name:    "RLIMIT_FSIZE stops a big write",
			argv:    []string{"/bin/sh", "-c", "head -c 10485760 /dev/zero > big"},
			limits:  wire.Limits{FsizeBytes: 1 << 20},
			check:   func(r sandbox.Result) bool { return r.ExitCode != 0 },
			explain: "want a non-zero exit (head dies of SIGXFSZ)",
		},
		{
			name:    "RLIMIT_CPU stops a busy loop",
			argv:    []string{"/bin/sh", "-c", "while :; do :; done"},
			limits:  wire.Limits{CPUSeconds: 1},
			check:   func(r sandbox.Result) bool { return !r.TimedOut && r.ExitCode == -1 && sig(r) == "SIGXCPU" },
			explain: "want death by SIGXCPU before the timeout",
		},
		{
			name:    "RLIMIT_NOFILE is visible",
			argv:    []string{"/bin/sh", "-c", "ulimit -n"},
			limits:  wire.Limits{Nofile: 77},
			check:   func(r sandbox.Result) bool { return r.Stdout == "77\n" },
			explain: "want ulimit -n = 77",
		},
		{
			name:    "programs run under a tight memory limit",
			argv:    []string{"/bin/echo", "fits"},
			limits:  wire.Limits{MemoryBytes: 32 << 20},
			memory:  wire.MemoryLimitRlimitData,
			check:   func(r sandbox.Result) bool { return r.ExitCode == 0 && r.Stdout == "fits\n" },
			explain: "want echo to run under 32 MiB",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := os.Stat(tt.argv[0]); err != nil {
				t.Skipf("%s not installed", tt.argv[0])
			}
			s := spec(tt.argv...)
			s.Limits = tt.limits
			s.Scope.MemoryLimit = tt.memory
			s.Timeout = 20 * time.Second
			res := run(t, s)
			if !tt.check(res) {
				t.Errorf("%s; got exit %d signal %q timed out %v stdout %q stderr %.200q", tt.explain, res.ExitCode, sig(res), res.TimedOut, res.Stdout, res.Stderr)
			}
		})
	}
}

func TestRunFsizeSignal(t *testing.T) {
	t.Parallel()
	s := spec("/bin/sh", "-c", "exec head -c 10485760 /dev/zero > big")
	s.Limits = wire.Limits{FsizeBytes: 1 << 20}
	res := run(t, s)
	if res.ExitCode != -1 || sig(res) != "SIGXFSZ" {
		t.Errorf("exit %d signal %q, want -1 SIGXFSZ", res.ExitCode, sig(res))
	}
}

func TestRunHelperRefusesWhenLimitCannotBeSet(t *testing.T) {
	t.Parallel()
	nrOpen, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		t.Skip("no /proc/sys/fs/nr_open")
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(nrOpen)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	proof := filepath.Join(dir, "ran")
	s := spec("/bin/touch", proof)
	s.Limits = wire.Limits{Nofile: n + 1} // above nr_open: EPERM even for root
	r := New(Options{})
	r.noClamp = true
	_, err = r.Run(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "RLIMIT_NOFILE") {
		t.Errorf("Run err = %v, want a refusal naming RLIMIT_NOFILE", err)
	}
	if _, statErr := os.Stat(proof); !os.IsNotExist(statErr) {
		t.Errorf("the target ran although its limit could not be set (stat: %v)", statErr)
	}
}

func TestHelperProtocolRefusals(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	proof := filepath.Join(t.TempDir(), "ran")
	notCgroupfs := filepath.Join(t.TempDir(), procsBase)
	if err := os.WriteFile(notCgroupfs, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// 0 helperArg, 1 version, 2 cgroup count, 3 user, 4 exec count,
	// 5-8 limits, 9 separator, 10 target.
	good := []string{helperArg, helperVersion, "0", "-", "-", "-", "-", "-", "-", helperSep, "/bin/touch", proof}
	// withProcs is good with one cgroup.procs argument.
	withProcs := func(p string) []string {
		return slices.Insert(replace(good, 2, "1"), 3, p)
	}
	// withExec is good restricted to execute only the given paths.
	withExec := func(paths ...string) []string {
		return slices.Insert(replace(good, 4, strconv.Itoa(len(paths))), 5, paths...)
	}
	tests := []struct {
		name     string
		args     []string
		noStatus bool
		want     string
	}{
		{name: "no status fd", args: good, noStatus: true, want: "status fd"},
		{name: "bad version", args: replace(good, 1, "v9"), want: "protocol version"},
		{name: "previous version", args: replace(good, 1, "v2"), want: "protocol version"},
		{name: "first version", args: replace(good, 1, "v1"), want: "protocol version"},
		{name: "v3 token", args: replace(good, 1, "v3"), want: "protocol version"},
		{name: "missing separator", args: replace(good, 9, "x"), want: `want "--"`},
		{name: "v3 layout, v4 token", args: slices.Delete(slices.Clone(good), 3, 4), want: `want "--"`},
		{name: "too many cgroups", args: replace(good, 2, "3"), want: "cgroup count"},
		{name: "negative cgroup count", args: replace(good, 2, "-1"), want: "cgroup count"},
		{name: "cgroup count past the arguments", args: replace(good, 2, "2")[:4], want: "cgroup count"},
		{name: "garbage exec count", args: replace(good, 4, "x"), want: "exec count"},
		{name: "negative exec count", args: replace(good, 4, "-2"), want: "exec count"},
		{name: "exec count past the arguments", args: replace(good, 4, "60"), want: "arguments"},
		{name: "relative exec path", args: withExec("bin/touch"), want: "exec restriction"},
		{name: "exec restriction forbids the target", args: withExec("/nonexistent"), want: "exec /bin/touch: permission denied"},
		{name: "garbage limit", args: replace(good, 5, "lots"), want: "RLIMIT_CPU"},
		{name: "negative limit", args: replace(good, 8, "-1:-1"), want: "RLIMIT_DATA"},
		{name: "soft above hard", args: replace(good, 6, "9:8"), want: "soft above hard"},
		{name: "relative target", args: replace(good, 10, "touch"), want: "not an absolute path"},
		{name: "too few arguments", args: good[:10], want: "arguments"},
		{name: "exec failure", args: replace(good, 10, "/nonexistent/prog"), want: "exec /nonexistent/prog"},
		{name: "relative cgroup procs", args: withProcs(procsBase), want: "cgroup"},
		{name: "cgroup file not procs", args: withProcs("/sys/fs/cgroup/pids/tasks"), want: "cgroup"},
		{name: "unclean cgroup procs", args: withProcs("/sys/fs/cgroup/pids/x/../cgroup.procs"), want: "cgroup"},
		{name: "missing cgroup", args: withProcs("/sys/fs/cgroup/pids/portcullis-nonexistent/cgroup.procs"), want: "cgroup: joining"},
		{name: "procs not on a cgroup filesystem", args: withProcs(notCgroupfs), want: "not on a cgroup filesystem"},
		{name: "user not numeric", args: replace(good, 3, "nobody"), want: "UID:GID"},
		{name: "user to root", args: replace(good, 3, "0:0"), want: "not dropping privileges"},
		{name: "user root group", args: replace(good, 3, "65534:0"), want: "not dropping privileges"},
		{name: "user bad gid", args: replace(good, 3, "65534:x"), want: "gid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(self, tt.args...)
			cmd.Env = []string{}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			var statR *os.File
			if !tt.noStatus {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				cmd.ExtraFiles = []*os.File{w}
				statR = r
				defer w.Close()
			}
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != HelperExitCode {
				t.Fatalf("helper exit %v, want code %d", err, HelperExitCode)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q, want it to mention %q", stderr.String(), tt.want)
			}
			if statR != nil {
				cmd.ExtraFiles[0].Close()
				b, _ := io.ReadAll(statR)
				if !strings.Contains(string(b), tt.want) {
					t.Errorf("status pipe %q, want it to mention %q", b, tt.want)
				}
			}
			if _, err := os.Stat(proof); !os.IsNotExist(err) {
				t.Errorf("target ran")
			}
		})
	}
}

func replace(s []string, i int, v string) []string {
	out := slices.Clone(s)
	out[i] = v
	return out
}

func TestRunStartErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		runner *Runner
		spec   sandbox.Spec
	}{
		{name: "empty argv", runner: New(Options{}), spec: spec()},
		{name: "relative argv0", runner: New(Options{}), spec: spec("true")},
		{name: "missing program", runner: New(Options{}), spec: spec("/nonexistent/prog")},
		{name: "missing helper", runner: New(Options{HelperPath: "/nonexistent/helper"}), spec: spec("/bin/true")},
		{name: "helper that is not a helper", runner: New(Options{HelperPath: "/bin/true"}), spec: spec("/bin/true")},
		{name: "missing dir", runner: New(Options{}), spec: func() sandbox.Spec { s := spec("/bin/true"); s.Dir = "/nonexistent/dir"; return s }()},
		{name: "zero timeout", runner: New(Options{}), spec: func() sandbox.Spec { s := spec("/bin/true"); s.Timeout = 0; return s }()},
		{name: "NUL in argv", runner: New(Options{}), spec: spec("/bin/echo", "a\x00b")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if res, err := tt.runner.Run(context.Background(), tt.spec); err == nil {
				t.Errorf("Run succeeded with %+v, want a start error", res)
			}
		})
	}
}

// BenchmarkRunTrue is a run with the runner's defaults: a call cgroup when
// the host has a pids hierarchy. BenchmarkRunTrueNoCgroup is the same with
// PidsMax -1; the difference is the price of the cgroup (mkdir, pids.max,
// the helper's join, the emptiness check, rmdir).
func BenchmarkRunTrue(b *testing.B) { benchRunTrue(b, Options{}) }

func BenchmarkRunTrueNoCgroup(b *testing.B) { benchRunTrue(b, Options{PidsMax: -1}) }

func benchRunTrue(b *testing.B, opts Options) {
	r := New(opts)
	s := spec("/bin/true")
	s.Limits = wire.Limits{CPUSeconds: 60, MemoryBytes: 1 << 30, FsizeBytes: 64 << 20, Nofile: 256}
	for b.Loop() {
		if res, err := r.Run(context.Background(), s); err != nil || res.ExitCode != 0 {
			b.Fatalf("run: %v %+v", err, res)
		}
	}
}

func BenchmarkForkExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSurvivorsSeesLiveProcess proves the leftover scan used above can fail.
func TestSurvivorsSeesLiveProcess(t *testing.T) {
	t.Parallel()
	marker := markedSleep(t)
	cmd := exec.Command(marker, "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Second)
	for !slices.Contains(survivors(t, marker), cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatalf("survivors did not find live pid %d", cmd.Process.Pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunEscapedChildCannotHoldTheRun covers the fallback without a call
// cgroup (PidsMax < 0, or no pids hierarchy): a child that leaves the group
// (setsid) is out of reach of the group kill, but it must not keep the run
// from returning by holding the pipes. It is also the positive control of
// the cgroup tests: the same escape, found alive by the same scan.
func TestRunEscapedChildCannotHoldTheRun(t *testing.T) {
	t.Parallel()
	marker := markedSleep(t)
	t.Cleanup(func() {
		for _, pid := range survivors(t, marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	s := spec("/bin/sh", "-c", `/usr/bin/setsid "$0" 100 & /bin/sleep 0.3; echo hi`, marker)
	start := time.Now()
	res, err := New(Options{PidsMax: -1}).Run(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("returned after %v: the escaped child held the run", took)
	}
	if res.ExitCode != 0 || res.Stdout != "hi\n" {
		t.Errorf("result %+v", res)
	}
	if len(survivors(t, marker)) == 0 {
		t.Error("the child did not escape the group; the test proves nothing")
	}
}
