package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// denoForTests is the Deno the test command installed: PORTCULLIS_DENO, or
// .tools. Missing Deno skips, or fails with PORTCULLIS_REQUIRE_DENO=1.
func denoForTests(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("PORTCULLIS_DENO"), filepath.Join(repoRoot, ".tools/node_modules/@deno/linux-x64-glibc/deno"), filepath.Join(repoRoot, ".tools/node_modules/@deno/linux-arm64-glibc/deno")} {
		if fi, err := os.Stat(p); p != "" && err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	if os.Getenv("PORTCULLIS_REQUIRE_DENO") == "1" {
		t.Fatal("Deno required (PORTCULLIS_REQUIRE_DENO=1) but not found")
	}
	t.Skip("no Deno: set PORTCULLIS_DENO")
	return ""
}

type codeData struct {
	Output    string          `json:"output"`
	Stderr    string          `json:"stderr"`
	Result    json.RawMessage `json:"result"`
	TimedOut  bool            `json:"timed_out"`
	ToolCalls struct {
		Count      int      `json:"count"`
		ReceiptIDs []string `json:"receipt_ids"`
		Refused    int      `json:"refused"`
	} `json:"tool_calls"`
	Exception *struct {
		Message string `json:"message"`
		Line    int    `json:"line"`
	} `json:"exception"`
}

