package bwrap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

func writeAll(t *testing.T, files map[string]string) {
	t.Helper()
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func deepDir(root string, n int) string {
	p := root
	for i := range n {
		p = filepath.Join(p, "l"+string(rune('a'+i%26)))
	}
	return p
}

// TestMaskEveryDepthAcrossCalls: one Exec moves secrets around its rw grant
// (a directory holding a .env 5 and 10 levels down, a parent renamed) and
// the next Exec, on the same runner and warm cache, cannot read any of it;
// a secret created deep in the tree by someone else after the cache warmed
// is hidden on the next call.
func TestMaskEveryDepthAcrossCalls(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	writeAll(t, map[string]string{
		filepath.Join(f.rw, "a/.env"):            f.secret,
		filepath.Join(f.rw, "b/cfg/.env"):        f.secret,
		filepath.Join(f.rw, "c/keys/server.key"): f.secret,
	})
	r := f.runner()
	scope := f.scope(wire.PostureOff)
	// Warm the cache and check the start.
	if res := sh(t, r, scope, "cat "+f.rw+"/a/.env "+f.rw+"/b/cfg/.env "+f.rw+"/c/keys/server.key; echo done"); strings.Contains(res.Stdout, f.secret) {
		t.Fatalf("secret readable before any move: %q", res.Stdout)
	}
	d5, d10 := deepDir(f.rw+"/m5", 5), deepDir(f.rw+"/m10", 10)
	script := "mkdir -p " + d5 + " " + d10 + " && mv " + f.rw + "/b/cfg " + d5 + "/cfg && mv " + f.rw + "/c " + d10 + "/c && mv " + f.rw + "/a " + f.rw + "/a2 && " +
		// The .env itself is a mount point here: moving it fails (EBUSY).
		"(mv " + f.rw + "/a2/.env " + d10 + "/.env 2>&1 || true); echo moved"
	res := sh(t, r, scope, script)
	if !strings.Contains(res.Stdout, "moved") {
		t.Fatalf("mover: %q %q", res.Stdout, res.Stderr)
	}
	// Someone else plants a secret 12 levels down after the cache warmed.
	late := filepath.Join(deepDir(f.rw+"/late", 12), ".env.local")
	writeAll(t, map[string]string{late: f.secret})

	res = sh(t, r, scope, "for f in $(find "+f.rw+" -name '.env*' -o -name '*.key'); do echo \"$f\"; cat \"$f\"; done; echo end")
	if strings.Contains(res.Stdout, f.secret) {
		t.Fatalf("a moved or late secret is readable in the next call:\n%s", res.Stdout)
	}
	for _, want := range []string{d5 + "/cfg/.env", d10 + "/c/keys/server.key", f.rw + "/a2/.env", late} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("%s not listed (the test did not move it?):\n%s", want, res.Stdout)
		}
	}
}

// TestMaskedFileTricks: inside one call, what a program can do to a masked
// file in its rw grant does not reveal it: hard link (cross-device), rename
// or delete it (a mount point), rename its parent (the mask follows),
// bind-mount over it (no mount rights, seccomp).
func TestMaskedFileTricks(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	writeAll(t, map[string]string{filepath.Join(f.rw, "p/q/.env"): f.secret})
	r := f.runner()
	scope := f.scope(wire.PostureOff)
	script := `cd ` + f.rw + `
ln p/q/.env hl 2>/dev/null && echo "link: $(cat hl)"
mv p/q/.env moved 2>/dev/null && echo "mv: $(cat moved)"
rm -f p/q/.env 2>/dev/null
mv p p2 && echo "parent: $(cat p2/q/.env)"
mv p2/q q3 && echo "grandparent: $(cat q3/.env)"
cp q3/.env copy 2>/dev/null; echo "copy: $(cat copy 2>/dev/null)"
/usr/bin/python3 -c "import ctypes; l=ctypes.CDLL(None); print('mount', l.mount(b'/usr/bin', b'` + f.rw + `/q3/.env', None, 4096, None))" 2>&1
echo "after: $(cat q3/.env)"
`
	res := sh(t, r, scope, script)
	if strings.Contains(res.Stdout+res.Stderr, f.secret) {
		t.Fatalf("the masked secret leaked:\n%s\n%s", res.Stdout, res.Stderr)
	}
	if !strings.Contains(res.Stdout, "parent: \n") && !strings.Contains(res.Stdout, "parent: ") {
		t.Errorf("rename of the parent failed: %q %q", res.Stdout, res.Stderr)
	}
	// On the host, the secret is where the renames put it, untouched.
	if b, err := os.ReadFile(filepath.Join(f.rw, "q3/.env")); err != nil || string(b) != f.secret {
		t.Errorf("host copy: %q %v", b, err)
	}
	// And the next call finds it there.
	if res := sh(t, r, scope, "cat "+f.rw+"/q3/.env; echo end"); strings.Contains(res.Stdout, f.secret) {
		t.Errorf("next call reads the renamed secret: %q", res.Stdout)
	}
}

