package tests

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeLimitsServer is a minimal stdio MCP server (newline-delimited
// JSON-RPC) with two tools an upstream could turn against the gateway's
// host: limits (its /proc/self/limits) and alloc (allocate and touch mb
// MiB). It stands in for a greedy or hostile server; the e2e tests of the
// real npm servers are in upstream_test.go. A desc.txt beside the script
// replaces limits' description (a server changing a tool's definition).
const fakeLimitsServer = `import json, os, sys
desc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "desc.txt")
tools = [
  {"name": "limits", "description": open(desc).read().strip() if os.path.exists(desc) else "this process's limits", "inputSchema": {"type": "object"}},
  {"name": "alloc", "description": "allocate mb MiB", "inputSchema": {"type": "object", "properties": {"mb": {"type": "integer"}}, "required": ["mb"]}},
]
def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    req = json.loads(line)
    if "id" not in req:
        continue
    m, rid = req.get("method"), req["id"]
    if m == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": req["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "fake-limits", "version": "1"}}})
    elif m == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}})
    elif m == "tools/call":
        name, args = req["params"]["name"], req["params"].get("arguments") or {}
        if name == "limits":
            text, err = open("/proc/self/limits").read(), False
        else:
            try:
                b = bytearray(args["mb"] << 20)
                text, err = "allocated %d MiB" % args["mb"], False
            except MemoryError:
                text, err = "MemoryError", True
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}], "isError": err}})
    elif m == "ping":
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such method"}})
`

// TestUpstreamLaunchLimits: a stdio server runs under its launch
// decision's limits (config.roles.upstream.tools.<name>.limits): the
// launch receipt records them, the server sees its nofile limit from its
// first instruction, a small allocation works, and it cannot allocate past
// memory_bytes: the allocation fails (RLIMIT_DATA) or the server is killed
// (memory cgroup), which the call answers backend_unavailable; the receipt
// says which mechanism holds.
func TestUpstreamLaunchLimits(t *testing.T) {
	requireBwrap(t)
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o755)
	script := filepath.Join(dir, "fake_server.py")
	writeFile(t, script, []byte(fakeLimitsServer))
	d := upstreamDeployment(t, []string{"fake.limits", "fake.alloc"},
		map[string][]map[string]string{"fake": {{"path": dir, "mode": "r"}}},
		"  - name: fake\n    command: [\"/usr/bin/python3\", "+strconv.Quote(script)+"]\n")
	const memBytes = 256 << 20
	dataPath := filepath.Join(d.bundleDir, "data.json")
	var data map[string]any
	b, err := os.ReadFile(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	roles := data["portcullis"].(map[string]any)["config"].(map[string]any)["roles"].(map[string]any)
	fake := roles["upstream"].(map[string]any)["tools"].(map[string]any)["fake"].(map[string]any)
	fake["limits"] = map[string]any{"memory_bytes": memBytes, "nofile": 64}
	writeJSON(t, dataPath, data)

	g := d.start(t)
	agent := d.keys[agentFull]
	st := waitUpstream(t, g, "fake", "ready")
	id, _ := st["launch_receipt_id"].(string)
	rc, ok := g.getReceipt(t, id)
	if !ok || !strings.Contains(rc.raw, `"memory_bytes":268435456`) || !strings.Contains(rc.raw, `"nofile":64`) ||
		!strings.Contains(rc.raw, `"memory_limit":"cgroup"`) && !strings.Contains(rc.raw, `"memory_limit":"rlimit_data"`) {
		t.Fatalf("the launch receipt must record the limits and how memory is bounded: %s", rc.raw)
	}
	cgroup := strings.Contains(rc.raw, `"memory_limit":"cgroup"`)

	res := g.call(t, agent, map[string]any{"tool": "fake.limits", "input": map[string]any{}})
	if !res.Output.Success {
		t.Fatalf("limits: %s", res.body)
	}
	limits := strings.Join(strings.Fields(upstreamText(t, res)), " ")
	if !strings.Contains(limits, "Max open files 64 64 files") {
		t.Fatalf("the server's nofile limit is not the launch decision's 64:\n%s", upstreamText(t, res))
	}

	small := g.call(t, agent, map[string]any{"tool": "fake.alloc", "input": map[string]any{"mb": 16}})
	if !small.Output.Success || !strings.Contains(upstreamText(t, small), "allocated 16 MiB") {
		t.Fatalf("a 16 MiB allocation under 256 MiB: %s", small.body)
	}
	big := g.call(t, agent, map[string]any{"tool": "fake.alloc", "input": map[string]any{"mb": 1024}})
	if big.Output.Success || strings.Contains(string(big.body), "allocated 1024") {
		t.Fatalf("a 1 GiB allocation under the launch decision's 256 MiB succeeded: %d %s", big.status, big.body)
	}
	t.Logf("a 1 GiB allocation under 256 MiB: HTTP %d %s", big.status, big.errCode())
	// As the receipt says: RLIMIT_DATA fails the allocation (the server
	// answers MemoryError); the memory cgroup kills the server.
	if cgroup {
		if big.status != http.StatusServiceUnavailable || big.errCode() != "backend_unavailable" {
			t.Fatalf("a 1 GiB allocation under a 256 MiB memory cgroup: want the server killed (503 backend_unavailable), got %d %s", big.status, big.body)
		}
	} else if big.errCode() != "tool_error" || !strings.Contains(upstreamText(t, big), "MemoryError") {
		t.Fatalf("a 1 GiB allocation under RLIMIT_DATA 256 MiB: want tool_error MemoryError, got %d %s", big.status, big.body)
	}
}