// TestCodeRun runs code.run through the real gateway on bubblewrap with
// real Deno. agent-full may call code.run, fs.read and Exec over work/;
// agent-narrow may call only code.run, so its nested fs.read is denied.
func TestCodeRun(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	deno := denoForTests(t)
	port := httpServer(t)
	d := newDeploymentWith(t, storeSQLite, "bwrap")
	d.env = append(d.env, "PORTCULLIS_TOOLS_DENO="+deno)
	work, outside := filepath.Join(d.dir, "work"), filepath.Join(d.dir, "outside")
	for _, dir := range []string{work, outside} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(work, "in.txt"), []byte("inside the grant"))
	writeFile(t, filepath.Join(outside, "secret.txt"), []byte("TOP SECRET"))
	rego, err := os.ReadFile(filepath.Join("testdata", "sandbox", "sandbox.rego"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.bundleDir, "e2e.rego"), rego)
	grants := []map[string]string{{"path": work, "mode": "rw"}, {"path": "/usr", "mode": "r"}}
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), map[string]any{"e2e": map[string]any{"principals": map[string]any{
		agentFull:   map[string]any{"tools": []string{"code.run", "fs.read", "Exec"}, "fs_grants": grants},
		agentNarrow: map[string]any{"tools": []string{"code.run"}, "fs_grants": grants},
		// Posture allowlist: the name with any port (so Deno's --allow-net
		// lets every localhost port through to the egress proxy) and
		// loopback only on port (so the proxy refuses the others).
		agentNoExec: map[string]any{"tools": []string{"code.run"}, "network": map[string]any{"posture": "allowlist", "allow": []string{
			"localhost", fmt.Sprintf("127.0.0.0/8:%d", port)}}},
	}}})
	otherPort := httpServer(t)
	g := d.start(t)
	run := func(key, code string, extra ...any) (*toolCallResult, codeData) {
		in := map[string]any{"code": code}
		for i := 0; i+1 < len(extra); i += 2 {
			in[extra[i].(string)] = extra[i+1]
		}
		r := g.call(t, g.dep.keys[key], map[string]any{"tool": "code.run", "input": in})
		var cd codeData
		if string(r.Output.Data) != "null" && len(r.Output.Data) > 0 {
			if err := json.Unmarshal(r.Output.Data, &cd); err != nil {
				t.Fatalf("%v\n%s", err, r.response)
			}
		}
		return r, cd
	}

	t.Run("typescript, grants and confinement", func(t *testing.T) {
		r, cd := run(agentFull, `
const inside: string = Deno.readTextFileSync("`+work+`/in.txt");
Deno.writeTextFileSync("`+work+`/out.txt", "written by code");
const tryIt = (f: () => unknown) => { try { f(); return "ALLOWED"; } catch (e) { return (e as Error).name; } };
console.log("outside:", tryIt(() => Deno.readTextFileSync("`+outside+`/secret.txt")));
console.log("run:", tryIt(() => new Deno.Command("/usr/bin/true").outputSync()));
console.log("env:", tryIt(() => Deno.env.get("HOME")));
console.log("ffi:", tryIt(() => Deno.dlopen("/usr/lib/x86_64-linux-gnu/libc.so.6", {})));
let net = "ALLOWED";
try { await fetch("http://127.0.0.1:`+fmt.Sprint(port)+`/ok"); } catch (e) { net = (e as Error).name; }
console.log("net:", net);
export const result = {inside};`)
		if !r.Output.Success || r.Output.Metadata["backend"] != "bwrap" {
			t.Fatalf("%s", r.response)
		}
		if string(cd.Result) != `{"inside":"inside the grant"}` {
			t.Errorf("result %s", cd.Result)
		}
		if strings.Contains(cd.Output, "ALLOWED") || strings.Contains(cd.Output, "TOP SECRET") || strings.Count(cd.Output, "NotCapable") < 4 {
			t.Errorf("confinement failed:\n%s", cd.Output)
		}
		if b, _ := os.ReadFile(filepath.Join(work, "out.txt")); string(b) != "written by code" {
			t.Errorf("write inside the grant: %q", b)
		}
	})
	t.Run("allowlist: allowed server reached, other port refused and recorded", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("posture allowlist needs a root gateway")
		}
		r, cd := run(agentNoExec, fmt.Sprintf(`
const get = async (u: string) => {
  try { const r = await fetch(u); return r.status + " " + (await r.text()); }
  catch (e) { return "refused " + (e as Error).name; }
};
console.log("allowed:", await get("http://localhost:%[1]d/ok"));
console.log("other:", await get("http://localhost:%[2]d/ok"));
console.log("direct:", await get("http://127.0.0.1:%[2]d/ok"));`, port, otherPort))
		if !r.Output.Success || r.Output.Metadata["backend"] != "bwrap" {
			t.Fatalf("%s", r.response)
		}
		for _, want := range []string{"allowed: 200 hello from loopback", "other: refused TypeError", "direct: refused NotCapable"} {
			if !strings.Contains(cd.Output, want) {
				t.Errorf("output lacks %q:\n%s\n%s", want, cd.Output, cd.Stderr)
			}
		}
		rc := g.waitReceipt(t, r.ReceiptID, 10*time.Second, func(rc receipt) bool { return rc.status() == "succeeded" })
		n, ok, refused := rc.Outcome.Network, fmt.Sprintf("localhost:%d", port), fmt.Sprintf("localhost:%d", otherPort)
		if n == nil || len(n.Allowed) != 1 || n.Allowed[0] != ok || len(n.Refused) != 1 || n.Refused[0] != refused || n.Denials[refused] == "" {
			t.Errorf("receipt outcome.network does not record allowed %s and refused %s:\n%s", ok, refused, rc.raw)
		}
	})
	t.Run("output over the limit stops the run", func(t *testing.T) {
		// TestCodeRunCapsKill checks the kill itself.
		r, _ := run(agentFull, `console.log("a".repeat(5000)); export const result = 1;`, "max_output_bytes", 1024)
		var cd struct {
			Output          string `json:"output"`
			OutputTruncated bool   `json:"output_truncated"`
		}
		if err := json.Unmarshal(r.Output.Data, &cd); err != nil || r.Output.Success || r.errCode() != "too_large" {
			t.Fatalf("%v: %s", err, r.response)
		}
		if !cd.OutputTruncated || len(cd.Output) != 1024 {
			t.Errorf("output_truncated %v (%d bytes)", cd.OutputTruncated, len(cd.Output))
		}
	})
	t.Run("nested calls are governed and linked", func(t *testing.T) {
		r, cd := run(agentFull, `
const f = await tools.call("fs.read", {path: "`+work+`/in.txt"});
const x = await tools.call("Exec", {argv: ["/usr/bin/echo", "nested"]});
export const result = {content: f.data.content, stdout: x.data.stdout, ids: [f.receipt_id, x.receipt_id]};`)
		if !r.Output.Success || cd.ToolCalls.Count != 2 || len(cd.ToolCalls.ReceiptIDs) != 2 {
			t.Fatalf("%s", r.response)
		}
		var res struct {
			Content, Stdout string
			IDs             []string
		}
		_ = json.Unmarshal(cd.Result, &res)
		if res.Content != "inside the grant" || res.Stdout != "nested\n" {
			t.Errorf("result %s", cd.Result)
		}
		for _, id := range cd.ToolCalls.ReceiptIDs {
			rc := g.waitReceipt(t, id, 10*time.Second, func(rc receipt) bool { return rc.status() == "succeeded" })
			var parent struct {
				Parent *string `json:"parent_receipt_id"`
			}
			_ = json.Unmarshal([]byte(rc.raw), &parent)
			if parent.Parent == nil || *parent.Parent != r.ReceiptID {
				t.Errorf("nested receipt %s (%s) has parent %v, want the code.run receipt %s", id, rc.Tool, parent.Parent, r.ReceiptID)
			}
		}
	})
	t.Run("a nested call the policy denies is denied inside the code", func(t *testing.T) {
		r, cd := run(agentNarrow, `
const f = await tools.call("fs.read", {path: "`+work+`/in.txt"});
export const result = {success: f.success, code: f.error?.code, has: f.data !== null};`)
		if !r.Output.Success || string(cd.Result) != `{"success":false,"code":"permission_denied","has":false}` {
			t.Fatalf("result %s\n%s", cd.Result, r.response)
		}
		rc, _ := g.getReceipt(t, cd.ToolCalls.ReceiptIDs[0])
		if rc.Decision != "deny" || !strings.Contains(rc.raw, r.ReceiptID) {
			t.Errorf("denied nested receipt: %s", rc.raw)
		}
	})
	t.Run("tool-call cap stops the run", func(t *testing.T) {
		// TestCodeRunCapsKill checks the kill and the receipts.
		r, cd := run(agentFull, `
for (let i = 0; i < 52; i++) await tools.call("fs.read", {path: "`+work+`/in.txt"});
export const result = "ran on";`, "timeout_s", 120)
		if r.Output.Success || r.errCode() != "too_large" || cd.ToolCalls.Count != 50 || cd.ToolCalls.Refused != 1 || string(cd.Result) != "null" {
			t.Errorf("tool_calls %+v result %s: %s", cd.ToolCalls, cd.Result, r.response)
		}
	})
	t.Run("timeout kills it", func(t *testing.T) {
		start := time.Now()
		r, cd := run(agentFull, "while (true) {}", "timeout_s", 1)
		if r.errCode() != "timeout" || !cd.TimedOut || time.Since(start) > 5*time.Second {
			t.Errorf("%s (%s)", r.response, time.Since(start))
		}
	})
	t.Run("exception line", func(t *testing.T) {
		r, cd := run(agentFull, "const a = 1;\n\nthrow new Error('bad ' + a);")
		if r.Output.Success || cd.Exception == nil || cd.Exception.Line != 3 {
			t.Errorf("%s", r.response)
		}
	})
	t.Run("oversize code refused before start", func(t *testing.T) {
		r, _ := run(agentFull, "//"+strings.Repeat("x", 50<<10))
		if r.status != 413 || r.errCode() != "too_large" || r.Output.Error.Details["field"] != "code" {
			t.Errorf("%s", r.response)
		}
	})
}
