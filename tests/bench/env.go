package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// benchEnv is what every scenario shares: the binaries, a work directory,
// the policy bundles, the file fs.read reads, the API key, and the scratch
// databases to drop at the end.
type benchEnv struct {
	repo       string
	work       string // temp root; removed at the end unless -keep
	gatewayBin string
	opaBin     string
	adminURL   string // PostgreSQL admin URL; scratch databases are created there
	cfg        *config

	shippedBundle string // policies/bundle plus an fs.read grant on fsDir
	trivialBundle string // one constant allow rule
	fsDir         string // real path of the directory holding f.txt
	fsFile        string // the 4 KB file
	projectDir    string // the P3 project tree (project.go), once made
	execBundleDir string // shippedBundle plus the project grant on Exec, once made

	key       string // the bench principal's API key
	databases []string
}

const (
	benchPrincipal = "bench-agent"
	fsFileSize     = 4096
)

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

// setupEnv writes the bundles and the fs.read file under work.
func setupEnv(repo, work string, cfg *config) (*benchEnv, error) {
	e := &benchEnv{repo: repo, work: work, adminURL: cfg.dbURL, cfg: cfg, key: "pk_bench_" + randHex(24)}
	dir := filepath.Join(work, "files")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	e.fsDir = real
	e.fsFile = filepath.Join(real, "f.txt")
	content := strings.Repeat("0123456789abcdef0123456789abcde\n", fsFileSize/32)
	if err := os.WriteFile(e.fsFile, []byte(content), 0o644); err != nil {
		return nil, err
	}

	// The shipped library, unchanged but for one grant: agents may fs.read
	// the bench directory. The same bundle is what OPA serves.
	e.shippedBundle = filepath.Join(work, "bundle-shipped")
	if err := copyDir(filepath.Join(repo, "policies", "bundle"), e.shippedBundle); err != nil {
		return nil, fmt.Errorf("copy shipped bundle: %w", err)
	}
	dataPath := filepath.Join(e.shippedBundle, "data.json")
	var data map[string]any
	b, err := os.ReadFile(dataPath)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &data); err != nil {
		return nil, fmt.Errorf("%s: %w", dataPath, err)
	}
	tools, ok := dig(data, "portcullis", "config", "roles", "agent", "tools")
	if !ok {
		return nil, fmt.Errorf("%s: no portcullis.config.roles.agent.tools", dataPath)
	}
	tools["fs.read"] = map[string]any{"fs": []any{map[string]any{"path": e.fsDir, "mode": "r", "alias": "@b"}}}
	if cfg.quota {
		// Never reached: every call draws, none is refused.
		conf, _ := dig(data, "portcullis", "config")
		conf["quotas"] = []any{map[string]any{"tool": "fs.read", "limit": int64(1) << 50, "window_s": 3600}}
	}
	if b, err = json.MarshalIndent(data, "", "  "); err != nil {
		return nil, err
	}
	if err := os.WriteFile(dataPath, b, 0o644); err != nil {
		return nil, err
	}

	// A trivial policy: one constant decision, with the grant enforcement
	// needs so an Exec of /usr/bin/true is allowed end to end.
	e.trivialBundle = filepath.Join(work, "bundle-trivial")
	if err := os.MkdirAll(filepath.Join(e.trivialBundle, "portcullis"), 0o755); err != nil {
		return nil, err
	}
	const trivial = `package portcullis

decision := {"allow": true, "reasons": [], "fs_grants": [{"path": "/usr", "mode": "r"}]}
`
	if err := os.WriteFile(filepath.Join(e.trivialBundle, "portcullis", "trivial.rego"), []byte(trivial), 0o644); err != nil {
		return nil, err
	}
	return e, nil
}

// dig walks nested JSON objects and returns the object at the path.
func dig(m map[string]any, keys ...string) (map[string]any, bool) {
	for _, k := range keys {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil, false
		}
		m = next
	}
	return m, true
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// authHeader is the gateway's request header.
func (e *benchEnv) authHeader() http.Header {
	return http.Header{"Authorization": {"Bearer " + e.key}, "Content-Type": {"application/json"}}
}

