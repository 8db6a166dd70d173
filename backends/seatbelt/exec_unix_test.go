//go:build unix

package seatbelt

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// The macOS runner's exec core (helper, limits, group kill, output cap) has
// no macOS dependency, so these tests run it on any unix with the program
// itself as the launcher: everything but sandbox-exec is exercised for real.

func TestMain(m *testing.M) {
	MaybeRunHelper()
	os.Exit(m.Run())
}

func testExecer(t *testing.T) *execer {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &execer{log: slog.New(slog.DiscardHandler), helper: self}
}

func spec(argv ...string) sandbox.Spec {
	return sandbox.Spec{Argv: argv, Env: []string{"PATH=/usr/bin:/bin", "ONLY=this"}, Timeout: 10 * time.Second, MaxOutputBytes: 64 << 10}
}

func (x *execer) mustRun(t *testing.T, s sandbox.Spec) sandbox.Result {
	t.Helper()
	res, err := x.run(context.Background(), s, s.Argv)
	if err != nil {
		t.Fatalf("run %q: %v", s.Argv, err)
	}
	return res
}

func TestExecExitEnvAndDir(t *testing.T) {
	t.Parallel()
	x := testExecer(t)
	res := x.mustRun(t, spec("/bin/sh", "-c", `env | sort; pwd; echo err >&2; exit 3`))
	if res.ExitCode != 3 || res.Stderr != "err\n" {
		t.Errorf("exit %d stderr %q", res.ExitCode, res.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	// Exactly the spec's environment (sh adds PWD, SHLVL and _).
	for _, l := range lines[:len(lines)-1] {
		name, _, _ := strings.Cut(l, "=")
		switch name {
		case "PATH", "ONLY", "PWD", "SHLVL", "_":
		default:
			t.Errorf("unexpected environment entry %q", l)
		}
	}
	if wd := lines[len(lines)-1]; !strings.Contains(wd, "portcullis-exec-") {
		t.Errorf("working directory %q is not a private one", wd)
	}
}

func TestExecLimits(t *testing.T) {
	t.Parallel()
	x := testExecer(t)
	s := spec("/bin/sh", "-c", "ulimit -n; ulimit -t; ulimit -f")
	s.Limits = wire.Limits{Nofile: 64, CPUSeconds: 7, FsizeBytes: 1 << 20}
	res := x.mustRun(t, s)
	// ulimit -f counts 512-byte blocks (1024 in some shells).
	got := strings.Fields(res.Stdout)
	if len(got) != 3 || got[0] != "64" || got[1] != "7" || (got[2] != "2048" && got[2] != "1024") {
		t.Errorf("limits = %q, want 64 7 2048|1024", res.Stdout)
	}
}

func TestExecTimeoutKillsTheGroup(t *testing.T) {
	t.Parallel()
	x := testExecer(t)
	marker := filepath.Join(t.TempDir(), "survivor")
	s := spec("/bin/sh", "-c", `(sleep 3; touch `+marker+`) & sleep 30`)
	s.Timeout = time.Second
	start := time.Now()
	res := x.mustRun(t, s)
	if !res.TimedOut {
		t.Errorf("not timed out: %+v", res)
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("took %v, want about timeout + grace", d)
	}
	time.Sleep(4 * time.Second)
	if _, err := os.Stat(marker); err == nil {
		t.Error("a background child outlived the timeout")
	}
}

func TestExecOutputCap(t *testing.T) {
	t.Parallel()
	x := testExecer(t)
	s := spec("/bin/sh", "-c", `head -c 100000 /dev/zero | tr '\0' 'a'; printf '\377'`)
	s.MaxOutputBytes = 1024
	res := x.mustRun(t, s)
	if len(res.Stdout) != 1024 || !res.StdoutTruncated {
		t.Errorf("stdout %d bytes truncated %v, want 1024 true", len(res.Stdout), res.StdoutTruncated)
	}
}

func TestExecHelperRefusals(t *testing.T) {
	t.Parallel()
	x := testExecer(t)
	proof := filepath.Join(t.TempDir(), "ran")
	// A launcher that cannot be exec'd is a refusal: the program must not run.
	s := spec("/usr/bin/touch", proof)
	_, err := x.run(context.Background(), s, []string{"/nonexistent/launcher", "/usr/bin/touch", proof})
	if err == nil || !strings.Contains(err.Error(), "exec /nonexistent/launcher") {
		t.Errorf("missing launcher: err = %v", err)
	}
	if _, err := os.Stat(proof); !os.IsNotExist(err) {
		t.Error("the program ran")
	}
	good := []string{helperArg, helperVersion, "-", "-", "-", helperSep, "/usr/bin/touch", proof}
	for _, tc := range []struct {
		name     string
		args     []string
		noStatus bool
		want     string
	}{
		{"no status fd", good, true, "status fd"},
		{"bad version", replace(good, 1, "v0"), false, "protocol version"},
		{"missing separator", replace(good, 5, "x"), false, `want "--"`},
		{"garbage limit", replace(good, 2, "lots"), false, "RLIMIT_CPU"},
		{"soft above hard", replace(good, 4, "9:8"), false, "soft above hard"},
		{"relative target", replace(good, 6, "touch"), false, "not an absolute path"},
		{"too few", good[:5], false, "arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(x.helper, tc.args...)
			cmd.Env = []string{}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			var statR *os.File
			if !tc.noStatus {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				defer w.Close()
				cmd.ExtraFiles = []*os.File{w}
				statR = r
			}
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != HelperExitCode {
				t.Fatalf("helper exit %v, want %d", err, HelperExitCode)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q, want %q", stderr.String(), tc.want)
			}
			if statR != nil {
				cmd.ExtraFiles[0].Close()
				b, _ := io.ReadAll(statR)
				if !strings.Contains(string(b), tc.want) {
					t.Errorf("status %q, want %q", b, tc.want)
				}
			}
			if _, err := os.Stat(proof); !os.IsNotExist(err) {
				t.Error("the program ran")
			}
		})
	}
}

func replace(s []string, i int, v string) []string {
	out := append([]string(nil), s...)
	out[i] = v
	return out
}
