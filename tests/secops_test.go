package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// Tests of the gateway's own defences (issues #13 and #20): what a program
// on the process backend can reach of the gateway, auto never meaning the
// process backend, private files, the HTTP edge (client address, oversized
// bodies), starting without a bundle service, the signing-key command.

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (dropping to another user, mount namespaces)")
	}
}

// appendConfig appends YAML to the deployment's config.
func appendConfig(t *testing.T, d *deployment, yaml string) {
	t.Helper()
	f, err := os.OpenFile(d.configPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(yaml); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// setTools rewrites the deployment's policy data so principal may call tools.
func setTools(t *testing.T, d *deployment, principal string, tools ...string) {
	t.Helper()
	editPrincipals(t, d, func(ps map[string]map[string]any) { ps[principal]["tools"] = tools })
}

// hideBwrap runs the gateway in a private mount namespace where
// /usr/bin/bwrap is /dev/null: a host without a working bubblewrap.
func hideBwrap(t *testing.T) []string {
	t.Helper()
	needRoot(t)
	for _, p := range []string{"/usr/bin/unshare", "/usr/bin/bwrap"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("needs %s: %v", p, err)
		}
	}
	return []string{"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
		`mount --bind /dev/null /usr/bin/bwrap && exec "$0" "$@"`}
}

// secExec is an Exec call of argv with a short timeout.
func secExec(argv ...string) map[string]any {
	return map[string]any{"tool": "Exec", "input": map[string]any{"argv": argv, "timeout_s": 10}}
}

// TestSecProcessBackendAttacker: with `backend: process` named and the
// gateway running as root, an Exec'd program plays the attacker against the
// gateway that started it: its environment and memory through /proc, its
// open files, its config, its checkpoint signing key, its SQLite evidence
// database (and -wal) and checkpoint copies, and a signal to it. Every
// attempt fails; the controls show the program runs (as 65534) and can use
// its grant.
func TestSecProcessBackendAttacker(t *testing.T) {
	t.Parallel()
	needRoot(t)
	d := newDeploymentWith(t, storeSQLite, "process")
	withCheckpoints(t, d)
	cpDir := filepath.Join(d.dir, "checkpoints")
	appendConfig(t, d, fmt.Sprintf("  checkpoint_dir: %q\n", cpDir))
	keyPath := filepath.Join(d.dir, "evidence-signing.key")
	keyBytes, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	g := d.start(t)
	pid := strconv.Itoa(g.cmd.Process.Pid)
	key := d.keys[agentFull]

	// Something in the evidence store and a checkpoint on disk first.
	if res := g.call(t, key, secExec("/usr/bin/true")); res.status != http.StatusOK {
		t.Fatalf("warm-up call: %s", res.response)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(cpDir, "latest")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint written within 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	db := filepath.Join(d.dataDir, "evidence.db")
	secrets := []string{d.secret, d.gwOnly, strings.TrimSpace(string(keyBytes)), d.keys[admin]}
	for _, tc := range []struct {
		name string
		argv []string
	}{
		{"gateway environ", []string{"/usr/bin/cat", "/proc/" + pid + "/environ"}},
		{"gateway memory", []string{"/usr/bin/dd", "if=/proc/" + pid + "/mem", "bs=4096", "count=1", "skip=1024"}},
		{"gateway maps", []string{"/usr/bin/cat", "/proc/" + pid + "/maps"}},
		{"gateway open files", []string{"/usr/bin/ls", "-l", "/proc/" + pid + "/fd/"}},
		{"gateway cwd", []string{"/usr/bin/ls", "/proc/" + pid + "/cwd/"}},
		{"config file", []string{"/usr/bin/cat", d.configPath}},
		{"signing key", []string{"/usr/bin/cat", keyPath}},
		{"evidence database", []string{"/usr/bin/cat", db}},
		{"evidence wal", []string{"/usr/bin/cat", db + "-wal"}},
		{"data dir listing", []string{"/usr/bin/ls", d.dataDir}},
		{"checkpoint copy", []string{"/usr/bin/cat", filepath.Join(cpDir, "latest")}},
		{"signal the gateway", []string{"/usr/bin/kill", "-0", pid}},
		{"ptrace the gateway", []string{"/usr/bin/cat", "/proc/" + pid + "/syscall"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := g.call(t, key, secExec(tc.argv...))
			if res.status != http.StatusOK {
				t.Fatalf("the attack did not run at all (want it to run and fail): %s", res.response)
			}
			x := res.exec(t)
			if x.ExitCode == nil || *x.ExitCode == 0 {
				t.Errorf("%v as the Exec child succeeded:\nstdout %q\nstderr %q", tc.argv, tail(x.Stdout, 300), tail(x.Stderr, 300))
			}
			for _, s := range secrets {
				if s != "" && strings.Contains(x.Stdout+x.Stderr, s) {
					t.Errorf("%v leaked a secret of the gateway", tc.argv)
				}
			}
		})
	}
	// Controls: the program runs, as the unprivileged user, and can work in
	// its grant; the gateway is still up.
	res := g.call(t, key, secExec("/usr/bin/id", "-u"))
	if x := res.exec(t); strings.TrimSpace(x.Stdout) != "65534" {
		t.Errorf("id -u = %q, want 65534 (sandbox.run_as default)", x.Stdout)
	}
	marker := filepath.Join(d.scratch, "written-by-agent")
	if x := g.call(t, key, secExec("/usr/bin/touch", marker)).exec(t); x.ExitCode == nil || *x.ExitCode != 0 {
		t.Errorf("touch in the rw grant failed: %q", x.Stderr)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("control: %v", err)
	}
	if g.do(t, http.MethodGet, "/healthz", "", nil).status != http.StatusOK {
		t.Error("gateway not healthy after the attacks")
	}
}

// TestSecProcessBackendSameUser: a gateway that is not root cannot give its
// programs another user, but it is non-dumpable, so a program of the same
// user still cannot read the gateway's environment (its initial block, which
// unsetenv does not erase) or memory through /proc. The gateway runs as
// 65534 here; its programs too.
func TestSecProcessBackendSameUser(t *testing.T) {
	t.Parallel()
	needRoot(t)
	if _, err := os.Stat("/usr/bin/setpriv"); err != nil {
		t.Skip("needs /usr/bin/setpriv")
	}
	d := newDeploymentWith(t, storeSQLite, "process")
	// The binaries where 65534 may run them, the deployment its own.
	bin, err := os.MkdirTemp("", "portcullis-e2e-nobody-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	for _, name := range []string{"gateway", "portcullis-exec-helper"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(gatewayBin), name))
		if err != nil {
			t.Fatal(err)
		}
		writeExecutable(t, filepath.Join(bin, name), b)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := filepath.WalkDir(d.dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 65534, 65534)
	}); err != nil {
		t.Fatal(err)
	}
	env := append(append([]string{}, d.env...), "HOME="+d.dir)
	g := startProcess(t, d, startOptions{env: env, wrap: []string{
		"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c", `shift; exec "$0" "$@"`,
		filepath.Join(bin, "gateway"),
	}})
	pid := strconv.Itoa(g.cmd.Process.Pid)
	key := d.keys[agentFull]
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil || !strings.Contains(string(status), "Uid:\t65534") {
		t.Fatalf("the gateway does not run as 65534: %v\n%s", err, status)
	}
	x := g.call(t, key, secExec("/usr/bin/id", "-u")).exec(t)
	if strings.TrimSpace(x.Stdout) != "65534" {
		t.Fatalf("program runs as %q, want the gateway's own user 65534", x.Stdout)
	}
	for _, argv := range [][]string{
		{"/usr/bin/cat", "/proc/" + pid + "/environ"},
		{"/usr/bin/dd", "if=/proc/" + pid + "/mem", "bs=4096", "count=1", "skip=1024"},
		{"/usr/bin/ls", "/proc/" + pid + "/fd/"},
	} {
		x := g.call(t, key, secExec(argv...)).exec(t)
		if x.ExitCode == nil || *x.ExitCode == 0 {
			t.Errorf("%v by a program of the gateway's own user succeeded: %q", argv, tail(x.Stdout, 300))
		}
		if strings.Contains(x.Stdout, d.secret) || strings.Contains(x.Stdout, d.gwOnly) {
			t.Errorf("%v leaked the gateway's environment", argv)
		}
	}
}

// TestSecAutoRefusesWithoutSandbox: with `backend: auto` (the default) on a
// host where bubblewrap does not work, Exec and code.run are refused 503
// sandbox_unavailable with the reason and the two ways out, and receipts;
// nothing falls back to the process backend; other tools work; `serve
// --dev` says so in its banner. A named `backend: bwrap` that does not work
// stops serve unless `require: false`.
func TestSecAutoRefusesWithoutSandbox(t *testing.T) {
	t.Parallel()
	wrap := hideBwrap(t)
	d := newDeploymentWith(t, storeSQLite, "auto")
	// The defaults: backend auto, require unset (true).
	cfg, err := os.ReadFile(d.configPath)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, d.configPath, []byte(strings.Replace(string(cfg), "  require: true\n", "", 1)))
	setTools(t, d, agentFull, "Exec", "code.run", "fs.list")
	var banner syncBuffer
	g := startProcess(t, d, startOptions{wrap: wrap,
		args:         []string{"serve", "--dev", "--config", d.configPath, "--listen", "127.0.0.1:0"},
		onStdoutLine: func(l string) { banner.Write([]byte(l + "\n")) }})
	key := d.keys[agentFull]
	marker := filepath.Join(d.scratch, "must-not-exist")
	calls := []map[string]any{secExec("/usr/bin/touch", marker)}
	if os.Getenv("PORTCULLIS_DENO") != "" { // without Deno, code.run is backend_unavailable before any sandbox
		calls = append(calls, map[string]any{"tool": "code.run", "input": map[string]any{"code": "console.log(1)"}})
	} else {
		t.Log("PORTCULLIS_DENO not set: code.run's refusal not checked")
	}
	for _, body := range calls {
		res := g.call(t, key, body)
		if res.status != http.StatusServiceUnavailable || res.errCode() != "sandbox_unavailable" {
			t.Fatalf("%s: got %s, want 503 sandbox_unavailable", body["tool"], res.response)
		}
		msg := res.Output.Error.Message
		for _, want := range []string{"install bubblewrap", "sandbox.backend: process"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: message %q does not say %q", body["tool"], msg, want)
			}
		}
		if res.ReceiptID == "" {
			t.Errorf("%s: no receipt id", body["tool"])
		} else if rc, ok := g.getReceipt(t, res.ReceiptID); !ok || rc.Outcome == nil || rc.Outcome.ErrorCode == nil || *rc.Outcome.ErrorCode != "sandbox_unavailable" {
			t.Errorf("%s: receipt %+v, want outcome error sandbox_unavailable", body["tool"], rc)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("Exec ran although no sandbox works")
	}
	if res := g.call(t, key, map[string]any{"tool": "fs.list", "input": map[string]any{"path": d.scratch}}); res.status != http.StatusOK {
		t.Errorf("fs.list with no sandbox: %s, want 200", res.response)
	}
	if !strings.Contains(g.stderr.String(), `"exec_backend":"none"`) {
		t.Error(`the listening line does not say "exec_backend":"none"`)
	}
	b := banner.String()
	if !strings.Contains(b, "Exec and code.run: REFUSED (503 sandbox_unavailable)") || !strings.Contains(b, "install bubblewrap") {
		t.Errorf("--dev banner does not say what is refused and why:\n%s", b)
	}

	t.Run("named bwrap refuses to start", func(t *testing.T) {
		t.Parallel()
		d := newDeploymentWith(t, storeSQLite, "bwrap") // require: true
		_, err := tryStartProcess(t, d, startOptions{wrap: wrap})
		if err == nil || !strings.Contains(err.Error(), "sandbox.backend: bwrap does not work here") || !strings.Contains(err.Error(), "sandbox.require") {
			t.Fatalf("serve with a broken named bwrap: %v, want a refusal naming sandbox.require", err)
		}
	})
	t.Run("named bwrap without require starts and refuses", func(t *testing.T) {
		t.Parallel()
		d := newDeploymentWith(t, storeSQLite, "bwrap")
		cfg, err := os.ReadFile(d.configPath)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, d.configPath, []byte(strings.Replace(string(cfg), "  require: true\n", "  require: false\n", 1)))
		g := startProcess(t, d, startOptions{wrap: wrap})
		res := g.call(t, d.keys[agentFull], secExec("/usr/bin/true"))
		if res.status != http.StatusServiceUnavailable || res.errCode() != "sandbox_unavailable" {
			t.Fatalf("got %s, want 503 sandbox_unavailable", res.response)
		}
	})
}

