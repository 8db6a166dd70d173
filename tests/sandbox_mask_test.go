package tests

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// maskDeployment is a bwrap deployment for the masking and autorun-guard
// suite: agent-full has a read-write project (autorun guard on), a small
// "big" tree the tests grow past the scan budget, and the gateway user's
// home read-only; agent-narrow has the same project with allow_autorun.
type maskDeployment struct {
	*deployment
	proj, big, home string
	secret          string
}

const (
	maskBudgetEntries = 3000
	maskBudgetDirs    = 300
)

func newMaskDeployment(t *testing.T) *maskDeployment {
	t.Helper()
	d := newDeploymentWith(t, storeSQLite, "bwrap")
	m := &maskDeployment{deployment: d,
		proj: filepath.Join(d.dir, "proj"), big: filepath.Join(d.dir, "big"), home: filepath.Join(d.dir, "home"),
		secret: "MASKSECRET-" + randHex(t, 8)}
	for _, dir := range []string{m.proj, m.big, m.home} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rego, err := os.ReadFile(filepath.Join("testdata", "sandbox", "sandbox.rego"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.bundleDir, "e2e.rego"), rego)
	off := map[string]any{"posture": "off", "allow": []string{}}
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), map[string]any{"e2e": map[string]any{"principals": map[string]any{
		agentFull: map[string]any{"tools": []string{"Exec"}, "network": off, "fs_grants": []map[string]any{
			{"path": "/usr", "mode": "r"},
			{"path": m.proj, "mode": "rw"},
			{"path": m.big, "mode": "rw"},
			{"path": m.home, "mode": "r"},
		}},
		agentNarrow: map[string]any{"tools": []string{"Exec"}, "network": off, "fs_grants": []map[string]any{
			{"path": "/usr", "mode": "r"},
			{"path": m.proj, "mode": "rw", "allow_autorun": true},
		}},
	}}})
	// A small scan budget, so that the budget test needs no huge tree.
	cfg, err := os.ReadFile(d.configPath)
	if err != nil {
		t.Fatal(err)
	}
	patched := strings.Replace(string(cfg), "sandbox:\n  backend: bwrap\n",
		fmt.Sprintf("sandbox:\n  backend: bwrap\n  mask_max_entries: %d\n  mask_max_dirs: %d\n", maskBudgetEntries, maskBudgetDirs), 1)
	if patched == string(cfg) {
		t.Fatal("could not patch the sandbox section of the config")
	}
	writeFile(t, d.configPath, []byte(patched))
	// The gateway user's home is ours: its .gnupg and .ssh hold secrets.
	for _, p := range []string{".gnupg/private-keys-v1.d/ABCD.key", ".gnupg/secring.gpg", ".ssh/id_ed25519"} {
		m.put(t, filepath.Join(m.home, p))
	}
	writeFile(t, filepath.Join(m.home, "notes.txt"), []byte("home notes\n"))
	env := make([]string, 0, len(d.env)+1)
	for _, kv := range d.env {
		if !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	d.env = append(env, "HOME="+m.home)
	return m
}

// put writes the deployment's secret at path, creating its directories.
func (m *maskDeployment) put(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, []byte(m.secret))
}

func levels(root string, n int) string {
	p := root
	for i := range n {
		p = filepath.Join(p, fmt.Sprintf("lvl%d", i))
	}
	return p
}

