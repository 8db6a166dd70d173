package tests

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// denoProcs lists the live processes whose command line names the run
// directory the code wrote to marker (its import.meta.url).
func denoProcs(t *testing.T, marker string) []string {
	t.Helper()
	b, err := os.ReadFile(marker)
	if err != nil {
		t.Fatalf("the code did not write its run directory: %v", err)
	}
	dir := filepath.Dir(strings.TrimPrefix(string(b), "file://"))
	if !strings.Contains(dir, "portcullis-coderun-") {
		t.Fatalf("marker %q names no run directory", b)
	}
	var alive []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if cmd, err := os.ReadFile(p); err == nil && strings.Contains(string(cmd), dir) {
			alive = append(alive, p+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	return alive
}

// TestCodeRunCapsKill runs code.run on the real gateway, bubblewrap and
// Deno: past the output cap and past the tool-call budget the run is
// killed at once (Deno gone when the call returns, long before the
// timeout), the call fails with too_large and a receipt that says so, and
// the counters are right (issue #20: the run used to go on, and succeed).
// It also checks the typed stubs against GET /v1/tools.d.ts.
func TestCodeRunCapsKill(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	deno := denoForTests(t)
	d := newDeploymentWith(t, storeSQLite, "bwrap")
	d.env = append(d.env, "PORTCULLIS_TOOLS_DENO="+deno)
	work := filepath.Join(d.dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(work, "in.txt"), []byte("inside the grant"))
	rego, err := os.ReadFile(filepath.Join("testdata", "sandbox", "sandbox.rego"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.bundleDir, "e2e.rego"), rego)
	grants := []map[string]string{{"path": work, "mode": "rw"}, {"path": "/usr", "mode": "r"}}
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), map[string]any{"e2e": map[string]any{"principals": map[string]any{
		agentFull:   map[string]any{"tools": []string{"code.run", "fs.read", "Exec"}, "fs_grants": grants},
		agentNarrow: map[string]any{"tools": []string{"code.run"}, "fs_grants": grants},
	}}})
	g := d.start(t)
	type codeOut struct {
		Output          string          `json:"output"`
		Stderr          string          `json:"stderr"`
		OutputTruncated bool            `json:"output_truncated"`
		Result          json.RawMessage `json:"result"`
		ToolCalls       struct {
			Count      int      `json:"count"`
			Denied     int      `json:"denied"`
			Refused    int      `json:"refused"`
			ReceiptIDs []string `json:"receipt_ids"`
		} `json:"tool_calls"`
	}
	run := func(key, code string, extra map[string]any) (*toolCallResult, codeOut) {
		in := map[string]any{"code": code, "timeout_s": 60}
		for k, v := range extra {
			in[k] = v
		}
		r := g.call(t, g.dep.keys[key], map[string]any{"tool": "code.run", "input": in})
		var cd codeOut
		if len(r.Output.Data) > 0 && string(r.Output.Data) != "null" {
			if err := json.Unmarshal(r.Output.Data, &cd); err != nil {
				t.Fatalf("%v\n%s", err, r.response)
			}
		}
		return r, cd
	}
	parentOf := func(rc receipt) string {
		var p struct {
			Parent *string `json:"parent_receipt_id"`
		}
		_ = json.Unmarshal([]byte(rc.raw), &p)
		if p.Parent == nil {
			return ""
		}
		return *p.Parent
	}
	killed := func(t *testing.T, r *toolCallResult, field, marker string, took time.Duration) {
		t.Helper()
		if r.status != http.StatusOK || r.Output.Success || r.errCode() != "too_large" || r.Output.Error.Details["field"] != field {
			t.Fatalf("want a failed call, too_large on %s: %s", field, r.response)
		}
		if took > 30*time.Second {
			t.Errorf("took %s with timeout_s 60: the run was not stopped at the cap", took)
		}
		if alive := denoProcs(t, marker); len(alive) > 0 {
			t.Errorf("Deno still running after the call returned:\n%s", strings.Join(alive, "\n"))
		}
		rc := g.waitReceipt(t, r.ReceiptID, 10*time.Second, func(rc receipt) bool { return rc.status() != "" && rc.status() != "pending" })
		if rc.status() != "failed" || rc.Outcome.ErrorCode == nil || *rc.Outcome.ErrorCode != "too_large" {
			t.Errorf("receipt outcome: %s", rc.raw)
		}
	}

	t.Run("output cap kills the run", func(t *testing.T) {
		t.Parallel()
		marker := filepath.Join(work, "rundir-output")
		start := time.Now()
		r, cd := run(agentFull, `Deno.writeTextFileSync("`+marker+`", import.meta.url);
for (;;) console.log("x".repeat(200));`, map[string]any{"max_output_bytes": 4096})
		killed(t, r, "max_output_bytes", marker, time.Since(start))
		if !cd.OutputTruncated || len(cd.Output) > 4096 {
			t.Errorf("output %d bytes, truncated %v", len(cd.Output), cd.OutputTruncated)
		}
	})
	t.Run("tool-call budget kills the run", func(t *testing.T) {
		t.Parallel()
		marker := filepath.Join(work, "rundir-budget")
		start := time.Now()
		r, cd := run(agentFull, `Deno.writeTextFileSync("`+marker+`", import.meta.url);
for (let i = 0; i < 100; i++) await tools.call("fs.read", {path: "`+work+`/in.txt"});
Deno.writeTextFileSync("`+work+`/after-budget", "ran on");
for (;;) {}`, nil)
		killed(t, r, "tool_calls", marker, time.Since(start))
		if cd.ToolCalls.Count != 50 || cd.ToolCalls.Refused != 1 || cd.ToolCalls.Denied != 0 || len(cd.ToolCalls.ReceiptIDs) != 50 || string(cd.Result) != "null" {
			t.Errorf("tool_calls %+v result %s", cd.ToolCalls, cd.Result)
		}
		if _, err := os.Stat(filepath.Join(work, "after-budget")); err == nil {
			t.Errorf("the code ran on past the budget")
		}
		for _, id := range cd.ToolCalls.ReceiptIDs {
			rc, ok := g.getReceipt(t, id)
			if !ok || rc.Decision != "allow" || parentOf(rc) != r.ReceiptID {
				t.Fatalf("nested receipt %s: %s", id, rc.raw)
			}
		}
	})
	t.Run("denied nested calls are counted", func(t *testing.T) {
		t.Parallel()
		r, cd := run(agentNarrow, `
for (let i = 0; i < 3; i++) await tools.call("fs.read", {path: "`+work+`/in.txt"});
export const result = 1;`, nil)
		if !r.Output.Success || cd.ToolCalls.Count != 3 || cd.ToolCalls.Denied != 3 || cd.ToolCalls.Refused != 0 {
			t.Errorf("tool_calls %+v: %s", cd.ToolCalls, r.response)
		}
	})
	t.Run("typed stubs match GET /v1/tools.d.ts", func(t *testing.T) {
		t.Parallel()
		full := g.do(t, http.MethodGet, "/v1/tools.d.ts", g.dep.keys[agentFull], nil)
		narrow := g.do(t, http.MethodGet, "/v1/tools.d.ts", g.dep.keys[agentNarrow], nil)
		if full.status != 200 || !strings.HasPrefix(full.header.Get("Content-Type"), "application/typescript") {
			t.Fatalf("%s", full)
		}
		for _, want := range []string{"declare const tools: {", "call(tool: string", "  fs: {\n", "    read(input: {", "path: string;", "  Exec(input: {", "argv: string[];", "  code: {\n"} {
			if !strings.Contains(string(full.body), want) {
				t.Errorf("agent-full's declarations lack %q:\n%s", want, full.body)
			}
		}
		if strings.Contains(string(narrow.body), "  fs: {") || strings.Contains(string(narrow.body), "Exec(") || !strings.Contains(string(narrow.body), "  code: {") {
			t.Errorf("agent-narrow's declarations name tools it may not call:\n%s", narrow.body)
		}
		if r := g.do(t, http.MethodGet, "/v1/tools.d.ts", g.dep.keys[auditor], nil); r.status != http.StatusForbidden {
			t.Errorf("auditor: %s", r)
		}
		r, cd := run(agentFull, `
const f = await tools.fs.read({path: "`+work+`/in.txt"});
export const result = {content: f.data.content, id: f.receipt_id, keys: Object.keys(tools).sort()};`, nil)
		if !r.Output.Success || !strings.Contains(string(cd.Result), `"content":"inside the grant"`) || !strings.Contains(string(cd.Result), `"keys":["Exec","call","code","fs"]`) {
			t.Fatalf("%s\n%s", cd.Result, r.response)
		}
		rc, ok := g.getReceipt(t, cd.ToolCalls.ReceiptIDs[0])
		if !ok || rc.Tool != "fs.read" || parentOf(rc) != r.ReceiptID {
			t.Errorf("stub call's receipt: %s", rc.raw)
		}
		_, cd = run(agentNarrow, `export const result = Object.keys(tools).sort();`, nil)
		if string(cd.Result) != `["call","code"]` {
			t.Errorf("agent-narrow's tools object: %s", cd.Result)
		}
	})
}