// TestMaskRaceRenameParent: one long Exec renames the parent of a secret
// back and forth as fast as it can while other Execs in the same grant look
// for the secret everywhere. No call ever reads it. With a pids cgroup the
// renaming program is stopped while each other sandbox is built, so every
// call runs and the secret stays whole (bwrap, which creates a missing
// mount point with creat(2), would otherwise truncate it when the rename
// lands between its stat and its creat). Without one, the mount check
// refuses the sandboxes the renames raced (ErrTreeChanged) and builds them
// again.
func TestMaskRaceRenameParent(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	for _, tt := range []struct {
		name    string
		pidsMax int
	}{{"frozen", 128}, {"no cgroup", -1}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			writeAll(t, map[string]string{filepath.Join(f.rw, "x/in/.env"): f.secret})
			r := New(Options{Profile: sandbox.ProfileOptions{UserHome: f.home}, PidsMax: tt.pidsMax})
			frozen := tt.pidsMax > 0
			if frozen && r.cgroups == nil {
				t.Skip("no pids cgroup here: running programs cannot be stopped")
			}
			scope := f.scope(wire.PostureOff)
			renames := make(chan string, 1)
			go func() {
				s := spec(scope, "/usr/bin/python3", "-c", renameLoop(f.rw, 6))
				s.Timeout = 60 * time.Second
				res, _ := r.Run(context.Background(), s)
				renames <- res.Stdout
			}()
			time.Sleep(300 * time.Millisecond)
			var ran, refused int
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) || ran < 3 {
				if time.Now().After(deadline.Add(30 * time.Second)) {
					break
				}
				// Wherever the renames (and any mount point bwrap created) put it.
				res, err := r.Run(context.Background(), spec(scope, "/bin/sh", "-c", "find "+f.rw+" -name .env -exec cat {} + 2>/dev/null; echo end"))
				if err != nil {
					if !errors.Is(err, sandbox.ErrTreeChanged) {
						t.Fatalf("unexpected error: %v", err)
					}
					refused++
					continue
				}
				ran++
				if strings.Contains(res.Stdout, f.secret) {
					t.Fatalf("the secret was read while its parent was being renamed:\n%s", res.Stdout)
				}
			}
			n, _ := strconv.Atoi(strings.TrimSpace(<-renames))
			t.Logf("%d calls ran with the secret masked, %d were refused as the tree kept changing; %d renames", ran, refused, n)
			if n < 1000 {
				t.Errorf("only %d renames: the race was not run", n)
			}
			var envs []string
			whole := false
			_ = filepath.WalkDir(f.rw, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Name() == ".env" {
					envs = append(envs, strings.TrimPrefix(p, f.rw))
					if b, err := os.ReadFile(p); err == nil && string(b) == f.secret {
						whole = true
					}
				}
				return nil
			})
			if frozen {
				if !whole || len(envs) != 1 {
					t.Errorf("the secret on the host was truncated or mount points were left: %v (whole: %v)", envs, whole)
				}
				// A rename in flight when the stop is sent can still land
				// after the profile (then the check refuses); rarely.
				if refused > ran/4 {
					t.Errorf("%d calls refused, %d ran, although the renaming program was stopped during their setup", refused, ran)
				}
			}
		})
	}
}

