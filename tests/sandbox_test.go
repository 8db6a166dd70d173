package tests

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// requireBwrap skips the sandbox suite where bubblewrap cannot create its
// namespaces, or fails it when PORTCULLIS_REQUIRE_BWRAP=1.
func requireBwrap(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bwrap", "--unshare-user", "--unshare-pid", "--unshare-net",
		"--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
		"--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "--", "/bin/true").CombinedOutput()
	if err != nil {
		if os.Getenv("PORTCULLIS_REQUIRE_BWRAP") == "1" {
			t.Fatalf("bwrap required (PORTCULLIS_REQUIRE_BWRAP=1) but unusable: %v: %s", err, out)
		}
		t.Skipf("bwrap unusable here: %v: %s", err, out)
	}
}

// sandboxDeployment is a deployment running Exec on bwrap, with a tree of
// granted and ungranted files, a fake gateway-user home holding secrets,
// and two principals: agent-full (posture off) and agent-narrow (posture
// allowlist for allowPort on localhost).
type sandboxDeployment struct {
	*deployment
	ro, rw, outside, home string
	secret                string
}

func newSandboxDeployment(t *testing.T, allowPort int) *sandboxDeployment {
	t.Helper()
	d := newDeploymentWith(t, storeSQLite, "bwrap")
	s := &sandboxDeployment{
		deployment: d,
		ro:         filepath.Join(d.dir, "ro"),
		rw:         d.scratch,
		outside:    filepath.Join(d.dir, "outside"),
		home:       filepath.Join(d.dir, "home"),
		secret:     "TOPSECRET-" + randHex(t, 8),
	}
	for _, dir := range []string{s.ro, s.outside, filepath.Join(s.home, ".ssh")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(s.ro, "data.txt"), []byte("public data\n"))
	writeFile(t, filepath.Join(s.ro, ".env"), []byte(s.secret))
	writeFile(t, filepath.Join(s.outside, "secret.txt"), []byte(s.secret))
	writeFile(t, filepath.Join(s.home, ".ssh", "id_ed25519"), []byte(s.secret))
	writeFile(t, filepath.Join(s.home, "notes.txt"), []byte("home notes\n"))
	if err := os.Symlink(filepath.Join(s.outside, "secret.txt"), filepath.Join(s.rw, "link")); err != nil {
		t.Fatal(err)
	}

	rego, err := os.ReadFile(filepath.Join("testdata", "sandbox", "sandbox.rego"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.bundleDir, "e2e.rego"), rego) // replaces the e2e policy
	grants := []map[string]string{
		{"path": "/usr", "mode": "r"},
		{"path": s.ro, "mode": "r"},
		{"path": s.rw, "mode": "rw"},
		{"path": s.home, "mode": "r"},
	}
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), map[string]any{"e2e": map[string]any{"principals": map[string]any{
		agentFull: map[string]any{
			"tools": []string{"Exec"}, "fs_grants": grants,
			"network": map[string]any{"posture": "off", "allow": []string{}},
		},
		agentNarrow: map[string]any{
			"tools": []string{"Exec"}, "fs_grants": grants,
			"network": map[string]any{"posture": "allowlist", "allow": []string{
				fmt.Sprintf("localhost:%d", allowPort), fmt.Sprintf("127.0.0.0/8:%d", allowPort),
			}},
		},
	}}})

	// The gateway user's home is the fake one, so ~/.ssh is ours to plant.
	env := make([]string, 0, len(d.env)+1)
	for _, kv := range d.env {
		if !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	d.env = append(env, "HOME="+s.home)
	return s
}

func sandboxExecBody(argv ...string) map[string]any {
	return map[string]any{"tool": "Exec", "input": map[string]any{"argv": argv}}
}

