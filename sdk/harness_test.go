package sdk_test

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run the SDK against the real gateway binary, configured like
// the end-to-end suite (tests/): its data-driven policy, random keys stored
// hashed, the embedded store, the process backend.

var gatewayBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	if bin := os.Getenv("PORTCULLIS_TEST_GATEWAY_BIN"); bin != "" {
		gatewayBin = bin
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "portcullis-sdk-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/gateway", "./cmd/portcullis-exec-helper")
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "sdk tests: building the gateway failed:", err)
		return 1
	}
	gatewayBin = filepath.Join(dir, "gateway")
	return m.Run()
}

// gw is one running gateway and the clear-text keys of its principals:
// "agent" (Exec and the fs tools, /usr read-only, scratch read-write),
// "agent-noexec" (no tools) and "auditor".
type gw struct {
	url     string
	keys    map[string]string
	scratch string
}

func randHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func startGateway(t *testing.T) *gw {
	t.Helper()
	return startGatewayWith(t, gwOptions{})
}

// gwOptions adds to the standard deployment: more tools for "agent"
// (upstream tools, "web.echo") and config lines (upstreams:).
type gwOptions struct {
	agentTools  []string
	extraConfig string
}

func startGatewayWith(t *testing.T, o gwOptions) *gw {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	g := &gw{keys: map[string]string{}, scratch: filepath.Join(root, "scratch")}
	bundle := filepath.Join(root, "bundle")
	for _, d := range []string{bundle, g.scratch, filepath.Join(root, "data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rego, err := os.ReadFile(filepath.Join("..", "tests", "testdata", "policy", "e2e.rego"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("bundle/e2e.rego", rego)
	data, _ := json.Marshal(map[string]any{"e2e": map[string]any{"principals": map[string]any{
		"agent": map[string]any{
			"tools":     append([]string{"Exec", "fs.read", "fs.write", "fs.list", "fs.search"}, o.agentTools...),
			"fs_grants": []map[string]string{{"path": "/usr", "mode": "r"}, {"path": g.scratch, "mode": "rw"}},
		},
		"agent-noexec": map[string]any{"tools": []string{}},
		// Its calls wait for a person (approvals_test.go).
		"agent-parked": map[string]any{
			"tools":     []string{"Exec"},
			"fs_grants": []map[string]string{{"path": "/usr", "mode": "r"}},
			"approval":  map[string]any{"required": true, "reason": "sdk test", "ttl_s": 300},
		},
	}}})
	write("bundle/data.json", data)
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "listen: \"127.0.0.1:0\"\ndata_dir: %q\npolicy:\n  bundle: %q\nsandbox:\n  backend: process\nprincipals:\n",
		filepath.Join(root, "data"), bundle)
	for id, role := range map[string]string{"agent": "agent", "agent-noexec": "agent", "auditor": "auditor", "agent-parked": "agent", "approver": "approver"} {
		key := "pk_" + randHex(t, 24)
		g.keys[id] = key
		sum := sha256.Sum256([]byte(key))
		fmt.Fprintf(&cfg, "  - id: %q\n    roles: [%s]\n    api_key_sha256: %q\n", id, role, hex.EncodeToString(sum[:]))
	}
	cfg.WriteString(o.extraConfig)
	write("portcullis.yaml", []byte(cfg.String()))

	cmd := exec.Command(gatewayBin, "serve", "--config", filepath.Join(root, "portcullis.yaml"))
	cmd.Dir = root
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PORTCULLIS_") || strings.HasPrefix(kv, "PORTCULLIS_DENO=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.SysProcAttr = dieWithParent()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" {
				addr <- rec.Addr
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	select {
	case a := <-addr:
		g.url = "http://" + a
	case <-time.After(60 * time.Second):
		t.Fatalf("gateway did not start listening within 60 s")
	}
	return g
}
