package tests

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The upstream suite runs real third-party MCP servers from npm, which
// nobody here wrote: @modelcontextprotocol/server-everything (stdio and
// its streamableHttp mode) and @modelcontextprotocol/server-filesystem.
// scripts/test.sh installs them into .tools/mcp; PORTCULLIS_REQUIRE_MCP_SERVERS=1
// makes a missing one a failure instead of a skip.

// mcpServers is where scripts/test.sh installs the npm servers.
func mcpServers(t *testing.T) (node, modules string) {
	t.Helper()
	modules = filepath.Join(repoRoot, ".tools", "mcp", "node_modules")
	if d := os.Getenv("PORTCULLIS_MCP_SERVERS"); d != "" {
		modules = d
	}
	node, err := exec.LookPath("node")
	var missing string
	switch {
	case err != nil:
		missing = "node"
	default:
		for _, p := range []string{"@modelcontextprotocol/server-everything/dist/index.js", "@modelcontextprotocol/server-filesystem/dist/index.js"} {
			if _, err := os.Stat(filepath.Join(modules, p)); err != nil {
				missing = p
			}
		}
	}
	if missing != "" {
		if os.Getenv("PORTCULLIS_REQUIRE_MCP_SERVERS") == "1" {
			t.Fatalf("MCP servers required (PORTCULLIS_REQUIRE_MCP_SERVERS=1) but %s is missing under %s", missing, modules)
		}
		t.Skipf("%s missing under %s (scripts/test.sh installs the MCP servers)", missing, modules)
	}
	node, _ = filepath.EvalSymlinks(node)
	modules, _ = filepath.EvalSymlinks(modules)
	return node, modules
}

// upstreamDeployment is a bwrap deployment on the SHIPPED policy (as an
// operator runs it), whose data grants the agents the upstream tools
// named in agentTools and each stdio upstream its launch grants.
func upstreamDeployment(t *testing.T, agentTools []string, launch map[string][]map[string]string, upstreamsYAML string) *deployment {
	t.Helper()
	requireBwrap(t)
	d := newDeploymentWith(t, storeSQLite, "bwrap")
	if err := os.Remove(filepath.Join(d.bundleDir, "e2e.rego")); err != nil {
		t.Fatal(err)
	}
	shipped := filepath.Join(repoRoot, "policies", "bundle")
	if err := os.MkdirAll(filepath.Join(d.bundleDir, "portcullis"), 0o755); err != nil {
		t.Fatal(err)
	}
	regos, _ := filepath.Glob(filepath.Join(shipped, "portcullis", "*.rego"))
	for _, r := range regos {
		if strings.HasSuffix(r, "_test.rego") {
			continue
		}
		b, err := os.ReadFile(r)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(d.bundleDir, "portcullis", filepath.Base(r)), b)
	}
	var data map[string]any
	b, err := os.ReadFile(filepath.Join(shipped, "data.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	cfg := data["portcullis"].(map[string]any)["config"].(map[string]any)
	roles := cfg["roles"].(map[string]any)
	agent := roles["agent"].(map[string]any)["tools"].(map[string]any)
	for _, tool := range agentTools {
		agent[tool] = map[string]any{}
	}
	up := map[string]any{}
	for name, fs := range launch {
		up[name] = map[string]any{"fs": fs, "network": map[string]any{"posture": "off"}}
	}
	roles["upstream"] = map[string]any{"tools": up}
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), data)

	f, err := os.OpenFile(d.configPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("upstreams:\n" + upstreamsYAML); err != nil {
		t.Fatal(err)
	}
	return d
}

