package tests

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// gatewayBin is the gateway binary built once by TestMain.
var gatewayBin string

// repoRoot is the module root (the parent of tests/).
var repoRoot string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests: getwd:", err)
		return 1
	}
	repoRoot = filepath.Dir(wd)
	// PORTCULLIS_TEST_GATEWAY_BIN runs the suite against a prebuilt binary
	// (a release artifact, or a build made before a tree broke).
	if bin := os.Getenv("PORTCULLIS_TEST_GATEWAY_BIN"); bin != "" {
		gatewayBin, err = filepath.Abs(bin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "tests:", err)
			return 1
		}
		if fi, err := os.Stat(gatewayBin); err != nil || fi.IsDir() {
			fmt.Fprintf(os.Stderr, "tests: PORTCULLIS_TEST_GATEWAY_BIN=%s is not a binary: %v\n", bin, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "tests: using prebuilt gateway %s\n", gatewayBin)
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "portcullis-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests: tempdir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	gatewayBin = filepath.Join(dir, "gateway")
	t0 := time.Now()
	// Built as deployed: the small exec helper beside the gateway binary.
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/gateway", "./cmd/portcullis-exec-helper")
	build.Dir = repoRoot
	build.Stdout = os.Stderr
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "tests: go build ./cmd/gateway failed: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "tests: built gateway in %s\n", time.Since(t0).Round(time.Millisecond))
	return m.Run()
}

// randHex returns n random bytes as hex.
func randHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// store names which evidence store a deployment uses.
type store string

const (
	storeSQLite   store = "sqlite"
	storePostgres store = "postgres"
)

var allStores = []store{storeSQLite, storePostgres}

// eachStoreKind runs f, in parallel, as a subtest on every store.
func eachStoreKind(t *testing.T, f func(t *testing.T, st store)) {
	t.Helper()
	for _, st := range allStores {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			f(t, st)
		})
	}
}

// eachStore runs f, in parallel, as a subtest on a new deployment of every
// store.
func eachStore(t *testing.T, f func(t *testing.T, d *deployment)) {
	t.Helper()
	eachStoreKind(t, func(t *testing.T, st store) { f(t, newDeployment(t, st)) })
}

// Principal ids of the test policy (testdata/policy/e2e.rego).
const (
	agentFull   = "agent-full"
	agentNoExec = "agent-noexec"
	agentNarrow = "agent-narrow"
	auditor     = "auditor-1"
	admin       = "admin-1"
	approver1   = "approver-1"
	approver2   = "approver-2"
	// agentApprover holds both roles: it may approve others' calls,
	// never its own.
	agentApprover = "agent-approver"
)

// deployment is one gateway configuration on disk: config file, policy
// bundle, data directory or database, API keys. It can be started, killed and
// restarted (same data, same instance id).
type deployment struct {
	store      store
	backend    string            // sandbox.backend: process | bwrap
	dir        string            // temp root holding everything below
	configPath string            // the YAML config
	bundleDir  string            // policy bundle: e2e.rego + data.json
	dataDir    string            // data_dir (embedded store lives here)
	dbURL      string            // database_url ("" for SQLite)
	scratch    string            // a temp dir agent-full may read and write
	narrow     string            // the only dir agent-narrow may read
	instanceID string            // instance_id in config
	keys       map[string]string // principal id -> API key (clear)
	secret     string            // ANTHROPIC_API_KEY value in the gateway env
	gwOnly     string            // E2E_GATEWAY_ONLY value in the gateway env
	env        []string          // the gateway's environment
}

// newDeployment writes a fresh configuration for st on the process backend.
// For PostgreSQL it creates a database for this deployment and drops it when
// the test ends.
func newDeployment(t *testing.T, st store) *deployment {
	t.Helper()
	return newDeploymentWith(t, st, "process")
}