// TestSecOversizedBodyPython: Python's urllib sends the whole body before
// it reads the answer. For a body past max_body_bytes (and past the socket
// buffers) it must get the 413 too_large and its receipt id, not a
// connection reset.
func TestSecOversizedBodyPython(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	d := newDeployment(t, storeSQLite) // max_body_bytes 8 MiB (default)
	g := d.start(t)
	const script = `
import json, sys, urllib.request, urllib.error
url, key, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = b'{"tool":"Exec","input":{"argv":["/usr/bin/true"],"pad":"' + b"a" * size + b'"}}'
req = urllib.request.Request(url, data=body, method="POST",
    headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=60) as r:
        print(json.dumps({"status": r.status, "body": json.loads(r.read())}))
except urllib.error.HTTPError as e:
    print(json.dumps({"status": e.code, "body": json.loads(e.read())}))
except Exception as e:
    print(json.dumps({"status": 0, "error": repr(e)}))
`
	for _, size := range []int{9 << 20, 30 << 20} {
		t.Run(strconv.Itoa(size>>20)+"MiB", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, py, "-c", script, g.baseURL+"/v1/tool-calls", d.keys[agentFull], strconv.Itoa(size)).CombinedOutput()
			if err != nil {
				t.Fatalf("python: %v\n%s", err, out)
			}
			var got struct {
				Status int    `json:"status"`
				Error  string `json:"error"`
				Body   struct {
					ReceiptID string `json:"receipt_id"`
					Output    struct {
						Error struct {
							Code string `json:"code"`
						} `json:"error"`
					} `json:"output"`
				} `json:"body"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("python output %q: %v", out, err)
			}
			if got.Status != http.StatusRequestEntityTooLarge || got.Body.Output.Error.Code != "too_large" || got.Body.ReceiptID == "" {
				t.Fatalf("urllib saw %s, want 413 too_large with a receipt id", out)
			}
			if rc, ok := g.getReceipt(t, got.Body.ReceiptID); !ok || rc.Decision != "invalid" {
				t.Errorf("receipt %s: %+v, want decision invalid", got.Body.ReceiptID, rc)
			}
		})
	}
}

// requestLines are the gateway's access-log lines for route.
func requestLines(t *testing.T, g *gateway, route string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(g.stderr.String()))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "request" && m["route"] == route {
			out = append(out, m)
		}
	}
	return out
}

// TestSecTrustedProxies: X-Forwarded-For is believed only from a peer in
// trusted_proxies, and then the client is its rightmost untrusted address;
// without trusted_proxies a forged header never reaches the log. Receipts
// carry no client address: the access log line carries the trace_id the
// receipt records, which joins the two.
func TestSecTrustedProxies(t *testing.T) {
	t.Parallel()
	const forged, client = "198.51.100.7", "203.0.113.5"
	xff := forged + ", " + client
	send := func(t *testing.T, g *gateway) string {
		t.Helper()
		body := strings.NewReader(`{"tool":"Exec","input":{"argv":["/usr/bin/true"]}}`)
		req, _ := http.NewRequest(http.MethodPost, g.baseURL+"/v1/tool-calls", body)
		req.Header.Set("Authorization", "Bearer "+g.dep.keys[agentFull])
		req.Header.Set("X-Forwarded-For", xff)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			ReceiptID string `json:"receipt_id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.ReceiptID == "" {
			t.Fatalf("call: HTTP %d %v", resp.StatusCode, err)
		}
		return out.ReceiptID
	}
	lineFor := func(t *testing.T, g *gateway) map[string]any {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if lines := requestLines(t, g, "/v1/tool-calls"); len(lines) > 0 {
				return lines[len(lines)-1]
			}
			if time.Now().After(deadline) {
				t.Fatal("no access log line for the call")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Run("untrusted peer", func(t *testing.T) {
		t.Parallel()
		d := newDeployment(t, storeSQLite)
		g := d.start(t)
		send(t, g)
		line := lineFor(t, g)
		if line["remote"] != "127.0.0.1" {
			t.Errorf("remote = %v, want the TCP peer", line["remote"])
		}
		if strings.Contains(g.stderr.String(), forged) || strings.Contains(g.stderr.String(), client) {
			t.Error("an address from X-Forwarded-For of an untrusted peer reached the log")
		}
	})
	t.Run("trusted proxy", func(t *testing.T) {
		t.Parallel()
		d := newDeployment(t, storeSQLite)
		appendConfig(t, d, "trusted_proxies: [\"127.0.0.1/32\"]\n")
		g := d.start(t)
		id := send(t, g)
		line := lineFor(t, g)
		if line["remote"] != client || line["peer"] != "127.0.0.1" {
			t.Errorf("remote %v peer %v, want %s (the rightmost untrusted hop) via 127.0.0.1", line["remote"], line["peer"], client)
		}
		if strings.Contains(g.stderr.String(), forged) {
			t.Error("the client-written (leftmost) hop reached the log")
		}
		rc, ok := g.getReceipt(t, id)
		if !ok {
			t.Fatal("no receipt")
		}
		var r struct {
			TraceID string `json:"trace_id"`
		}
		_ = json.Unmarshal([]byte(rc.raw), &r)
		if r.TraceID == "" || line["trace_id"] != r.TraceID {
			t.Errorf("log trace_id %v, receipt trace_id %q: they must match to join evidence and client address", line["trace_id"], r.TraceID)
		}
	})
	t.Run("config refuses everyone", func(t *testing.T) {
		t.Parallel()
		d := newDeployment(t, storeSQLite)
		appendConfig(t, d, "trusted_proxies: [\"0.0.0.0/0\"]\n")
		if _, err := tryStartProcess(t, d, startOptions{}); err == nil || !strings.Contains(err.Error(), "trusted_proxies[0]") {
			t.Fatalf("serve with trusted_proxies 0.0.0.0/0: %v, want a refusal naming trusted_proxies[0]", err)
		}
	})
}

// TestSecPrivateFiles: everything the gateway writes under data_dir and
// checkpoint_dir is owner-only while it runs (evidence.db, -wal, -shm, the
// lock files, archived bundles, checkpoints): files 0600, directories 0700.
// A data_dir left 0755 (as the harness makes it) and a bundles directory
// and store file left group-readable by an older install are tightened.
func TestSecPrivateFiles(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	withCheckpoints(t, d)
	cpDir := filepath.Join(d.dir, "checkpoints")
	appendConfig(t, d, fmt.Sprintf("  checkpoint_dir: %q\n", cpDir))
	if err := os.MkdirAll(filepath.Join(d.dataDir, "bundles"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.dataDir, "bundles", "old.tar.gz"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := d.start(t)
	for i := 0; i < 3; i++ {
		if res := g.call(t, d.keys[agentFull], secExec("/usr/bin/true")); res.status != http.StatusOK {
			t.Fatal(res.response)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(cpDir, "latest")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint within 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	seen := map[string]bool{}
	for _, root := range []string{d.dataDir, cpDir} {
		err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := e.Info()
			if err != nil {
				return err
			}
			want := fs.FileMode(0o600)
			if e.IsDir() {
				want = 0o700
			}
			if fi.Mode().Perm()&^want != 0 {
				t.Errorf("%s has mode %04o, want at most %04o", p, fi.Mode().Perm(), want)
			}
			seen[e.Name()] = true
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"evidence.db", "evidence.db-wal", "evidence.db-shm", "bundles", "latest"} {
		if !seen[name] {
			t.Errorf("%s not found: the test did not see what it checks", name)
		}
	}
}

// TestSecBundleServiceDownAtStart: a bundle URL that cannot be fetched at
// start no longer stops serve. Like OPA, it starts, /readyz says not ready,
// every call is refused 503 backend_unavailable (with a receipt), and it
// retries with backoff until the service answers; then the bundle
// activates, /readyz turns ready and calls are decided.
func TestSecBundleServiceDownAtStart(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	archive := filepath.Join(d.dir, "policy.tar.gz")
	gw(t, "bundle", "build", d.bundleDir, "-o", archive, "--revision", "svc-1")
	bundle, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	// A port with nothing behind it yet.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg, err := os.ReadFile(d.configPath)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr + "/policy.tar.gz"
	writeFile(t, d.configPath, []byte(strings.Replace(string(cfg), "  bundle: "+strconv.Quote(d.bundleDir)+"\n",
		"  bundle: "+strconv.Quote(url)+"\n  poll_interval: 1s\n", 1)))
	g := d.start(t)

	if r := g.do(t, http.MethodGet, "/readyz", "", nil); r.status != http.StatusServiceUnavailable {
		t.Errorf("/readyz with no policy: %s, want 503", r)
	}
	res := g.call(t, d.keys[agentFull], secExec("/usr/bin/true"))
	if res.status != http.StatusServiceUnavailable || res.errCode() != "backend_unavailable" || res.ReceiptID == "" {
		t.Fatalf("call with no policy: %s, want 503 backend_unavailable with a receipt", res.response)
	}
	if rc, ok := g.getReceipt(t, res.ReceiptID); !ok || rc.Decision != "deny" || rc.Outcome == nil || rc.Outcome.ErrorCode == nil || *rc.Outcome.ErrorCode != "backend_unavailable" {
		t.Errorf("receipt of the refused call: %+v, want deny / backend_unavailable", rc)
	}
	if r := g.do(t, http.MethodGet, "/v1/tools", d.keys[agentFull], nil); r.status != http.StatusServiceUnavailable {
		t.Errorf("GET /v1/tools with no policy: %s, want 503", r)
	}

	var fetches atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(bundle)
	}))
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the reserved port was taken meanwhile: %v", err)
	}
	srv.Listener = l2
	srv.Start()
	defer srv.Close()
	deadline := time.Now().Add(60 * time.Second)
	for g.do(t, http.MethodGet, "/readyz", "", nil).status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("not ready 60s after the bundle service came up (%d fetches)", fetches.Load())
		}
		time.Sleep(200 * time.Millisecond)
	}
	res = g.call(t, d.keys[agentFull], secExec("/usr/bin/true"))
	if res.status != http.StatusOK || res.Decision == nil || !strings.Contains(res.Decision.PolicyRevision, "svc-1") {
		t.Errorf("call after activation: %s, want 200 decided by svc-1", res.response)
	}
}