// createDB makes a scratch database and returns its URL and name; cleanup
// drops it.
func (e *benchEnv) createDB(ctx context.Context) (string, string, error) {
	conn, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return "", "", fmt.Errorf("PostgreSQL at %s: %w", e.adminURL, err)
	}
	defer conn.Close(context.Background())
	name := "portcullis_loadbench_" + randHex(6)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", "", fmt.Errorf("create database %s: %w", name, err)
	}
	e.databases = append(e.databases, name)
	u, err := url.Parse(e.adminURL)
	if err != nil {
		return "", "", err
	}
	u.Path = "/" + name
	return u.String(), name, nil
}

// cleanup drops the scratch databases.
func (e *benchEnv) cleanup() {
	if len(e.databases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		logf("drop scratch databases %v: %v", e.databases, err)
		return
	}
	defer conn.Close(context.Background())
	for _, name := range e.databases {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			logf("drop database %s: %v", name, err)
		}
	}
	e.databases = nil
}

// gatewayOptions is one gateway deployment.
type gatewayOptions struct {
	name     string
	postgres bool   // evidence in a scratch PostgreSQL database, else the embedded SQLite store
	backend  string // sandbox.backend
	bundle   string
	extra    string // appended to the config (e.g. upstreams:)
}

// startGateway writes a config for o and starts the gateway on a free
// loopback port, ready when /readyz answers 200.
func (e *benchEnv) startGateway(ctx context.Context, o gatewayOptions) (*server, error) {
	dir := filepath.Join(e.work, "gw-"+o.name)
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	dbURL, dbName := "", ""
	if o.postgres {
		var err error
		if dbURL, dbName, err = e.createDB(ctx); err != nil {
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(e.key))
	q := strconv.Quote
	var c strings.Builder
	fmt.Fprintf(&c, "# generated by tests/bench\n")
	fmt.Fprintf(&c, "listen: %s\n", q(fmt.Sprintf("127.0.0.1:%d", port)))
	fmt.Fprintf(&c, "database_url: %s\n", q(dbURL))
	fmt.Fprintf(&c, "data_dir: %s\n", q(data))
	fmt.Fprintf(&c, "instance_id: %s\n", q("bench-"+o.name))
	fmt.Fprintf(&c, "log_level: %s\n", q(e.cfg.gatewayLogLevel))
	// The copy of the shipped bundle carries the shipped tests, written for
	// the shipped data.json; the bench grant would fail one of them.
	fmt.Fprintf(&c, "policy:\n  bundle: %s\n  run_tests: false\n", q(o.bundle))
	fmt.Fprintf(&c, "sandbox:\n  backend: %s\n", o.backend)
	if e.cfg.gatewayDebug != "" {
		fmt.Fprintf(&c, "debug:\n  listen: %s\n", q(e.cfg.gatewayDebug))
	}
	fmt.Fprintf(&c, "principals:\n  - id: %s\n    roles: [agent]\n    attributes: {team: bench}\n    api_key_sha256: %s\n",
		q(benchPrincipal), q(hex.EncodeToString(sum[:])))
	c.WriteString(o.extra)
	cfgPath := filepath.Join(dir, "portcullis.yaml")
	if err := os.WriteFile(cfgPath, []byte(c.String()), 0o600); err != nil {
		return nil, err
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	// The Go runtime's own knobs pass through, to measure their effect.
	for _, k := range []string{"GOGC", "GOMEMLIMIT", "GOMAXPROCS"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	argv := []string{e.gatewayBin, "serve", "--config", cfgPath}
	s, err := startServer(ctx, "gateway-"+o.name, argv, env, dir, filepath.Join(dir, "gateway.log"), port, "/readyz")
	if err != nil {
		return nil, err
	}
	s.dbName = dbName
	return s, nil
}

// startOPA starts `opa run --server` on bundle. decisionLogs turns on the
// console decision logger; the server's output (decision logs included)
// goes to a file.
func (e *benchEnv) startOPA(ctx context.Context, name, bundle string, decisionLogs bool) (*server, error) {
	dir := filepath.Join(e.work, "opa-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	argv := []string{e.opaBin, "run", "--server", "--addr", fmt.Sprintf("127.0.0.1:%d", port),
		"--log-level", e.cfg.opaLogLevel, "--skip-version-check"}
	if decisionLogs {
		argv = append(argv, "--set", "decision_logs.console=true")
	}
	argv = append(argv, "--bundle", bundle)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	return startServer(ctx, "opa-"+name, argv, env, dir, filepath.Join(dir, "opa.log"), port, "/health?bundles")
}