// newDeploymentWith is newDeployment with a chosen sandbox backend.
func newDeploymentWith(t *testing.T, st store, backend string) *deployment {
	t.Helper()
	root := t.TempDir()
	root, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{
		store:      st,
		backend:    backend,
		dir:        root,
		configPath: filepath.Join(root, "portcullis.yaml"),
		bundleDir:  filepath.Join(root, "bundle"),
		dataDir:    filepath.Join(root, "data"),
		scratch:    filepath.Join(root, "scratch"),
		narrow:     filepath.Join(root, "narrow"),
		instanceID: "e2e-" + randHex(t, 4),
		keys:       map[string]string{},
		secret:     "sk-ant-test-" + randHex(t, 16),
		gwOnly:     "gateway-only-" + randHex(t, 8),
	}
	for _, dir := range []string{d.bundleDir, d.dataDir, d.scratch, d.narrow} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// On the process backend under a root gateway, programs run as an
	// unprivileged user (sandbox.run_as, 65534): the deployment's root
	// must be traversable and the scratch grant writable by it, as an
	// operator would set up the directories an agent works in. The
	// config is written 0600 and the gateway makes data_dir 0700.
	// (t.TempDir's parent, the test's own temp dir, is 0700 too.)
	for _, dir := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(d.scratch, 0o777); err != nil {
		t.Fatal(err)
	}
	if st == storePostgres {
		d.dbURL = newPostgresDB(t)
	}

	// Policy bundle: our own Rego plus per-deployment data.
	rego, err := os.ReadFile(filepath.Join("testdata", "policy", "e2e.rego"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.bundleDir, "e2e.rego"), rego)
	data := map[string]any{"e2e": map[string]any{"principals": map[string]any{
		agentFull: map[string]any{
			"tools": []string{"Exec"},
			"fs_grants": []map[string]string{
				{"path": "/usr", "mode": "r"},
				{"path": d.scratch, "mode": "rw"},
			},
			"env": map[string]any{
				"pass": []string{"ANTHROPIC_API_KEY", "GOFLAGS"},
				"set":  map[string]string{"CI": "1"},
			},
		},
		agentNoExec: map[string]any{"tools": []string{}},
		agentNarrow: map[string]any{
			"tools":     []string{"Exec"},
			"fs_grants": []map[string]string{{"path": d.narrow, "mode": "r"}},
		},
	}}}
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), data)

	// Principals with random keys, stored hashed.
	type principal struct {
		id    string
		roles []string
	}
	principals := []principal{
		{agentFull, []string{"agent"}},
		{agentNoExec, []string{"agent"}},
		{agentNarrow, []string{"agent"}},
		{auditor, []string{"auditor"}},
		{admin, []string{"admin"}},
		{approver1, []string{"approver"}},
		{approver2, []string{"approver"}},
		{agentApprover, []string{"agent", "approver"}},
	}
	var cfg strings.Builder
	q := strconv.Quote
	fmt.Fprintf(&cfg, "# generated by the end-to-end suite\n")
	fmt.Fprintf(&cfg, "listen: %s\n", q("127.0.0.1:0"))
	fmt.Fprintf(&cfg, "database_url: %s\n", q(d.dbURL))
	fmt.Fprintf(&cfg, "data_dir: %s\n", q(d.dataDir))
	fmt.Fprintf(&cfg, "instance_id: %s\n", q(d.instanceID))
	fmt.Fprintf(&cfg, "policy:\n  bundle: %s\n", q(d.bundleDir))
	// Other suites (sandbox_test.go) patch this exact text to switch backends.
	// Named explicitly: auto never means the process backend (it refuses
	// Exec and code.run when no OS sandbox works).
	fmt.Fprintf(&cfg, "sandbox:\n  backend: %s\n", backend)
	if backend != "process" {
		fmt.Fprintf(&cfg, "  require: true\n")
	}
	fmt.Fprintf(&cfg, "principals:\n")
	for _, p := range principals {
		key := "pk_" + randHex(t, 24)
		d.keys[p.id] = key
		fmt.Fprintf(&cfg, "  - id: %s\n    roles: [%s]\n    attributes: {team: e2e}\n    api_key_sha256: %s\n",
			q(p.id), strings.Join(p.roles, ", "), q(sha256Hex(key)))
	}
	if err := os.WriteFile(d.configPath, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	d.env = gatewayEnv(
		"ANTHROPIC_API_KEY="+d.secret,
		"GOFLAGS=-mod=mod",
		"E2E_GATEWAY_ONLY="+d.gwOnly,
	)
	return d
}

// gatewayEnv is the test process' environment without anything that could
// configure the gateway behind the suite's back (PORTCULLIS_* but the Deno
// path) or collide with what the tests plant, plus extra.
func gatewayEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "PORTCULLIS_DENO":
		case strings.HasPrefix(name, "PORTCULLIS_"):
			continue
		case name == "ANTHROPIC_API_KEY", name == "GOFLAGS", name == "CI", name == "E2E_GATEWAY_ONLY":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeExecutable writes a program this test process will have run on the
