package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// scenarioFunc runs one scenario.
type scenarioFunc func(*runner, context.Context) error

// moreScenarios are the scenarios their own files register
// (registerScenario), beside the ones run's switch names.
var moreScenarios = map[string]scenarioFunc{}

// registerScenario adds a scenario to -scenarios (and its default: every
// scenario). It is called from a package-level var, so it runs before main.
func registerScenario(name string, f scenarioFunc) bool {
	allScenarios = append(allScenarios, name)
	moreScenarios[name] = f
	return true
}

// upstreamEverything is @modelcontextprotocol/server-everything's entry
// point under the npm modules folder scripts/test.sh installs.
const upstreamEverything = "@modelcontextprotocol/server-everything/dist/index.js"

// mcpModules is where the npm MCP servers are: $PORTCULLIS_MCP_SERVERS, else
// <repo>/.tools/mcp/node_modules (scripts/test.sh installs them there).
func (e *benchEnv) mcpModules() string {
	if d := os.Getenv("PORTCULLIS_MCP_SERVERS"); d != "" {
		return d
	}
	return filepath.Join(e.repo, ".tools", "mcp", "node_modules")
}

// upstreamScenario: server-everything's echo tool (Streamable HTTP on
// loopback), called by the same client (the official Go SDK's) directly
// and through the gateway's MCP endpoint, which fronts that same server as
// the governed upstream "web" (validate against the inputSchema, decide on
// the shipped policy, decision durable before dispatch, outcome durable
// before the answer; on the embedded store and on PostgreSQL). One client
// first, the case the goal (gateway p50 ≤ 1.2× direct) is about, then
// -clients; closed loop only: server-everything (node) falls over under the
// open-loop backlog (resets connections, then exits), which would measure
// nothing.
func (r *runner) upstreamScenario(ctx context.Context) error {
	const scenario = "upstream"
	node, err := exec.LookPath("node")
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	script := filepath.Join(r.env.mcpModules(), upstreamEverything)
	if _, err := os.Stat(script); err != nil {
		return fmt.Errorf("server-everything is not installed (npm install --prefix .tools/mcp @modelcontextprotocol/server-everything, or set PORTCULLIS_MCP_SERVERS): %w", err)
	}
	everything, err := r.env.startEverything(ctx, node, script)
	if err != nil {
		return err
	}
	defer everything.stop()
	directURL := everything.baseURL + "/mcp"

	bundle, err := r.env.upstreamBundle()
	if err != nil {
		return err
	}
	clients := append([]int{1}, slices.DeleteFunc(slices.Clone(r.cfg.clients), func(c int) bool { return c == 1 })...)
	var errs []error
	errs = append(errs, r.withMCP(ctx, directURL, "", "echo", func(op Op) error {
		return r.measure(ctx, scenario, system{
			name: "direct", unit: "calls/s", op: op, pid: everything.pid(), cpuScope: "server-everything (node)",
			clients: clients, noOpen: true,
			note: "official Go SDK client → server-everything echo over Streamable HTTP, no gateway",
		})
	}))
	for _, pg := range []bool{false, true} {
		label := "sqlite"
		if pg {
			label = "postgres"
		}
		err = r.withServer(ctx, func(ctx context.Context) (*server, error) {
			return r.env.startGateway(ctx, gatewayOptions{name: "upstream-" + label, postgres: pg, backend: "process", bundle: bundle,
				extra: fmt.Sprintf("upstreams:\n  - name: web\n    url: %q\n    allow_networks: [\"127.0.0.1/32\"]\n", directURL)})
		}, func(s *server) error {
			return r.withMCP(ctx, s.baseURL+"/mcp", r.env.key, "web.echo", func(op Op) error {
				return r.measure(ctx, scenario, system{
					name: "gateway/" + label, unit: "calls/s", op: op, pid: s.pid(), cpuScope: "gateway process (not the upstream)",
					db: s.dbName, clients: clients, noOpen: true,
					note: "the same client → gateway MCP tools/call web.echo → the same server; shipped policy, decision + outcome durable",
				})
			})
		})
		errs = append(errs, err)
	}
	r.upstreamNote()
	return errors.Join(errs...)
}