// waitUpstream polls GET /v1/upstreams until the upstream is in state.
func waitUpstream(t *testing.T, g *gateway, name, state string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last map[string]any
	for time.Now().Before(deadline) {
		r := g.do(t, http.MethodGet, "/v1/upstreams", g.dep.keys[admin], nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET /v1/upstreams: %s", r)
		}
		var body struct {
			Upstreams []map[string]any `json:"upstreams"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		for _, u := range body.Upstreams {
			if u["name"] == name {
				last = u
				if u["state"] == state {
					return u
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("upstream %s never reached state %s; last: %v", name, state, last)
	return nil
}

func listedNames(t *testing.T, g *gateway, key string) map[string]string {
	t.Helper()
	r := g.do(t, http.MethodGet, "/v1/tools", key, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/tools: %s", r)
	}
	var list struct {
		Names map[string]string `json:"names"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	return list.Names
}

func upstreamText(t *testing.T, res *toolCallResult) string {
	t.Helper()
	var data struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(res.Output.Data, &data); err != nil {
		t.Fatalf("upstream data: %v: %s", err, res.Output.Data)
	}
	var sb strings.Builder
	for _, c := range data.Content {
		sb.WriteString(c.Text)
	}
	return sb.String()
}

// TestUpstreamStdioEverything fronts server-everything on stdio, in
// bwrap: the granted tool runs with a receipt, the ungranted one is never
// listed and refused, bad input is refused before the policy, the server
// restarts after it is killed, the injected secret reaches the server and
// nowhere else.
func TestUpstreamStdioEverything(t *testing.T) {
	node, modules := mcpServers(t)
	secret := "upstream-secret-" + randHex(t, 16)
	server := filepath.Join(modules, "@modelcontextprotocol/server-everything/dist/index.js")
	q := strconv.Quote
	d := upstreamDeployment(t, []string{"every.echo", "every.get-env"},
		map[string][]map[string]string{"every": {{"path": modules, "mode": "r"}}},
		fmt.Sprintf("  - name: every\n    command: [%s, %s, stdio]\n    env: {E2E_MARK: %s}\n    secrets: {E2E_UPSTREAM_TOKEN: {env: E2E_TOKEN_SRC}}\n",
			q(node), q(server), q("e2e-"+d0(t))))
	d.env = append(d.env, "E2E_TOKEN_SRC="+secret)
	g := d.start(t)
	agent := d.keys[agentFull]

	st := waitUpstream(t, g, "every", "ready")
	if id, _ := st["launch_receipt_id"].(string); id == "" {
		t.Fatalf("no launch receipt in %v", st)
	} else if rc, ok := g.getReceipt(t, id); !ok || rc.Tool != "every" || rc.Decision != "allow" || rc.PrincipalID != "upstream:every" {
		t.Fatalf("launch receipt: %+v", rc)
	}

	names := listedNames(t, g, agent)
	if names["every__echo"] != "every.echo" {
		t.Fatalf("every.echo not listed by its model-safe name: %v", names)
	}
	for safe, own := range names {
		if own == "every.get-sum" || strings.Contains(safe, "get-sum") || strings.Contains(safe, "get_sum") {
			t.Fatalf("ungranted every.get-sum listed: %v", names)
		}
	}

	res := g.call(t, agent, map[string]any{"tool": "every__echo", "input": map[string]any{"message": "hello upstream"}, "call_id": "c-up-1"})
	if res.status != http.StatusOK || !res.Output.Success {
		t.Fatalf("echo: %d %s", res.status, res.body)
	}
	if got := upstreamText(t, res); !strings.Contains(got, "hello upstream") {
		t.Fatalf("echo text %q", got)
	}
	rc := g.checkReceipt(t, res, expectReceipt{tool: "every.echo", principal: agentFull, decision: "allow", statuses: []string{"succeeded"}, secrets: []string{secret}}, "c-up-1", "")
	if rc.Tool != "every.echo" || !strings.Contains(rc.raw, `"output_sha256":"`) || rc.Outcome.Backend != "mcp-stdio" {
		t.Fatalf("receipt of an upstream call: %s", rc.raw)
	}

	denied := g.call(t, agent, map[string]any{"tool": "every.get-sum", "input": map[string]any{"a": 1, "b": 2}})
	if denied.status != http.StatusForbidden || denied.errCode() != "permission_denied" {
		t.Fatalf("ungranted upstream tool: %d %s", denied.status, denied.body)
	}

	bad := g.call(t, agent, map[string]any{"tool": "every.echo", "input": map[string]any{"message": 5}})
	if bad.status != http.StatusBadRequest || bad.errCode() != "invalid_input" {
		t.Fatalf("schema-invalid input: %d %s", bad.status, bad.body)
	}
	if f, _ := bad.Output.Error.Details["field"].(string); f != "input.message" {
		t.Fatalf("schema refusal names %q, want input.message: %s", f, bad.body)
	}

	dry := g.do(t, http.MethodPost, "/v1/decisions", agent, map[string]any{"tool": "every.echo", "input": map[string]any{"message": "x"}})
	if dry.status != http.StatusOK || !strings.Contains(string(dry.body), `"allow":true`) {
		t.Fatalf("dry run: %s", dry)
	}

	// The secret reaches the server's environment (the name is there) but
	// its value is masked in what the server answers.
	env := g.call(t, agent, map[string]any{"tool": "every.get-env", "input": map[string]any{}})
	if !env.Output.Success {
		t.Fatalf("get-env: %s", env.body)
	}
	text := upstreamText(t, env)
	if !strings.Contains(text, "E2E_UPSTREAM_TOKEN") || strings.Contains(text, secret) {
		t.Fatalf("get-env: secret not injected, or not masked: %s", text)
	}
	if strings.Contains(text, d.secret) || strings.Contains(text, d.gwOnly) {
		t.Fatalf("the gateway's own environment leaked into the upstream: %s", text)
	}

	// Killed mid-run: calls answer backend_unavailable until the
	// supervisor has restarted it, then succeed again.
	killServer(t, server)
	recovered := false
	sawDown := false
	for i := 0; i < 300 && !recovered; i++ {
		r := g.call(t, agent, map[string]any{"tool": "every.echo", "input": map[string]any{"message": "again"}})
		switch {
		case r.status == http.StatusOK && r.Output.Success:
			recovered = true
		case r.errCode() == "backend_unavailable" || r.errCode() == "unknown_tool":
			sawDown = true
			time.Sleep(100 * time.Millisecond)
		default:
			t.Fatalf("after kill: %d %s", r.status, r.body)
		}
	}
	if !recovered {
		t.Fatal("upstream did not recover after its server was killed")
	}
	t.Logf("after kill: saw it down=%v, recovered", sawDown)
	if st := waitUpstream(t, g, "every", "ready"); st["restarts"].(float64) < 1 {
		t.Fatalf("restart not counted: %v", st)
	}

	g.stop(10 * time.Second)
	assertNowhere(t, secret, d.dataDir, g.stderr.String())
}

// d0 is a short random marker.
func d0(t *testing.T) string { return randHex(t, 4) }

// killServer SIGKILLs every process whose command line names script.
func killServer(t *testing.T, script string) {
	t.Helper()
	pids := procsWithMarker(script)
	if len(pids) == 0 {
		t.Fatalf("no process runs %s", script)
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// assertNowhere fails when secret appears in any file under dir or in log.
func assertNowhere(t *testing.T, secret, dir, log string) {
	t.Helper()
	if strings.Contains(log, secret) {
		t.Fatal("the secret appears in the gateway's log")
	}
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), secret) {
			t.Errorf("the secret appears in %s", p)
		}
		return nil
	})
}