// host soon after (by git, say). It is written by a child process: a write
// descriptor held here could be inherited by a child another parallel test
// is forking at that moment, and the exec would then fail ETXTBSY.
func writeExecutable(t testing.TB, path string, b []byte) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `cat > "$1" && chmod 755 "$1"`, "sh", path)
	cmd.Stdin = bytes.NewReader(b)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writing %s: %v: %s", path, err, out)
	}
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, b)
}

// adminDatabaseURL is the PostgreSQL the suite creates its databases in.
func adminDatabaseURL() string {
	if u := os.Getenv("PORTCULLIS_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// newPostgresDB creates a database for one deployment and drops it (FORCE)
// when t ends. Unreachable PostgreSQL skips the test, or fails it when
// PORTCULLIS_REQUIRE_POSTGRES=1.
func newPostgresDB(t *testing.T) string {
	t.Helper()
	admin := adminDatabaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		if os.Getenv("PORTCULLIS_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("PostgreSQL required (PORTCULLIS_REQUIRE_POSTGRES=1) but unreachable at %s: %v", admin, err)
		}
		t.Skipf("PostgreSQL unreachable at %s (set PORTCULLIS_TEST_DATABASE_URL): %v", admin, err)
	}
	defer conn.Close(context.Background())
	name := "portcullis_e2e_" + randHex(t, 6)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop database %s: connect: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse %s: %v", admin, err)
	}
	u.Path = "/" + name
	return u.String()
}

// syncBuffer is a goroutine-safe bytes.Buffer for a child's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// gateway is one running gateway process.
type gateway struct {
	dep     *deployment
	cmd     *exec.Cmd
	baseURL string
	stdout  *syncBuffer
	stderr  *syncBuffer
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid after done
}

// startOptions tune a gateway start.
type startOptions struct {
	args []string // replaces "serve --config <file> --listen 127.0.0.1:0"
	dir  string   // working directory
	env  []string // replaces the deployment's environment
	// onStdoutLine sees each stdout line (for --dev key parsing).
	onStdoutLine func(string)
	// wrap, when set, runs the gateway through it: wrap[0] with
	// wrap[1:], the gateway binary and args as its arguments (e.g. a
	// private mount namespace that hides bubblewrap).
	wrap []string
}

var listenRe = regexp.MustCompile(`^127\.0\.0\.1:\d+$`)

// start runs the deployment's gateway and waits until it logs "listening".
// The process is stopped when t ends (SIGTERM, then SIGKILL) and its stderr is
// printed if t failed.
func (d *deployment) start(t *testing.T) *gateway {
	t.Helper()
	return startProcess(t, d, startOptions{})
}

func startProcess(t *testing.T, d *deployment, o startOptions) *gateway {
	t.Helper()
	g, err := tryStartProcess(t, d, o)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// tryStartProcess starts the gateway and returns an error, with its stderr,
// when it exits or stays silent instead of listening.
func tryStartProcess(t *testing.T, d *deployment, o startOptions) (*gateway, error) {
	t.Helper()
	args := o.args
	if args == nil {
		args = []string{"serve", "--config", d.configPath, "--listen", "127.0.0.1:0"}
	}
	g := &gateway{dep: d, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	g.cmd = exec.Command(gatewayBin, args...)
	if len(o.wrap) > 0 {
		g.cmd = exec.Command(o.wrap[0], append(append(o.wrap[1:len(o.wrap):len(o.wrap)], gatewayBin), args...)...)
	}
	g.cmd.Dir = o.dir
	if g.cmd.Dir == "" && d != nil {
		g.cmd.Dir = d.dir
	}
	g.cmd.Env = o.env
	if g.cmd.Env == nil && d != nil {
		g.cmd.Env = d.env
	}
	// The gateway must not outlive the test binary.
	g.cmd.SysProcAttr = dieWithParent()
	errPipe, err := g.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := g.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	addrCh := make(chan string, 1)
	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() {
		defer pipes.Done()
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
		for sc.Scan() {
			line := sc.Text()
			g.stderr.Write([]byte(line + "\n"))
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" && listenRe.MatchString(rec.Addr) {
				select {
				case addrCh <- rec.Addr:
				default:
				}
			}
		}
		io.Copy(g.stderr, errPipe)
	}()
	go func() {
		defer pipes.Done()
		sc := bufio.NewScanner(outPipe)
		for sc.Scan() {
			g.stdout.Write([]byte(sc.Text() + "\n"))
			if o.onStdoutLine != nil {
				o.onStdoutLine(sc.Text())
			}
		}
		io.Copy(g.stdout, outPipe)
	}()
	go func() {
		pipes.Wait()
		g.waitErr = g.cmd.Wait()
		close(g.done)
	}()
	t.Cleanup(func() {
		g.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("gateway %v stderr:\n%s", args, tail(g.stderr.String(), 12000))
		}
	})
	select {
	case addr := <-addrCh:
		g.baseURL = "http://" + addr
	case <-g.done:
		return nil, fmt.Errorf("gateway exited before listening (%v); stderr:\n%s", g.waitErr, tail(g.stderr.String(), 12000))
	case <-time.After(60 * time.Second):
		return nil, fmt.Errorf("gateway did not log {\"msg\":\"listening\"} within 60s; stderr:\n%s", tail(g.stderr.String(), 12000))
	}
	return g, nil
}

