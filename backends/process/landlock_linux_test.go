package process

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func requireLandlock(t *testing.T) {
	t.Helper()
	if LandlockABI() < 1 {
		if os.Getenv("PORTCULLIS_REQUIRE_LANDLOCK") == "1" {
			t.Fatal("Landlock required (PORTCULLIS_REQUIRE_LANDLOCK=1) but this kernel has none")
		}
		t.Skip("no Landlock on this kernel")
	}
}

// TestRunExecAllow: under an exec restriction the program runs but cannot
// start anything outside the allowed paths, and whatever it forks inherits
// the restriction; a direct launch, which has no helper to restrict the
// program, refuses instead of running it unrestricted. The control rows run
// the same escape unrestricted and prove that it works there.
func TestRunExecAllow(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	sh := ExecChain("/bin/sh")
	tests := []struct {
		name   string
		allow  []string
		direct bool
		ran    bool // the planted command must run
	}{
		{name: "helper, unrestricted control", allow: nil, ran: true},
		{name: "helper, restricted", allow: sh},
		{name: "direct, unrestricted control", allow: nil, direct: true, ran: true},
		{name: "helper, the command's directory allowed", allow: append(slices.Clone(sh), "/usr/bin"), ran: true},
	}
	t.Run("direct, restricted: refused", func(t *testing.T) {
		t.Parallel()
		proof := filepath.Join(t.TempDir(), "ran")
		s := spec("/usr/bin/touch", proof)
		s.ExecAllow = ExecChain("/usr/bin/touch")
		if _, err := New(Options{}).RunLaunch(context.Background(), s, Launch{Direct: true}); err == nil {
			t.Error("a direct launch with an exec restriction ran")
		}
		if _, err := os.Stat(proof); err == nil {
			t.Error("the program ran")
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			proof := filepath.Join(t.TempDir(), "ran")
			// The shell runs; it then tries to run touch directly, and
			// from a grandchild in a subshell.
			s := spec("/bin/sh", "-c", `/usr/bin/touch "$0"; ( /usr/bin/touch "$0.2" ); echo shell-ran`, proof)
			s.ExecAllow = tt.allow
			r := New(Options{})
			res, err := r.RunLaunch(context.Background(), s, Launch{Direct: tt.direct})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res.Stdout, "shell-ran") {
				t.Fatalf("the allowed program did not run: exit %d stderr %q", res.ExitCode, res.Stderr)
			}
			for _, p := range []string{proof, proof + ".2"} {
				_, statErr := os.Stat(p)
				if ran := statErr == nil; ran != tt.ran {
					t.Errorf("%s exists = %v, want %v (stderr %q)", filepath.Base(p), ran, tt.ran, res.Stderr)
				}
			}
			if !tt.ran && !strings.Contains(res.Stderr, "Permission denied") {
				t.Errorf("stderr %q, want the shell's Permission denied", res.Stderr)
			}
		})
	}
}

// TestExecChain: a dynamic ELF program brings its loader; a script brings
// its interpreter, and "#!/usr/bin/env NAME" brings env and NAME.
func TestExecChain(t *testing.T) {
	t.Parallel()
	sh := ExecChain("/bin/sh")
	if len(sh) < 2 || !filepath.IsAbs(sh[0]) {
		t.Fatalf("ExecChain(/bin/sh) = %v, want the shell and its loader", sh)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "s")
	if err := os.WriteFile(script, []byte("#!/usr/bin/env sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got := ExecChain(script)
	env, _ := filepath.EvalSymlinks("/usr/bin/env")
	if !slices.Contains(got, env) || !slices.Contains(got, sh[0]) {
		t.Errorf("ExecChain(env script) = %v, want env (%s) and sh (%s)", got, env, sh[0])
	}
	if got := ExecChain(filepath.Join(dir, "missing")); len(got) != 0 {
		t.Errorf("ExecChain(missing) = %v", got)
	}
}

// TestRestrictHelper: the exec-restrict helper (what bwrap runs inside the
// sandbox) runs the program restricted, and refuses malformed requests
// without running anything.
func TestRestrictHelper(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	proof := filepath.Join(dir, "ran")
	shArgs := []string{"/bin/sh", "-c", `/usr/bin/touch "$0"; echo shell-ran`, proof}
	out, err := exec.Command(self, RestrictArgs(ExecChain("/bin/sh"), shArgs)...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "shell-ran") || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("restricted run: %v %q", err, out)
	}
	if _, err := os.Stat(proof); err == nil {
		t.Error("the restricted shell executed touch")
	}
	for name, args := range map[string][]string{
		"bad version":     {restrictArg, "v0", "0", "--", "/usr/bin/touch", proof},
		"count past args": {restrictArg, restrictVersion, "9", "--", "/usr/bin/touch", proof},
		"relative path":   {restrictArg, restrictVersion, "1", "usr", "--", "/usr/bin/touch", proof},
		"relative target": {restrictArg, restrictVersion, "0", "--", "touch", proof},
		"not allowed":     {restrictArg, restrictVersion, "0", "--", "/usr/bin/touch", proof},
	} {
		out, err := exec.Command(self, args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != HelperExitCode || !strings.HasPrefix(string(out), RestrictRefusal) {
			t.Errorf("%s: %v %q, want a refusal", name, err, out)
		}
		if _, err := os.Stat(proof); err == nil {
			t.Fatalf("%s: the program ran", name)
		}
	}
}