// TestSecDevBannerNamesPolicy: `serve --dev --config` says which policy it
// loaded: the config's bundle, not "shipped policy".
func TestSecDevBannerNamesPolicy(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	lines := make(chan string, 64)
	startProcess(t, d, startOptions{
		args:         []string{"serve", "--dev", "--config", d.configPath, "--listen", "127.0.0.1:0"},
		onStdoutLine: func(l string) { lines <- l },
	})
	var policy string
	timeout := time.After(10 * time.Second)
	for policy == "" {
		select {
		case l := <-lines:
			if strings.HasPrefix(l, "Policy: ") {
				policy = l
			}
			if strings.Contains(l, "shipped policy") {
				t.Errorf("banner claims the shipped policy: %q", l)
			}
		case <-timeout:
			t.Fatal("no Policy: line in the --dev banner")
		}
	}
	if !strings.Contains(policy, d.bundleDir) || !strings.Contains(policy, "revision") {
		t.Errorf("banner %q does not name the bundle %s and its revision", policy, d.bundleDir)
	}
}

// TestSecKeysSigningKey: `gateway keys signing-key -o FILE` writes a note
// signing key 0600 and prints its verifier key; it never overwrites without
// --force; serve signs checkpoints with it under that verifier key.
func TestSecKeysSigningKey(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	path := filepath.Join(d.dir, "keys", "evidence-signing.key")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, error) {
		cmd := exec.Command(gatewayBin, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	out, stderr, err := run("keys", "signing-key", "-o", path, "--name", "e2e.portcullis/keys")
	if err != nil {
		t.Fatalf("keys signing-key: %v\n%s", err, stderr)
	}
	vkey := strings.TrimSpace(out)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %04o, want 0600", fi.Mode().Perm())
	}
	skey, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(strings.TrimSpace(string(skey)))
	if err != nil {
		t.Fatalf("the file is not a note signing key: %v", err)
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatalf("stdout %q is not a verifier key: %v", out, err)
	}
	if signer.Name() != "e2e.portcullis/keys" || verifier.Name() != signer.Name() || verifier.KeyHash() != signer.KeyHash() {
		t.Errorf("signer %s/%08x and verifier %s/%08x do not pair", signer.Name(), signer.KeyHash(), verifier.Name(), verifier.KeyHash())
	}
	if _, stderr, err := run("keys", "signing-key", "-o", path); err == nil || !strings.Contains(stderr, "--force") {
		t.Errorf("second run without --force: %v %q, want a refusal", err, stderr)
	}
	if again, _ := os.ReadFile(path); string(again) != string(skey) {
		t.Error("the key was overwritten without --force")
	}
	out2, stderr, err := run("keys", "signing-key", "-o", path, "--force")
	if err != nil {
		t.Fatalf("--force: %v\n%s", err, stderr)
	}
	if strings.TrimSpace(out2) == vkey {
		t.Error("--force kept the old key")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("after --force: %v mode %v, want 0600", err, fi.Mode().Perm())
	}
	vkey = strings.TrimSpace(out2)
	appendConfig(t, d, fmt.Sprintf("evidence:\n  signing_key: %q\n", path))
	g := d.start(t)
	var logged string
	for _, l := range strings.Split(g.stderr.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "evidence checkpoints signed" {
			logged, _ = m["verifier_key"].(string)
		}
	}
	if logged != vkey {
		t.Errorf("serve signs under %q, want the printed verifier key %q", logged, vkey)
	}
	// A key readable by others is refused at start.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, ok := runCLI(t, d, "doctor", "--config", d.configPath); ok || !strings.Contains(out, "evidence.signing_key") {
		t.Errorf("doctor accepted a 0644 signing key:\n%s", out)
	}
}