// stop sends SIGTERM and waits up to grace before SIGKILL. It returns the
// process' wait error (nil for exit 0).
func (g *gateway) stop(grace time.Duration) error {
	select {
	case <-g.done:
		return g.waitErr
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(grace):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
	return g.waitErr
}

// kill SIGKILLs the gateway (and only it) and waits for it to be reaped.
func (g *gateway) kill() {
	_ = g.cmd.Process.Kill()
	<-g.done
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// response is one HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

var httpClient = &http.Client{Timeout: 90 * time.Second}

// do sends a request. body may be nil, []byte/string (sent raw) or any value
// (JSON-encoded). key "" sends no Authorization header.
func (g *gateway) do(t testing.TB, method, path, key string, body any) response {
	t.Helper()
	auth := ""
	if key != "" {
		auth = "Bearer " + key
	}
	r, err := g.tryDo(context.Background(), method, path, auth, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// tryDo sends a request with the Authorization header value auth ("" = none).
func (g *gateway) tryDo(ctx context.Context, method, path, auth string, body any) (response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.baseURL+path, rd)
	if err != nil {
		return response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func (r response) String() string {
	return fmt.Sprintf("HTTP %d %s", r.status, tail(string(r.body), 4000))
}

// toolCallResult is a decoded POST /v1/tool-calls answer with the raw form
// kept for shape checks.
type toolCallResult struct {
	response
	ReceiptID string `json:"receipt_id"`
	CallID    string `json:"call_id"`
	Decision  *struct {
		Allow          bool     `json:"allow"`
		Reasons        []string `json:"reasons"`
		PolicyRevision string   `json:"policy_revision"`
	} `json:"decision"`
	Output struct {
		Success bool            `json:"success"`
		Data    json.RawMessage `json:"data"`
		Error   *struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
		Metadata map[string]any `json:"metadata"`
	} `json:"output"`
}

// errCode is output.error.code or "".
func (r *toolCallResult) errCode() string {
	if r.Output.Error == nil {
		return ""
	}
	return r.Output.Error.Code
}

// execData is Exec's output.data.
type execData struct {
	ExitCode        *int    `json:"exit_code"`
	Stdout          string  `json:"stdout"`
	Stderr          string  `json:"stderr"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
	TimedOut        bool    `json:"timed_out"`
	Signal          *string `json:"signal"`
	DurationMS      *int64  `json:"duration_ms"`
}

// call posts a tool call and checks the contract's response shape: the
// ToolCallResponse object with decision and output {success,data,error,metadata}.
func (g *gateway) call(t testing.TB, key string, body any) *toolCallResult {
	t.Helper()
	r := g.do(t, http.MethodPost, "/v1/tool-calls", key, body)
	return decodeToolCall(t, r)
}

func decodeToolCall(t testing.TB, r response) *toolCallResult {
	t.Helper()
	var shape map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &shape); err != nil {
		t.Fatalf("tool-call answer is not a JSON object: %v\n%s", err, r)
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(shape["output"], &out); err != nil {
		t.Fatalf("tool-call answer has no output object (ToolCallResponse shape): %v\n%s", err, r)
	}
	for _, k := range []string{"success", "data", "error", "metadata"} {
		if _, ok := out[k]; !ok {
			t.Errorf("tool-call answer output lacks %q (ToolOutput shape)\n%s", k, r)
		}
	}
	if _, ok := shape["decision"]; !ok {
		t.Errorf("tool-call answer lacks \"decision\"\n%s", r)
	}
	res := &toolCallResult{response: r}
	if err := json.Unmarshal(r.body, res); err != nil {
		t.Fatalf("decode tool-call answer: %v\n%s", err, r)
	}
	if r.status != http.StatusOK {
		if res.Output.Success || res.Output.Error == nil {
			t.Errorf("HTTP %d answer must have success false and an error\n%s", r.status, r)
		} else if res.Output.Error.Message == "" {
			t.Errorf("error without a message\n%s", r)
		}
	}
	return res
}

// execData decodes output.data of a successful Exec call.
func (r *toolCallResult) exec(t testing.TB) execData {
	t.Helper()
	var d execData
	if err := json.Unmarshal(r.Output.Data, &d); err != nil || string(r.Output.Data) == "null" {
		t.Fatalf("Exec data: %v\n%s", err, r.response)
	}
	return d
}

// apiError decodes a non-tool-call error body {"error":{code,message,details}}.
func apiError(t testing.TB, r response) (code string, details map[string]any) {
	t.Helper()
	var b struct {
		Error *struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil || b.Error == nil {
		t.Fatalf("not an error body {\"error\":{...}}: %v\n%s", err, r)
	}
	return b.Error.Code, b.Error.Details
}

// receipt is a receipt as the API returns it, plus its raw JSON.
type receipt struct {
	raw            string
	ID             string          `json:"id"`
	Time           string          `json:"time"`
	PrincipalID    string          `json:"principal_id"`
	SessionID      string          `json:"session_id"`
	CallID         string          `json:"call_id"`
	Tool           string          `json:"tool"`
	Decision       string          `json:"decision"`
	Reasons        []string        `json:"reasons"`
	PolicyRevision string          `json:"policy_revision"`
	ArgsSHA256     string          `json:"args_sha256"`
	Args           json.RawMessage `json:"args"`
	Outcome        *struct {
		Status    string    `json:"status"`
		ErrorCode *string   `json:"error_code"`
		ExitCode  *int      `json:"exit_code"`
		Backend   string    `json:"backend"`
		Network   *netStats `json:"network"`
	} `json:"outcome"`
}

// netStats is a receipt's outcome.network: what the call's egress proxy
// allowed and refused.
type netStats struct {
	Allowed []string          `json:"allowed"`
	Refused []string          `json:"refused"`
	Denials map[string]string `json:"denials"`
}

// errorCode is the outcome's error code, "" for none.
func (r *receipt) errorCode() string {
	if r.Outcome == nil || r.Outcome.ErrorCode == nil {
		return ""
	}
	return *r.Outcome.ErrorCode
}

func (r *receipt) status() string {
	if r.Outcome == nil {
		return ""
	}
	return r.Outcome.Status
}

// getReceipt reads a receipt as the auditor; ok is false on 404.
func (g *gateway) getReceipt(t testing.TB, id string) (rc receipt, ok bool) {
	t.Helper()
	r := g.do(t, http.MethodGet, "/v1/receipts/"+url.PathEscape(id), g.dep.keys[auditor], nil)
	if r.status == http.StatusNotFound {
		return rc, false
	}
	if r.status != http.StatusOK {
		t.Fatalf("GET receipt %s as auditor: %s", id, r)
	}
	if err := json.Unmarshal(r.body, &rc); err != nil {
		t.Fatalf("decode receipt: %v\n%s", err, r)
	}
	rc.raw = string(r.body)
	return rc, true
}

// listReceipts lists receipts as the auditor with query q.
func (g *gateway) listReceipts(t testing.TB, q url.Values) []receipt {
	t.Helper()
	r := g.do(t, http.MethodGet, "/v1/receipts?"+q.Encode(), g.dep.keys[auditor], nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/receipts?%s as auditor: %s", q.Encode(), r)
	}
	var list struct {
		Receipts []json.RawMessage `json:"receipts"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatalf("decode receipt list: %v\n%s", err, r)
	}
	out := make([]receipt, 0, len(list.Receipts))
	for _, raw := range list.Receipts {
		var rc receipt
		if err := json.Unmarshal(raw, &rc); err != nil {
			t.Fatalf("decode receipt: %v\n%s", err, raw)
		}
		rc.raw = string(raw)
		out = append(out, rc)
	}
	return out
}

// waitReceipt polls a receipt until cond holds or the deadline passes.
func (g *gateway) waitReceipt(t testing.TB, id string, within time.Duration, cond func(receipt) bool) receipt {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		rc, ok := g.getReceipt(t, id)
		if ok && cond(rc) {
			return rc
		}
		if time.Now().After(deadline) {
			t.Fatalf("receipt %s: condition not met within %s; last (found=%v): %s", id, within, ok, rc.raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// expectReceipt is what a call's receipt must say.
type expectReceipt struct {
	tool      string // default Exec
	principal string
	decision  string   // allow | deny | invalid
	statuses  []string // acceptable outcome.status values
	errorCode string   // when set, outcome.error_code must be nil or equal
	secrets   []string // values that must appear nowhere in the receipt
}

// checkReceipt verifies the receipt of call res: readable by the auditor, not
// by an agent, with the expected decision, outcome, revision and hashes, and
// no secret in it. It waits briefly for the outcome to be appended.
func (g *gateway) checkReceipt(t testing.TB, res *toolCallResult, want expectReceipt, callID, sessionID string) receipt {
	t.Helper()
	if res.ReceiptID == "" {
		t.Fatalf("no receipt_id in the answer (every authenticated call gets a receipt)\n%s", res.response)
	}
	rc := g.waitReceipt(t, res.ReceiptID, 5*time.Second, func(rc receipt) bool {
		for _, s := range want.statuses {
			if rc.status() == s {
				return true
			}
		}
		return false
	})
	if rc.ID != res.ReceiptID {
		t.Errorf("receipt id = %q, want %q", rc.ID, res.ReceiptID)
	}
	if rc.Decision != want.decision {
		t.Errorf("receipt decision = %q, want %q\n%s", rc.Decision, want.decision, rc.raw)
	}
	if rc.PrincipalID != want.principal {
		t.Errorf("receipt principal_id = %q, want %q", rc.PrincipalID, want.principal)
	}
	if wantTool := cmp.Or(want.tool, "Exec"); rc.Tool != wantTool {
		t.Errorf("receipt tool = %q, want %s", rc.Tool, wantTool)
	}
	if callID != "" && rc.CallID != callID {
		t.Errorf("receipt call_id = %q, want %q", rc.CallID, callID)
	}
	if sessionID != "" && rc.SessionID != sessionID {
		t.Errorf("receipt session_id = %q, want %q", rc.SessionID, sessionID)
	}
	if rc.PolicyRevision == "" {
		t.Errorf("receipt policy_revision empty\n%s", rc.raw)
	} else if res.Decision != nil && res.Decision.PolicyRevision != "" && res.Decision.PolicyRevision != rc.PolicyRevision {
		t.Errorf("receipt policy_revision %q != answer's %q", rc.PolicyRevision, res.Decision.PolicyRevision)
	}
	if !hex64.MatchString(rc.ArgsSHA256) {
		t.Errorf("receipt args_sha256 = %q, want 64 lowercase hex", rc.ArgsSHA256)
	}
	if want.errorCode != "" && rc.Outcome != nil && rc.Outcome.ErrorCode != nil && *rc.Outcome.ErrorCode != want.errorCode {
		t.Errorf("receipt outcome.error_code = %q, want %q", *rc.Outcome.ErrorCode, want.errorCode)
	}
	for _, s := range want.secrets {
		if s != "" && strings.Contains(rc.raw, s) {
			t.Errorf("secret value %q appears in the receipt:\n%s", s, rc.raw)
		}
	}
	// An agent may not read evidence.
	r := g.do(t, http.MethodGet, "/v1/receipts/"+url.PathEscape(res.ReceiptID), g.dep.keys[want.principal], nil)
	if r.status != http.StatusForbidden {
		t.Errorf("agent GET receipt: got %s, want 403 forbidden", r)
	} else if code, _ := apiError(t, r); code != "forbidden" {
		t.Errorf("agent GET receipt: code %q, want forbidden", code)
	}
	return rc
}

// procsWithMarker returns the pids whose command line contains marker.
func procsWithMarker(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitNoProcs waits up to within for every process carrying marker to be
// gone, and returns the survivors (after killing them, so a failed test does
// not leak them either).
func waitNoProcs(marker string, within time.Duration) []int {
	deadline := time.Now().Add(within)
	for {
		pids := procsWithMarker(marker)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			return pids
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sleepMarker returns a sleep duration argument unique to this test run, so
// the processes it names can be found in /proc (GNU sleep takes fractions).
func sleepMarker(t testing.TB, whole int) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	n := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) % 1000000
	return fmt.Sprintf("%d.%06d%d", whole, n, 7)
}