// TestSandboxMaskE2E drives the real gateway binary on bwrap: secrets are
// hidden at every depth of every grant whatever an earlier Exec did to the
// tree, the scan budget refuses a too-large tree without running anything,
// and the autorun guard keeps Exec from planting files that run later.
func TestSandboxMaskE2E(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	m := newMaskDeployment(t)
	g := startVariant(t, m.deployment)
	key, allowKey := m.keys[agentFull], m.keys[agentNarrow]

	// run posts an Exec of sh -c script and fails the test if the secret
	// shows anywhere in the answer.
	run := func(t *testing.T, key, script string) (*toolCallResult, execData) {
		t.Helper()
		res := g.call(t, key, sandboxExecBody("/bin/sh", "-c", script))
		if strings.Contains(string(res.body), m.secret) {
			t.Fatalf("the secret leaked through Exec %q:\n%s", script, res.response)
		}
		if res.status != http.StatusOK || res.errCode() == "sandbox_violation" {
			return res, execData{}
		}
		if b, _ := res.Output.Metadata["backend"].(string); b != "bwrap" {
			t.Fatalf("metadata.backend = %q, want bwrap", b)
		}
		return res, res.exec(t)
	}
	// listAll prints every secret-shaped file under the project with its
	// content (which must be empty or unreadable).
	listAll := "for f in $(find " + m.proj + " \\( -name '.env*' -o -name '*.key' -o -name 'id_*' \\) -type f 2>/dev/null); do echo \"== $f\"; cat \"$f\" 2>&1; done; echo end"

	t.Run("deep secrets are hidden", func(t *testing.T) {
		m.put(t, filepath.Join(levels(m.proj+"/deep", 5), ".env"))
		m.put(t, filepath.Join(levels(m.proj+"/deep", 11), ".env.production"))
		m.put(t, filepath.Join(levels(m.proj+"/keys", 7), "id_ed25519"))
		m.put(t, filepath.Join(levels(m.proj+"/gpg", 6), ".gnupg/private-keys-v1.d/X.key"))
		_, d := run(t, key, listAll)
		for _, want := range []string{levels(m.proj+"/deep", 11) + "/.env.production", levels(m.proj+"/keys", 7) + "/id_ed25519"} {
			if !strings.Contains(d.Stdout, want) {
				t.Errorf("%s not found by the program (so not tested):\n%s", want, d.Stdout)
			}
		}
	})

	t.Run("secrets moved by an earlier Exec stay hidden", func(t *testing.T) {
		m.put(t, m.proj+"/app/config/.env")
		m.put(t, m.proj+"/app/.env")
		m.put(t, m.proj+"/svc/certs/tls.key")
		run(t, key, "true") // the cache is warm, the secrets masked
		d5, d12 := levels(m.proj+"/m5", 5), levels(m.proj+"/m12", 12)
		_, d := run(t, key, "set -e; mkdir -p "+d5+" "+d12+"; mv "+m.proj+"/app/config "+d5+"/config; mv "+m.proj+"/svc "+d12+"/svc; mv "+m.proj+"/app "+m.proj+"/app-renamed; "+
			// The masked file itself is a mount point: it cannot be moved,
			// linked (another device) or removed.
			"if mv "+m.proj+"/app-renamed/.env "+d12+"/.env 2>/dev/null; then echo MOVED-THE-MASK; fi; "+
			"if ln "+m.proj+"/app-renamed/.env "+m.proj+"/hardlink 2>/dev/null; then echo LINKED; fi; echo moved")
		if !strings.Contains(d.Stdout, "moved") || strings.Contains(d.Stdout, "MOVED-THE-MASK") || strings.Contains(d.Stdout, "LINKED") {
			t.Fatalf("mover: %q %q", d.Stdout, d.Stderr)
		}
		_, d = run(t, key, listAll)
		for _, want := range []string{d5 + "/config/.env", d12 + "/svc/certs/tls.key", m.proj + "/app-renamed/.env"} {
			if !strings.Contains(d.Stdout, "== "+want) {
				t.Errorf("%s not listed (the move did not happen?):\n%s", want, d.Stdout)
			}
		}
	})

	t.Run("a secret created after the cache warmed is hidden", func(t *testing.T) {
		run(t, key, "true")
		late := filepath.Join(levels(m.proj+"/late", 13), ".env.local")
		m.put(t, late)
		_, d := run(t, key, "cat "+late+"; echo end")
		if !strings.Contains(d.Stdout, "end") {
			t.Errorf("unexpected: %q %q", d.Stdout, d.Stderr)
		}
	})

	t.Run("gnupg of the gateway user is hidden", func(t *testing.T) {
		_, d := run(t, key, "ls -A "+m.home+"/.gnupg "+m.home+"/.gnupg/private-keys-v1.d 2>/dev/null | sed 's/^/LS:/'; "+
			"cat "+m.home+"/.gnupg/private-keys-v1.d/ABCD.key "+m.home+"/.gnupg/secring.gpg 2>/dev/null; cat "+m.home+"/notes.txt")
		if !strings.Contains(d.Stdout, "home notes") {
			t.Errorf("the rest of the home is not readable: %q %q", d.Stdout, d.Stderr)
		}
		if strings.Contains(d.Stdout, "LS:") {
			t.Errorf("the contents of ~/.gnupg are listed:\n%s", d.Stdout)
		}
	})

	t.Run("scan budget refuses a too-large tree and runs nothing", func(t *testing.T) {
		marker := filepath.Join(m.proj, "budget-ran-"+randHex(t, 4))
		for i := range maskBudgetEntries + 10 {
			writeFile(t, filepath.Join(m.big, fmt.Sprintf("f%05d", i)), nil)
		}
		res, _ := run(t, key, "touch "+marker)
		if res.errCode() != "sandbox_violation" {
			t.Fatalf("code %q, want sandbox_violation: %s", res.errCode(), res.response)
		}
		msg := res.Output.Error.Message
		if !strings.Contains(msg, "mask_max_entries") || !strings.Contains(msg, m.big) {
			t.Errorf("message does not say what to change: %q", msg)
		}
		if _, err := os.Stat(marker); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the refused call ran: %v", err)
		}
		rc := g.waitReceipt(t, res.ReceiptID, 10*time.Second, func(r receipt) bool { return r.status() != "pending" && r.status() != "" })
		if rc.Outcome == nil || rc.Outcome.ErrorCode == nil || *rc.Outcome.ErrorCode != "sandbox_violation" {
			t.Errorf("receipt outcome: %s", rc.raw)
		}
		// Shrunk again, the grant works again.
		if err := os.RemoveAll(m.big); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(m.big, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, d := run(t, key, "echo again"); !strings.Contains(d.Stdout, "again") {
			t.Errorf("after shrinking: %q", d.Stdout)
		}
	})

	t.Run("autorun guard", func(t *testing.T) {
		files := map[string]string{
			".bashrc": "# orig bashrc\n", "repo/.git/config": "[core]\n", "repo/.git/hooks/pre-commit": "#!/bin/sh\n",
			"repo/.vscode/tasks.json": "{}\n", "repo/src/main.go": "package main\n",
		}
		for p, c := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(m.proj, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(m.proj, p), []byte(c))
		}
		_, d := run(t, key, "cd "+m.proj+"; for p in .bashrc repo/.git/config repo/.git/hooks/pre-commit repo/.vscode/tasks.json; do "+
			"if echo evil >> $p 2>/dev/null; then echo \"WROTE $p\"; fi; done; "+
			"if echo x > repo/.git/hooks/post-checkout 2>/dev/null; then echo WROTE-NEW-HOOK; fi; echo ok >> repo/src/main.go && echo wrote-src")
		if strings.Contains(d.Stdout, "WROTE") || !strings.Contains(d.Stdout, "wrote-src") {
			t.Errorf("existing guarded files: %q %q", d.Stdout, d.Stderr)
		}
		for p, c := range files {
			if p == "repo/src/main.go" {
				continue
			}
			if b, _ := os.ReadFile(filepath.Join(m.proj, p)); string(b) != c {
				t.Errorf("%s changed on the host: %q", p, b)
			}
		}

		// Creating new ones: the run goes through, then the guard moves
		// them aside and the call is refused with fs_denied.
		res, d := run(t, key, "cd "+m.proj+" && mkdir -p other/.git/hooks home2 .github/workflows && echo evil > other/.git/hooks/pre-commit && "+
			"echo evil > home2/.bashrc && echo evil > .github/workflows/ci.yml && "+
			// and by replacing the parent of a bound file
			"mv repo/.git repo/.git-old && mkdir repo/.git && printf '[core]\\n\\tfsmonitor = evil\\n' > repo/.git/config && echo planted")
		if !strings.Contains(d.Stdout, "planted") {
			t.Fatalf("planting: %q %q", d.Stdout, d.Stderr)
		}
		if res.errCode() != "fs_denied" || res.Output.Success {
			t.Fatalf("code %q success %v, want fs_denied: %s", res.errCode(), res.Output.Success, res.response)
		}
		for _, p := range []string{"other/.git/hooks", "home2/.bashrc", ".github/workflows", "repo/.git/config"} {
			if !strings.Contains(res.Output.Error.Message, filepath.Join(m.proj, p)) {
				t.Errorf("%s not named in the refusal: %s", p, res.Output.Error.Message)
			}
			if _, err := os.Lstat(filepath.Join(m.proj, p)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s is still in place on the host: %v", p, err)
			}
		}
		if _, ok := res.Output.Error.Details["changes"]; !ok {
			t.Errorf("details.changes missing: %s", res.response)
		}
		rc := g.waitReceipt(t, res.ReceiptID, 10*time.Second, func(r receipt) bool { return r.status() != "pending" && r.status() != "" })
		if rc.Outcome == nil || rc.Outcome.ErrorCode == nil || *rc.Outcome.ErrorCode != "fs_denied" || rc.status() != "failed" {
			t.Errorf("receipt outcome: %s", rc.raw)
		}

		// allow_autorun lifts the guard for its grant.
		_, d = run(t, allowKey, "cd "+m.proj+" && echo added >> .bashrc && mkdir -p x/.git/hooks && echo y > x/.git/hooks/pre-push && echo done")
		if !strings.Contains(d.Stdout, "done") {
			t.Errorf("allow_autorun: %q %q", d.Stdout, d.Stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(m.proj, ".bashrc")); !strings.Contains(string(b), "added") {
			t.Errorf("allow_autorun: .bashrc not written: %q", b)
		}
		if _, err := os.Stat(filepath.Join(m.proj, "x/.git/hooks/pre-push")); err != nil {
			t.Errorf("allow_autorun: the new hook was moved: %v", err)
		}
	})

	t.Run("concurrent rename of a secret's parent never exposes it", func(t *testing.T) {
		m.put(t, m.proj+"/race/x/in/.env")
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			// x renamed to y and back for 8 s (an empty mount point that a
			// discarded sandbox left at the free name is removed).
			loop := "import os, shutil, time\nos.chdir('" + m.proj + "/race')\ncur, other, end = 'x', 'y', time.time() + 8\n" +
				"while time.time() < end:\n    try:\n        os.rename(cur, other)\n        cur, other = other, cur\n" +
				"    except OSError:\n        shutil.rmtree(other, ignore_errors=True)\n"
			body := map[string]any{"tool": "Exec", "input": map[string]any{"argv": []string{"/usr/bin/python3", "-c", loop}, "timeout_s": 30}}
			g.call(t, key, body)
		}()
		time.Sleep(500 * time.Millisecond)
		var ran, refused atomic.Int32
		deadline := time.Now().Add(6 * time.Second)
		for time.Now().Before(deadline) {
			res, _ := run(t, key, "find "+m.proj+"/race -name .env -exec cat {} + 2>/dev/null; echo end")
			switch res.errCode() {
			case "":
				ran.Add(1)
			case "sandbox_violation":
				refused.Add(1)
			default:
				t.Errorf("unexpected answer: %s", res.response)
			}
		}
		wg.Wait()
		t.Logf("%d calls ran with the secret masked, %d refused while the tree kept changing", ran.Load(), refused.Load())
		// With a pids cgroup the renaming program is stopped while the other
		// sandboxes are built, so bwrap never truncates the secret by creating
		// a mount point where it is about to land.
		whole := false
		_ = filepath.WalkDir(m.proj+"/race", func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == ".env" {
				if b, err := os.ReadFile(p); err == nil && string(b) == m.secret {
					whole = true
				}
			}
			return nil
		})
		if !whole && !strings.Contains(g.stderr.String(), "no pids cgroup") {
			t.Error("the secret was truncated on the host during the race")
		}
	})
}