// upstreamNote puts the side-by-side figure the goal is about in the notes:
// p50 and throughput of one client, gateway vs direct.
func (r *runner) upstreamNote() {
	var direct *Result
	var gws []*Result
	for _, res := range r.report.Results {
		if res.Scenario != "upstream" || res.Mode != "closed" || res.Clients != 1 {
			continue
		}
		if res.System == "direct" {
			direct = res
		} else {
			gws = append(gws, res)
		}
	}
	if direct == nil || direct.P50ms == 0 {
		return
	}
	for _, gw := range gws {
		note := fmt.Sprintf("upstream, 1 client: %s p50 %.2f ms vs direct %.2f ms (%.2f×); %.0f vs %.0f calls/s",
			gw.System, gw.P50ms, direct.P50ms, gw.P50ms/direct.P50ms, gw.OpsPerSec, direct.OpsPerSec)
		logf("%s", note)
		r.report.Notes = append(r.report.Notes, note)
	}
}

// startEverything runs server-everything in its Streamable HTTP mode on a
// free loopback port, ready once it accepts connections.
func (e *benchEnv) startEverything(ctx context.Context, node, script string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(e.work, "everything")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "server.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(node, script, "streamableHttp")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, lf, lf
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "PORT=" + strconv.Itoa(port)}
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server-everything: %w", err)
	}
	s := &server{name: "server-everything", cmd: cmd, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port), logPath: logPath, done: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("server-everything exited before listening (%v); log:\n%s", s.waitErr, tailFile(logPath, 4000))
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("server-everything not listening on %d within 60s; log:\n%s", port, tailFile(logPath, 4000))
		}
	}
}

// upstreamBundle is the bench's shipped bundle with one more grant: agents
// may call web.echo.
func (e *benchEnv) upstreamBundle() (string, error) {
	dir := filepath.Join(e.work, "bundle-upstream")
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if err := copyDir(e.shippedBundle, dir); err != nil {
		return "", fmt.Errorf("copy bundle: %w", err)
	}
	path := filepath.Join(dir, "data.json")
	var data map[string]any
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(b, &data); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	tools, ok := dig(data, "portcullis", "config", "roles", "agent", "tools")
	if !ok {
		return "", fmt.Errorf("%s: no portcullis.config.roles.agent.tools", path)
	}
	tools["web.echo"] = map[string]any{}
	return dir, os.WriteFile(path, mustJSON(data), 0o644)
}

// withMCP connects one MCP session (Bearer key unless empty) to endpoint,
// waits until tool answers (the gateway connects to its upstream after it
// is ready), and runs fn with an Op calling tool once. Concurrent clients
// share the session, as an agent's parallel tool calls do.
func (r *runner) withMCP(ctx context.Context, endpoint, key, tool string, fn func(Op) error) error {
	hc := &http.Client{Transport: &bearerTransport{key: key, next: newTransport(max(r.cfg.maxInflight, r.maxClients()))}}
	client := mcp.NewClient(&mcp.Implementation{Name: "portcullis-bench", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return fmt.Errorf("connect %s: %w", endpoint, err)
	}
	defer sess.Close()
	op := func(ctx context.Context) error {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"message": "bench"}})
		if err != nil {
			return err
		}
		if res.IsError {
			return fmt.Errorf("%s answered isError: %s", tool, truncate(fmt.Sprint(res.Content), 300))
		}
		return nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := op(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("smoke %s at %s: %w", tool, endpoint, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fn(op)
}

// bearerTransport sets Authorization: Bearer key (nothing when key is "").
type bearerTransport struct {
	key  string
	next http.RoundTripper
}

func (b *bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if b.key != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+b.key)
	}
	return b.next.RoundTrip(req)
}