// TestUpstreamFilesystemConfined fronts server-filesystem in bwrap: it
// reads inside its launch grants, and a file outside them does not exist
// for it although the server itself was told it may read there.
func TestUpstreamFilesystemConfined(t *testing.T) {
	node, modules := mcpServers(t)
	server := filepath.Join(modules, "@modelcontextprotocol/server-filesystem/dist/index.js")
	q := strconv.Quote
	root := t.TempDir()
	inside := filepath.Join(root, "inside")
	outside := filepath.Join(root, "outside")
	for _, dir := range []string{inside, outside} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.Chmod(root, 0o755)
	writeFile(t, filepath.Join(inside, "note.txt"), []byte("inside the grant\n"))
	writeFile(t, filepath.Join(outside, "secret.txt"), []byte("outside the grant\n"))
	d := upstreamDeployment(t, []string{"files.read_text_file"},
		map[string][]map[string]string{"files": {{"path": modules, "mode": "r"}, {"path": inside, "mode": "rw"}}},
		fmt.Sprintf("  - name: files\n    command: [%s, %s, %s]\n", q(node), q(server), q(root)))
	// agent-narrow alone may write: the control that a dispatched write
	// does reach the server and leave a file.
	grantPrincipalTools(t, d, agentNarrow, "files.write_file")
	g := d.start(t)
	agent := d.keys[agentFull]
	waitUpstream(t, g, "files", "ready")

	ok := g.call(t, agent, map[string]any{"tool": "files.read_text_file", "input": map[string]any{"path": filepath.Join(inside, "note.txt")}})
	if !ok.Output.Success || !strings.Contains(upstreamText(t, ok), "inside the grant") {
		t.Fatalf("read inside the grant: %s", ok.body)
	}
	out := g.call(t, agent, map[string]any{"tool": "files.read_text_file", "input": map[string]any{"path": filepath.Join(outside, "secret.txt")}})
	if out.Output.Success || strings.Contains(string(out.body), "outside the grant") {
		t.Fatalf("read outside the launch grants: %s", out.body)
	}
	if out.status != http.StatusOK || out.errCode() != "tool_error" {
		t.Fatalf("outside read: want 200 tool_error (the server's own refusal), got %d %s", out.status, out.body)
	}

	// A denied call never reaches the server: the write it would have done
	// is not there. The same call by a principal granted it is.
	write := func(key, name string) *toolCallResult {
		return g.call(t, key, map[string]any{"tool": "files.write_file", "input": map[string]any{"path": filepath.Join(inside, name), "content": "written\n"}})
	}
	if denied := write(agent, "denied.txt"); denied.status != http.StatusForbidden || denied.errCode() != "permission_denied" {
		t.Fatalf("write_file without a grant: %d %s", denied.status, denied.body)
	}
	if _, err := os.Stat(filepath.Join(inside, "denied.txt")); !os.IsNotExist(err) {
		t.Fatalf("a denied write_file reached the server: the file exists (%v)", err)
	}
	if allowed := write(d.keys[agentNarrow], "allowed.txt"); !allowed.Output.Success {
		t.Fatalf("write_file granted: %s", allowed.body)
	}
	if b, err := os.ReadFile(filepath.Join(inside, "allowed.txt")); err != nil || string(b) != "written\n" {
		t.Fatalf("the granted write did not reach the server: %q %v", b, err)
	}
}