// TestSandboxE2E drives the real binary with sandbox.backend bwrap and
// tries to break out of the sandbox through the API.
func TestSandboxE2E(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	var allowedHits, otherHits atomic.Int32
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		allowedHits.Add(1)
		fmt.Fprint(w, "hello through the proxy")
	}))
	defer allowed.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { otherHits.Add(1) }))
	defer other.Close()
	port := allowed.Listener.Addr().(*net.TCPAddr).Port
	otherPort := other.Listener.Addr().(*net.TCPAddr).Port

	s := newSandboxDeployment(t, port)
	g := startVariant(t, s.deployment) // skips until the binary runs bwrap, unless PORTCULLIS_REQUIRE_BWRAP=1
	key := s.keys[agentFull]
	gwPid := g.cmd.Process.Pid

	run := func(t *testing.T, key string, argv ...string) (*toolCallResult, execData) {
		t.Helper()
		res := g.call(t, key, sandboxExecBody(argv...))
		if res.status != http.StatusOK {
			t.Fatalf("Exec %q: %s", argv, res.response)
		}
		if b, _ := res.Output.Metadata["backend"].(string); b != "bwrap" {
			t.Fatalf("metadata.backend = %q, want bwrap", b)
		}
		d := res.exec(t)
		for _, leak := range []string{s.secret, s.dep().secret, s.dep().gwOnly} {
			if strings.Contains(d.Stdout+d.Stderr, leak) {
				t.Fatalf("secret %q leaked into the output of %q:\n%s\n%s", leak, argv, d.Stdout, d.Stderr)
			}
		}
		return res, d
	}
	sh := func(t *testing.T, key, script string) (*toolCallResult, execData) {
		t.Helper()
		return run(t, key, "/bin/sh", "-c", script)
	}

	breaks := []struct {
		name, script string
		wantOK       bool
		wantOut      string
	}{
		{name: "rw grant writable", script: "echo ok > " + s.rw + "/w && cat " + s.rw + "/w", wantOK: true, wantOut: "ok"},
		{name: "r grant not writable", script: "echo x > " + s.ro + "/w"},
		{name: "/usr not writable", script: "echo x > /usr/portcullis-e2e"},
		{name: "root not writable", script: "echo x > /portcullis-e2e"},
		{name: "ungranted file invisible", script: "cat " + s.outside + "/secret.txt"},
		{name: "gateway data dir invisible", script: "ls " + s.dataDir},
		{name: "gateway config invisible", script: "cat " + s.configPath},
		{name: "via /proc/self/root", script: "cat /proc/self/root" + s.outside + "/secret.txt"},
		{name: "planted symlink", script: "cat " + s.rw + "/link"},
		{name: "hard link across grants", script: "ln " + s.ro + "/data.txt " + s.rw + "/hl"},
		{name: "ssh key of the gateway user", script: "cat " + s.home + "/.ssh/id_ed25519"},
		{name: "dotenv in grant", script: "cat " + s.ro + "/.env"},
		{name: "home notes stay readable", script: "cat " + s.home + "/notes.txt", wantOK: true, wantOut: "home notes"},
		{name: "gateway environ by pid", script: fmt.Sprintf("cat /proc/%d/environ", gwPid)},
		{name: "every environ in the pid namespace", script: "cat /proc/[0-9]*/environ | tr '\\0' '\\n' | grep -c ANTHROPIC_API_KEY", wantOut: "0"},
		{name: "DNS fails", script: "getent hosts example.com"},
		{name: "loopback listener unreachable", script: "curl -sS --max-time 3 " + allowed.URL},
	}
	for _, tt := range breaks {
		t.Run(tt.name, func(t *testing.T) {
			_, d := sh(t, key, tt.script)
			if ok := d.ExitCode != nil && *d.ExitCode == 0; ok != tt.wantOK {
				t.Errorf("exit %v (stderr %q), want success=%v", d.ExitCode, d.Stderr, tt.wantOK)
			}
			if !strings.Contains(d.Stdout, tt.wantOut) {
				t.Errorf("stdout %q lacks %q", d.Stdout, tt.wantOut)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(s.ro, "w")); err == nil {
		t.Error("a file appeared in the read-only grant on the host")
	}
	if _, err := os.Stat("/portcullis-e2e"); err == nil {
		t.Error("a file appeared in / on the host")
	}
	if allowedHits.Load() != 0 {
		t.Errorf("posture off reached the loopback server %d times", allowedHits.Load())
	}

	t.Run("allowlist", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("posture allowlist needs a root gateway")
		}
		script := fmt.Sprintf("curl -sS --max-time 5 http://localhost:%d/; echo \" allowed=$?\"; "+
			"curl -sS --max-time 5 -o /dev/null -w '%%{http_code}' http://localhost:%d/; echo \" other=$?\"; "+
			"curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:%d/; echo \" direct=$?\"; "+
			"getent hosts example.com; echo \" dns=$?\"", port, otherPort, port)
		res, d := sh(t, s.keys[agentNarrow], script)
		for _, want := range []string{"hello through the proxy allowed=0", "403 other=", "direct=7", "dns=2"} {
			if !strings.Contains(d.Stdout, want) {
				t.Errorf("stdout lacks %q:\n%s\n%s", want, d.Stdout, d.Stderr)
			}
		}
		if otherHits.Load() != 0 {
			t.Errorf("the non-allowed server was reached %d times", otherHits.Load())
		}
		if allowedHits.Load() != 1 {
			t.Errorf("allowed server hits = %d, want 1", allowedHits.Load())
		}
		// The refusal is the gateway's to account for, not only curl's.
		if !strings.Contains(g.stderr.String(), fmt.Sprintf("localhost:%d", otherPort)) {
			t.Errorf("the refused target does not appear in the gateway's log")
		}
		rc := g.waitReceipt(t, res.ReceiptID, 10*time.Second, func(r receipt) bool { return r.status() != "pending" })
		if !strings.Contains(rc.raw, `"bwrap"`) {
			t.Errorf("receipt does not record the bwrap backend:\n%s", rc.raw)
		}
	})

	t.Run("timeout kills background children", func(t *testing.T) {
		marker := sleepMarker(t, 30)
		body := map[string]any{"tool": "Exec", "input": map[string]any{
			"argv": []string{"/bin/sh", "-c", "sleep " + marker + " & setsid sleep " + marker + " & sleep " + marker}, "timeout_s": 1}}
		start := time.Now()
		res := g.call(t, key, body)
		if res.errCode() != "timeout" {
			t.Fatalf("code %q, want timeout: %s", res.errCode(), res.response)
		}
		if d := time.Since(start); d > 3*time.Second+time.Second {
			t.Errorf("timeout call took %v, want within timeout + 2 s", d)
		}
		if left := waitNoProcs(marker, 2*time.Second); len(left) > 0 {
			t.Errorf("sandboxed processes survived the timeout: %v", left)
		}
	})

	t.Run("fork bomb and memory hog contained", func(t *testing.T) {
		bomb := "import os, time\nn, err = 0, ''\nfor i in range(3000):\n    try:\n        pid = os.fork()\n    except OSError as e:\n        err = e.strerror\n        break\n    if pid == 0:\n        time.sleep(5)\n        os._exit(0)\n    n += 1\nprint(n, err)\n"
		_, d := run(t, key, "/usr/bin/python3", "-c", bomb)
		n, reason, _ := strings.Cut(strings.TrimSpace(d.Stdout), " ")
		if forks, err := strconv.Atoi(n); err != nil || forks >= 3000 || reason != "Resource temporarily unavailable" {
			t.Errorf("fork bomb not contained: %q %q", d.Stdout, d.Stderr)
		}
		// Refused by RLIMIT_DATA (MemoryError) or, with a memory cgroup,
		// killed by the kernel at the limit (SIGKILL).
		_, d = run(t, key, "/usr/bin/python3", "-c", "b = bytearray(8 << 30); print('allocated')")
		killed := d.Signal != nil && *d.Signal == "SIGKILL"
		if strings.Contains(d.Stdout, "allocated") || (!strings.Contains(d.Stderr, "MemoryError") && !killed) {
			t.Errorf("8 GiB allocation not refused: %q %q signal %v", d.Stdout, d.Stderr, d.Signal)
		}
	})
}

func (s *sandboxDeployment) dep() *deployment { return s.deployment }