// TestSecProcessBackendCodeRun: code.run still works on the named process
// backend under a root gateway, with Deno running as the unprivileged user:
// it reads its program, writes its cache and HOME, makes a nested tool call
// through the bridge, and writes in its rw grant; and it cannot read the
// gateway's config even though Deno's own permissions are its only
// filesystem confinement there.
func TestSecProcessBackendCodeRun(t *testing.T) {
	t.Parallel()
	needRoot(t)
	deno := denoForTests(t)
	d := newDeploymentWith(t, storeSQLite, "process")
	d.env = append(d.env, "PORTCULLIS_TOOLS_DENO="+deno)
	setTools(t, d, agentFull, "code.run", "Exec")
	g := d.start(t)
	out := filepath.Join(d.scratch, "from-deno.txt")
	r := g.call(t, d.keys[agentFull], map[string]any{"tool": "code.run", "input": map[string]any{"code": `
Deno.writeTextFileSync("` + out + `", "written by deno");
const id = await tools.call("Exec", {argv: ["/usr/bin/id", "-u"]});
export const result = {uid: id.data.stdout.trim()};`}})
	if !r.Output.Success || r.Output.Metadata["backend"] != "process" {
		t.Fatalf("code.run on the process backend: %s", r.response)
	}
	var cd codeData
	if err := json.Unmarshal(r.Output.Data, &cd); err != nil {
		t.Fatal(err)
	}
	if string(cd.Result) != `{"uid":"65534"}` {
		t.Errorf("result %s, want the nested Exec to run as 65534", cd.Result)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "written by deno" {
		t.Errorf("write in the grant: %q %v", b, err)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == 0 {
		t.Error("Deno's file is root's: Deno did not run as the sandbox user")
	}
}