// grantPrincipalTools grants tools to one principal in the shipped
// library's data (config.principals), beside its role's.
func grantPrincipalTools(t *testing.T, d *deployment, principal string, tools ...string) {
	t.Helper()
	path := filepath.Join(d.bundleDir, "data.json")
	var data map[string]any
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	cfg := data["portcullis"].(map[string]any)["config"].(map[string]any)
	ps, _ := cfg["principals"].(map[string]any)
	if ps == nil {
		ps = map[string]any{}
		cfg["principals"] = ps
	}
	grants := map[string]any{}
	for _, tool := range tools {
		grants[tool] = map[string]any{}
	}
	ps[principal] = map[string]any{"tools": grants}
	writeJSON(t, path, data)
}

// startEverythingHTTP runs server-everything in its Streamable HTTP mode
// on a free loopback port until the test ends, and answers its MCP URL.
func startEverythingHTTP(t *testing.T) string {
	t.Helper()
	node, modules := mcpServers(t)
	server := filepath.Join(modules, "@modelcontextprotocol/server-everything/dist/index.js")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(node, server, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitListening(t, port)
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
}

// TestUpstreamHTTPEverything fronts server-everything's Streamable HTTP
// mode on loopback: reachable only because the config grants 127.0.0.1
// (allow_networks); the egress checks refuse loopback otherwise.
func TestUpstreamHTTPEverything(t *testing.T) {
	url := startEverythingHTTP(t)
	token := "http-secret-" + randHex(t, 16)
	d := upstreamDeployment(t, []string{"web.echo"}, nil, fmt.Sprintf(
		"  - name: web\n    url: %q\n    allow_networks: [\"127.0.0.1/32\"]\n    headers: {X-Api-Key: {secret: {env: E2E_HTTP_TOKEN}, prefix: \"Key \"}}\n"+
			"  - name: blocked\n    url: %q\n", url, url))
	d.env = append(d.env, "E2E_HTTP_TOKEN="+token)
	g := d.start(t)
	agent := d.keys[agentFull]
	waitUpstream(t, g, "web", "ready")
	res := g.call(t, agent, map[string]any{"tool": "web.echo", "input": map[string]any{"message": "over http"}})
	if !res.Output.Success || !strings.Contains(upstreamText(t, res), "over http") {
		t.Fatalf("http echo: %s", res.body)
	}
	st := waitUpstream(t, g, "blocked", "down")
	if msg, _ := st["last_error"].(string); !strings.Contains(msg, "not allowed") && !strings.Contains(msg, "non-public") && !strings.Contains(msg, "CIDR") {
		t.Fatalf("loopback upstream without allow_networks: want an egress refusal, got %v", st)
	}
	g.stop(10 * time.Second)
	assertNowhere(t, token, d.dataDir, g.stderr.String())
}

func waitListening(t *testing.T, port int) {
	t.Helper()
	for i := 0; i < 300; i++ {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %d", port)
}

// TestUpstreamPinning pins an upstream's tools on first sight, then,
// after the upstream named "every" starts serving other tools (another
// server behind the same name: a rug pull), quarantines them: hidden from
// lists, refused 409 tool_changed with a receipt, until an admin approves
// the served digest. The pins are evidence: they survive the restart.
func TestUpstreamPinning(t *testing.T) {
	node, modules := mcpServers(t)
	everything := filepath.Join(modules, "@modelcontextprotocol/server-everything/dist/index.js")
	files := filepath.Join(modules, "@modelcontextprotocol/server-filesystem/dist/index.js")
	work := t.TempDir()
	_ = os.Chmod(work, 0o755)
	writeFile(t, filepath.Join(work, "a.txt"), []byte("pinned content\n"))
	q := strconv.Quote
	line := func(server string, args ...string) string {
		parts := []string{q(node), q(server)}
		for _, a := range args {
			parts = append(parts, q(a))
		}
		return "  - name: every\n    command: [" + strings.Join(parts, ", ") + "]\n"
	}
	d := upstreamDeployment(t, []string{"every.echo", "every.read_text_file"},
		map[string][]map[string]string{"every": {{"path": modules, "mode": "r"}, {"path": work, "mode": "r"}}},
		line(everything, "stdio"))
	g := d.start(t)
	agent := d.keys[agentFull]
	st := waitUpstream(t, g, "every", "ready")
	for _, tl := range st["tools"].([]any) {
		tool := tl.(map[string]any)
		if tool["quarantined"] == true || tool["pinned_sha256"] != tool["served_sha256"] {
			t.Fatalf("first sight must pin every tool: %v", tool)
		}
	}
	if r := g.call(t, agent, map[string]any{"tool": "every.echo", "input": map[string]any{"message": "x"}}); !r.Output.Success {
		t.Fatalf("pinned tool: %s", r.body)
	}
	g.stop(10 * time.Second)

	cfg, err := os.ReadFile(d.configPath)
	if err != nil {
		t.Fatal(err)
	}
	swapped := strings.Replace(string(cfg), line(everything, "stdio"), line(files, work), 1)
	if swapped == string(cfg) {
		t.Fatal("config not swapped")
	}
	if err := os.WriteFile(d.configPath, []byte(swapped), 0o600); err != nil {
		t.Fatal(err)
	}
	g = d.start(t)
	st = waitUpstream(t, g, "every", "ready")
	var served string
	for _, tl := range st["tools"].([]any) {
		tool := tl.(map[string]any)
		if tool["name"] == "every.read_text_file" {
			served, _ = tool["served_sha256"].(string)
			if tool["quarantined"] != true || tool["pinned_sha256"] != "" {
				t.Fatalf("a new tool behind a known upstream must be quarantined: %v", tool)
			}
		}
	}
	if served == "" {
		t.Fatalf("every.read_text_file not served: %v", st)
	}
	if own := listedNames(t, g, agent)["every__read_text_file"]; own != "" {
		t.Fatal("a quarantined tool is listed")
	}
	input := map[string]any{"path": filepath.Join(work, "a.txt")}
	r := g.call(t, agent, map[string]any{"tool": "every.read_text_file", "input": input})
	if r.status != http.StatusConflict || r.errCode() != "tool_changed" || r.ReceiptID == "" {
		t.Fatalf("quarantined tool: want 409 tool_changed with a receipt, got %d %s", r.status, r.body)
	}
	if g.do(t, http.MethodPost, "/v1/upstreams/every/tools/read_text_file/approve", agent, map[string]any{"definition_sha256": served}).status != http.StatusForbidden {
		t.Fatal("an agent approved a definition")
	}
	if a := g.do(t, http.MethodPost, "/v1/upstreams/every/tools/read_text_file/approve", d.keys[admin], map[string]any{"definition_sha256": strings.Repeat("0", 64)}); a.status != http.StatusPreconditionFailed {
		t.Fatalf("approving a digest that is not served: %s", a)
	}
	// The admin approves with the CLI, as an operator would.
	keyFile := filepath.Join(t.TempDir(), "admin.key")
	if err := os.WriteFile(keyFile, []byte(d.keys[admin]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gatewayBin, "upstream", "approve", "--url", g.baseURL, "--key-file", keyFile, "every", "read_text_file", served).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"approved":true`) {
		t.Fatalf("gateway upstream approve: %v: %s", err, out)
	}
	if own := listedNames(t, g, agent)["every__read_text_file"]; own != "every.read_text_file" {
		t.Fatal("an approved tool is not listed")
	}
	pins := g.listReceipts(t, url.Values{"tool": {"pin:every.read_text_file"}})
	if len(pins) != 1 || pins[0].PrincipalID != admin || !strings.Contains(string(pins[0].Args), served) {
		t.Fatalf("the approval is not evidence naming the admin: %+v", pins)
	}
	r = g.call(t, agent, map[string]any{"tool": "every.read_text_file", "input": input})
	if !r.Output.Success || !strings.Contains(upstreamText(t, r), "pinned content") {
		t.Fatalf("approved tool: %s", r.body)
	}
}