// TestAutorunGuardExec: in a rw grant, existing guarded files cannot be
// changed; new ones are moved aside after the run and reported;
// allow_autorun lifts both.
func TestAutorunGuardExec(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	f := newFixture(t)
	writeAll(t, map[string]string{
		filepath.Join(f.rw, ".bashrc"):                    "# orig\n",
		filepath.Join(f.rw, "repo/.git/config"):           "[core]\n",
		filepath.Join(f.rw, "repo/.git/hooks/pre-commit"): "#!/bin/sh\n",
		filepath.Join(f.rw, "repo/src/main.go"):           "package main\n",
	})
	r := f.runner()
	scope := f.scope(wire.PostureOff)
	script := `cd ` + f.rw + `
for p in .bashrc repo/.git/config repo/.git/hooks/pre-commit; do echo evil >> $p 2>/dev/null && echo "wrote $p"; done
echo new > repo/.git/hooks/post-checkout 2>/dev/null && echo "wrote hook"
echo ok >> repo/src/main.go && echo "wrote src"
mkdir -p newrepo/.git/hooks && echo evil > newrepo/.git/hooks/pre-commit && echo "planted"
mkdir -p .github/workflows && echo evil > .github/workflows/x.yml && echo "planted ci"
for fd in /proc/$$/fd/*; do echo "fd $(readlink $fd)"; done
`
	res := sh(t, r, scope, script)
	for _, bad := range []string{"wrote .bashrc", "wrote repo/.git/config", "wrote repo/.git/hooks/pre-commit", "wrote hook"} {
		if strings.Contains(res.Stdout, bad) {
			t.Errorf("%s: an existing guarded file was writable", bad)
		}
	}
	if !strings.Contains(res.Stdout, "wrote src") || !strings.Contains(res.Stdout, "planted") {
		t.Fatalf("ordinary writes failed: %q %q", res.Stdout, res.Stderr)
	}
	// The descriptors the read-only binds were made from do not reach the
	// program (a directory's O_PATH descriptor would let it create files
	// in the writable original through openat).
	for _, line := range strings.Split(res.Stdout, "\n") {
		if strings.HasPrefix(line, "fd ") && strings.Contains(line, f.rw) {
			t.Errorf("the program inherited a descriptor into its grant: %s", line)
		}
	}
	got := map[string]bool{}
	for _, ch := range res.Autorun {
		got[strings.TrimPrefix(ch.Path, f.rw+"/")] = ch.QuarantinedAs != ""
	}
	for _, want := range []string{"newrepo/.git/hooks", ".github/workflows"} {
		if !got[want] {
			t.Errorf("%s not moved aside: %+v", want, res.Autorun)
		}
		if _, err := os.Lstat(filepath.Join(f.rw, want)); err == nil {
			t.Errorf("%s still in place on the host", want)
		}
	}
	if we := sandbox.AutorunRefusal(res.Autorun); we == nil || we.Code != wire.CodeFSDenied {
		t.Errorf("refusal: %+v", we)
	}

	allow := f.scope(wire.PostureOff)
	for i := range allow.FSGrants {
		if allow.FSGrants[i].Path == f.rw {
			allow.FSGrants[i].AllowAutorun = true
		}
	}
	res = sh(t, r, allow, "cd "+f.rw+" && echo added >> .bashrc && echo x > repo/.git/hooks/post-merge && echo done")
	if !strings.Contains(res.Stdout, "done") || len(res.Autorun) != 0 {
		t.Errorf("allow_autorun: %q %q %+v", res.Stdout, res.Stderr, res.Autorun)
	}
	if b, _ := os.ReadFile(filepath.Join(f.rw, ".bashrc")); !strings.Contains(string(b), "added") {
		t.Errorf("allow_autorun: .bashrc not written: %q", b)
	}
}

// renameLoop is a program that renames dir/x to dir/y and back for secs
// seconds. A sandbox discarded in the race may have left an empty mount
// point at the free name; it is removed so that the loop goes on.
func renameLoop(dir string, secs int) string {
	return `import os, shutil, time
os.chdir("` + dir + `")
cur, other, end, n = "x", "y", time.time() + ` + strconv.Itoa(secs) + `, 0
try:
    while time.time() < end:
        try:
            os.rename(cur, other)
            cur, other = other, cur
            n += 1
        except OSError:
            shutil.rmtree(other, ignore_errors=True)
finally:
    print(n, flush=True)
`
}
