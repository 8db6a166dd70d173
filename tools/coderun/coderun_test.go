package coderun

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/backends/bwrap"
	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

func TestMain(m *testing.M) {
	process.MaybeRunHelper()
	// Planted in the gateway side's environment: the code must never see it.
	os.Setenv("PORTCULLIS_CODERUN_TEST_SECRET", "gw-secret-value")
	os.Exit(m.Run())
}

// denoPath finds the Deno the test command installed; missing Deno skips,
// or fails with PORTCULLIS_REQUIRE_DENO=1.
func denoPath(t testing.TB) string {
	t.Helper()
	for _, p := range []string{os.Getenv("PORTCULLIS_DENO"), "../../.tools/node_modules/@deno/linux-x64-glibc/deno", "../../.tools/node_modules/@deno/linux-arm64-glibc/deno"} {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			if fi, err := os.Stat(abs); err == nil && fi.Mode().IsRegular() {
				return abs
			}
		}
	}
	if os.Getenv("PORTCULLIS_REQUIRE_DENO") == "1" {
		t.Fatal("Deno required (PORTCULLIS_REQUIRE_DENO=1) but not found; set PORTCULLIS_DENO")
	}
	t.Skip("no Deno (set PORTCULLIS_DENO)")
	return ""
}

var (
	probeOnce sync.Once
	probeErr  error
)

// runners are the backends code.run is tested on: bwrap (when it works
// here; required with PORTCULLIS_REQUIRE_BWRAP=1) and the process fallback.
func runners(t *testing.T) map[string]backends.Runner {
	t.Helper()
	out := map[string]backends.Runner{"process": process.New(process.Options{})}
	probeOnce.Do(func() { probeErr = bwrap.New(bwrap.Options{}).Probe(context.Background()) })
	switch {
	case probeErr == nil:
		out["bwrap"] = bwrap.New(bwrap.Options{})
	case os.Getenv("PORTCULLIS_REQUIRE_BWRAP") == "1":
		t.Fatalf("bwrap required but unusable: %v", probeErr)
	default:
		t.Logf("bwrap unusable here, testing the process runner only: %v", probeErr)
	}
	return out
}

// eachRunner runs f, in parallel, as a subtest on every runner code.run is
// tested on (runners), with the Deno binary (denoPath).
func eachRunner(t *testing.T, f func(t *testing.T, r backends.Runner, deno string)) {
	t.Helper()
	t.Parallel()
	deno := denoPath(t)
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, r, deno)
		})
	}
}

// fakeDispatcher answers nested calls: fs.read of "ok" succeeds, anything
// named "Denied" is refused as the policy would.
type fakeDispatcher struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeDispatcher) Dispatch(_ context.Context, tool string, input json.RawMessage) (int, wire.ToolCallResponse) {
	f.mu.Lock()
	f.calls = append(f.calls, tool+" "+string(input))
	n := len(f.calls)
	f.mu.Unlock()
	id := "rcpt-" + string(rune('a'+n-1))
	if tool == "Denied" {
		return 403, wire.ToolCallResponse{ReceiptID: id, Decision: &wire.DecisionResult{Reasons: []string{"no"}},
			Output: wire.ToolOutput{Error: wire.Errorf(wire.CodePermissionDenied, "the policy denied this call")}}
	}
	return 200, wire.ToolCallResponse{ReceiptID: id, Decision: &wire.DecisionResult{Allow: true},
		Output: wire.ToolOutput{Success: true, Data: map[string]any{"echo": json.RawMessage(input)}}}
}

type env struct {
	work, ro, outside string
}

func newEnv(t *testing.T) env {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := env{work: filepath.Join(root, "work"), ro: filepath.Join(root, "ro"), outside: filepath.Join(root, "outside")}
	for _, d := range []string{e.work, e.ro, e.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.WriteFile(filepath.Join(e.ro, "in.txt"), []byte("inside"), 0o644))
	must(t, os.WriteFile(filepath.Join(e.outside, "secret.txt"), []byte("TOP SECRET"), 0o644))
	must(t, os.WriteFile(filepath.Join(e.outside, "secret.json"), []byte(`{"LEAK": "TOP SECRET"}`), 0o644))
	must(t, os.WriteFile(filepath.Join(e.outside, "secret.js"), []byte(`export default "LEAK";`), 0o644))
	must(t, os.WriteFile(filepath.Join(e.ro, "mod.json"), []byte(`{"granted": "module"}`), 0o644))
	must(t, os.Symlink(filepath.Join(e.outside, "secret.txt"), filepath.Join(e.ro, "leak.txt")))
	return e
}

// realTemp is the real path of the gateway's temporary directory, where
// run directories are made.
func realTemp(t *testing.T) string {
	t.Helper()
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	must(t, err)
	return tmp
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e env) decision() wire.Decision {
	return wire.Decision{Allow: true, FSGrants: []wire.FSGrant{{Path: e.work, Mode: "rw"}, {Path: e.ro, Mode: "r"}},
		Network: wire.Network{Posture: "off"}}
}

// exec prepares, enforces and runs code with a dispatcher.
func exec(t *testing.T, tool *Tool, d wire.Decision, disp tools.Dispatcher, in map[string]any) (tools.Result, Data) {
	t.Helper()
	b, _ := json.Marshal(in)
	c, err := tool.Prepare(context.Background(), b)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	scope, err := c.Enforce(context.Background(), d)
	if err != nil {
		t.Fatalf("Enforce: %v", err)
	}
	ctx := context.Background()
	if disp != nil {
		ctx = tools.WithDispatcher(ctx, disp)
	}
	res := c.Run(ctx, scope)
	data, _ := res.Output.Data.(Data)
	return res, data
}

// TestConfinement runs each check as real code on real Deno, on every
// runner available here.
func TestConfinement(t *testing.T) {
	t.Parallel()
	deno := denoPath(t)
	// A loopback server the code must not reach under posture off.
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("REACHED")) }), ReadHeaderTimeout: time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			tool := New(Options{Runner: r, Deno: deno, MaxToolCalls: 3})
			cases := []struct {
				name   string
				code   string
				ok     bool
				want   string // in output
				bwrap  bool   // only meaningful with an OS sandbox
				result string
			}{
				{name: "typescript runs", code: "const x: number = 6 * 7;\nconsole.log(`x=${x}`);\nexport const result = {x};", ok: true, want: "x=42", result: `{"x":42}`},
				{name: "javascript runs", code: "console.log('js', [1,2].map(n => n * 2).join(','))", ok: true, want: "js 2,4"},
				{name: "read inside a grant", code: `console.log(Deno.readTextFileSync("` + e.ro + `/in.txt"))`, ok: true, want: "inside"},
				{name: "write inside an rw grant", code: `Deno.writeTextFileSync("` + e.work + `/out.txt", "w"); console.log("wrote")`, ok: true, want: "wrote"},
				{name: "write to an r grant refused", code: `try { Deno.writeTextFileSync("` + e.ro + `/x.txt", "w") } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused NotCapable"},
				{name: "read outside refused", code: `try { console.log(Deno.readTextFileSync("` + e.outside + `/secret.txt")) } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused NotCapable"},
				{name: "read /etc refused", code: `try { Deno.readTextFileSync("/etc/hostname") } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused NotCapable"},
				{name: "symlink out of a grant contained", code: `try { console.log("LEAK", Deno.readTextFileSync("` + e.ro + `/leak.txt")) } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused", bwrap: true},
				{name: "subprocess refused", code: `try { new Deno.Command("/bin/echo", {args: ["RAN"]}).outputSync(); console.log("RAN") } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused NotCapable"},
				{name: "env refused", code: `try { console.log(Deno.env.get("PORTCULLIS_CODERUN_TEST_SECRET")) } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused NotCapable"},
				{name: "env not even inherited", code: `try { console.log(Deno.env.toObject()) } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused"},
				{name: "ffi refused", code: `try { Deno.dlopen("/lib/x86_64-linux-gnu/libc.so.6", {}); console.log("LOADED") } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused"},
				{name: "sys refused", code: `try { console.log(Deno.hostname()) } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused NotCapable"},
				{name: "network refused under off", code: `try { const r = await fetch("http://` + ln.Addr().String() + `/"); console.log(await r.text()) } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused NotCapable"},
				{name: "remote import refused", code: `try { await import("https://deno.land/std/path/mod.ts") } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused"},
				// Deno loads local modules without read permission: the
				// import map sends every file: URL outside the grants and
				// the run directory nowhere.
				{name: "json import outside refused", code: `try { const m = await import("` + e.outside + `/secret.json", {with: {type: "json"}}); console.log(JSON.stringify(m.default)) } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused"},
				{name: "relative import outside refused", code: `try { const m = await import("../` + strings.TrimPrefix(e.outside, realTemp(t)+"/") + `/secret.json", {with: {type: "json"}}); console.log(JSON.stringify(m.default)) } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused"},
				{name: "script import outside refused", code: `try { const m = await import("file://` + e.outside + `/secret.js"); console.log(m.default) } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused"},
				{name: "import outside through data refused", code: `try { const m = await import("data:text/javascript,export {default} from 'file://` + e.outside + `/secret.json' with {type: 'json'}"); console.log(JSON.stringify(m.default)) } catch (err) { console.log("refused", err.name) }`, ok: true, want: "refused"},
				{name: "worker outside refused", code: `await new Promise((resolve) => { try { const w = new Worker("file://` + e.outside + `/secret.js", {type: "module"}); w.onerror = (ev) => { ev.preventDefault(); console.log("refused"); resolve(); }; setTimeout(() => { console.log("refused late"); w.terminate(); resolve(); }, 5000) } catch (err) { console.log("refused", err.name); resolve() } })`, ok: true, want: "refused"},
				{name: "import outside from a worker refused", code: `Deno.writeTextFileSync("` + e.work + `/w.js", "try { const m = await import('file://` + e.outside + `/secret.json', {with: {type: 'json'}}); postMessage(JSON.stringify(m.default)) } catch (err) { postMessage('refused ' + err.name) }"); const w = new Worker("file://` + e.work + `/w.js", {type: "module"}); console.log(await new Promise((resolve) => { w.onmessage = (ev) => { w.terminate(); resolve(ev.data) }; w.onerror = (ev) => { ev.preventDefault(); resolve("refused error") } }))`, ok: true, want: "refused"},
				{name: "json import inside a grant", code: `const m = await import("` + e.ro + `/mod.json", {with: {type: "json"}}); console.log(m.default.granted)`, ok: true, want: "module"},
				{name: "data import is harmless", code: `const m = await import("data:text/javascript,export default 7"); console.log("data", m.default)`, ok: true, want: "data 7"},
				{name: "exception names the line", code: "const a = 1;\nconst b = 2;\nthrow new Error(`boom ${a + b}`);", ok: false},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					if tc.bwrap && name != "bwrap" {
						t.Skip("Deno follows symlinks out of an allowed path (deno pitfall); only the OS sandbox contains it")
					}
					lang := "typescript"
					if strings.HasPrefix(tc.name, "javascript") {
						lang = "javascript"
					}
					res, data := exec(t, tool, e.decision(), &fakeDispatcher{}, map[string]any{"code": tc.code, "language": lang})
					if res.Output.Success != tc.ok {
						t.Fatalf("success %v, want %v: %+v\nstdout %q\nstderr %q", res.Output.Success, tc.ok, res.Output.Error, data.Output, data.Stderr)
					}
					if !strings.Contains(data.Output, tc.want) || strings.Contains(data.Output, "LEAK") || strings.Contains(data.Output, "REACHED") || strings.Contains(data.Output, "gw-secret-value") {
						t.Errorf("output %q, want %q (stderr %q)", data.Output, tc.want, data.Stderr)
					}
					if tc.result != "" && string(data.Result) != tc.result {
						t.Errorf("result %s, want %s", data.Result, tc.result)
					}
					if res.Backend != name {
						t.Errorf("backend %s", res.Backend)
					}
					if tc.name == "exception names the line" {
						if data.Exception == nil || data.Exception.Line != 3 || !strings.Contains(data.Exception.Message, "boom 3") || res.Status != wire.StatusFailed {
							t.Errorf("exception %+v status %s stderr %q", data.Exception, res.Status, data.Stderr)
						}
						if strings.Contains(data.Stderr, os.TempDir()+"/portcullis-coderun") {
							t.Errorf("stderr names the gateway's run directory: %q", data.Stderr)
						}
					}
				})
			}
			t.Run("outside unchanged", func(t *testing.T) {
				ents, _ := os.ReadDir(e.outside)
				if len(ents) != 3 {
					t.Errorf("outside has %d entries, want its 3 files", len(ents))
				}
			})
		})
	}
}

// TestBridge: nested calls go to the dispatcher with their input, answers
// (allowed or denied) come back to the code, receipts are listed, and
// denied calls are counted. The budget is TestCapsStopTheRun's.
func TestBridge(t *testing.T) {
	eachRunner(t, func(t *testing.T, r backends.Runner, deno string) {
		e := newEnv(t)
		disp := &fakeDispatcher{}
		tool := New(Options{Runner: r, Deno: deno, MaxToolCalls: 4})
		res, data := exec(t, tool, e.decision(), disp, map[string]any{"code": `
const a = await tools.call("fs.read", {path: "/x"});
const d = await tools.call("Denied", {});
const [b, c] = await Promise.all([tools.call("fs.read", {n: 2}), tools.call("fs.read", {n: 3})]);
console.log(a.success, a.receipt_id, a.data.echo.path, d.success, d.error.code, d.status);
export const result = {ok: [b, c].filter(x => x.success).length};`})
		if !res.Output.Success {
			t.Fatalf("%+v\n%s\n%s", res.Output, data.Output, data.Stderr)
		}
		if got := strings.TrimSpace(data.Output); got != "true rcpt-a /x false permission_denied 403" {
			t.Errorf("output %q", got)
		}
		if string(data.Result) != `{"ok":2}` {
			t.Errorf("result %s", data.Result)
		}
		if data.ToolCalls.Count != 4 || data.ToolCalls.Denied != 1 || data.ToolCalls.Refused != 0 || len(data.ToolCalls.ReceiptIDs) != 4 || len(disp.calls) != 4 {
			t.Errorf("tool_calls %+v, dispatched %v", data.ToolCalls, disp.calls)
		}
	})
}

func TestTimeoutKillsIt(t *testing.T) {
	eachRunner(t, func(t *testing.T, r backends.Runner, deno string) {
		e := newEnv(t)
		start := time.Now()
		res, data := exec(t, New(Options{Runner: r, Deno: deno}), e.decision(), nil, map[string]any{"code": "console.log('spin'); while (true) {}", "timeout_s": 1})
		if res.Status != wire.StatusTimedOut || res.Output.Error == nil || res.Output.Error.Code != wire.CodeTimeout || !data.TimedOut {
			t.Fatalf("status %s error %+v", res.Status, res.Output.Error)
		}
		if d := time.Since(start); d > 8*time.Second {
			t.Errorf("took %s, want about 1 s", d)
		}
	})
}

func TestInput(t *testing.T) {
	t.Parallel()
	tool := New(Options{Runner: process.New(process.Options{}), Deno: "/nonexistent", MaxCodeBytes: 100})
	for _, tc := range []struct {
		name, in string
		code     wire.Code
		field    string
	}{
		{"ok", `{"code":"1"}`, "", ""},
		{"oversize code refused before start", `{"code":"` + strings.Repeat("x", 101) + `"}`, wire.CodeTooLarge, "code"},
		{"missing code", `{}`, wire.CodeInvalidInput, "code"},
		{"empty code", `{"code":""}`, wire.CodeInvalidInput, "code"},
		{"language", `{"code":"1","language":"python"}`, wire.CodeInvalidInput, "language"},
		{"timeout", `{"code":"1","timeout_s":601}`, wire.CodeInvalidInput, "timeout_s"},
		{"output cap", `{"code":"1","max_output_bytes":10}`, wire.CodeInvalidInput, "max_output_bytes"},
		{"unknown", `{"code":"1","argv":[]}`, wire.CodeInvalidInput, "argv"},
		{"duplicate", `{"code":"1","code":"2"}`, wire.CodeInvalidInput, "code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tool.Prepare(context.Background(), json.RawMessage(tc.in))
			var we *wire.Error
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.As(err, &we) || we.Code != tc.code || we.Details["field"] != tc.field {
				t.Fatalf("got %v, want %s on %s", err, tc.code, tc.field)
			}
		})
	}
}

func TestEnforceAndArgv(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tool := New(Options{Runner: process.New(process.Options{}), Deno: "/x/deno"})
	c, err := tool.Prepare(context.Background(), json.RawMessage(`{"code":"1"}`))
	must(t, err)
	d := e.decision()
	d.Network = wire.Network{Posture: "allowlist", Allow: []string{"api.example.com:443", "10.0.0.0/8", "*.example.org"}}
	d.Limits.MemoryBytes = 256 << 20
	scope, err := c.Enforce(context.Background(), d)
	must(t, err)
	argv := strings.Join(c.(*call).argv("/x/deno", "/run", "/run/req", "/run/resp", scope), " ")
	for _, want := range []string{"--no-remote", "--no-npm", "--no-config", "--deny-import", "--deny-run", "--deny-env", "--deny-ffi", "--deny-sys",
		"--allow-read=" + e.work + "," + e.ro + ",/run/resp", "--allow-write=" + e.work + ",/run/req",
		"--allow-net=api.example.com:443 ", "--max-old-space-size=256", "--deny-net=169.254.169.254",
		// The IPv6 forms of the metadata address Deno can match (it takes no
		// CIDRs): NAT64 and IPv4-compatible.
		"[64:ff9b::a9fe:a9fe]", "[::a9fe:a9fe]", "[64:ff9b::a9fe:aa02]", "[::a9fe:aa02]"} {
		if !strings.Contains(argv, want) {
			t.Errorf("argv lacks %q:\n%s", want, argv)
		}
	}
	// A comma in a granted path would split Deno's list: refused.
	comma := filepath.Join(e.work, "a,b")
	must(t, os.Mkdir(comma, 0o755))
	d.FSGrants = []wire.FSGrant{{Path: comma, Mode: "r"}}
	if _, err := c.Enforce(context.Background(), d); err == nil {
		t.Error("a grant with a comma was accepted")
	}
	d.FSGrants, d.Network = nil, wire.Network{Posture: "allowlist", Allow: []string{"bad host"}}
	if _, err := c.Enforce(context.Background(), d); err == nil {
		t.Error("a malformed allowlist was accepted")
	}
	// Posture off: no --allow-net at all.
	d.Network = wire.Network{Posture: "off"}
	scope, err = c.Enforce(context.Background(), d)
	must(t, err)
	if argv := strings.Join(c.(*call).argv("/x/deno", "/run", "/run/req", "/run/resp", scope), " "); strings.Contains(argv, "--allow-net") {
		t.Errorf("posture off grants network: %s", argv)
	}
}

func TestNoDeno(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res, _ := exec(t, New(Options{Runner: process.New(process.Options{})}), e.decision(), nil, map[string]any{"code": "1"})
	if res.Output.Error == nil || res.Output.Error.Code != wire.CodeBackendUnavailable {
		t.Fatalf("%+v", res.Output)
	}
}

// rlimitDataRunner is a runner that enforces memory with RLIMIT_DATA even
// where a memory cgroup exists, to test that mechanism here too.
type rlimitDataRunner struct{ backends.Runner }

func (rlimitDataRunner) MemoryLimit() string { return wire.MemoryLimitRlimitData }

// TestShippedLimits: Deno runs under the shipped default limits (512 MiB
// memory_bytes, 256 files, 64 MiB files) with either memory mechanism, on
// every runner, and the bound still holds: an ArrayBuffer (outside the V8
// heap, which --max-old-space-size does not cover) far past it is stopped.
func TestShippedLimits(t *testing.T) {
	t.Parallel()
	deno := denoPath(t)
	shipped := wire.Limits{TimeoutS: 60, MemoryBytes: 512 << 20, FsizeBytes: 64 << 20, Nofile: 256, MaxOutputBytes: 262144}
	for name, r := range runners(t) {
		for _, rr := range []backends.Runner{r, rlimitDataRunner{r}} {
			mech := backends.MemoryLimitOf(rr)
			t.Run(name+"/"+mech, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				d := e.decision()
				d.Limits = shipped
				tool := New(Options{Runner: rr, Deno: deno})
				res, data := exec(t, tool, d, nil, map[string]any{"code": "console.log('ok')"})
				if res.Status != wire.StatusSucceeded || data.Output != "ok\n" {
					t.Fatalf("console.log under the shipped limits: status %s error %+v stderr %.300q", res.Status, res.Output.Error, data.Stderr)
				}
				if name != "process" {
					return // the bound is the same on bwrap; the kill is slow (reclaim) under a cgroup
				}
				res, data = exec(t, tool, d, nil, map[string]any{"code": "const b = new Uint8Array(3 * 1024 * 1024 * 1024); b.fill(1); console.log('allocated', b.length)"})
				if res.Status == wire.StatusSucceeded || strings.Contains(data.Output, "allocated") {
					t.Errorf("a 3 GiB ArrayBuffer under a 512 MiB limit: status %s stdout %q", res.Status, data.Output)
				}
			})
		}
	}
}

// TestCPULimit: Deno's threads all count toward RLIMIT_CPU, so a busy loop
// can reach cpu_seconds before the wall-clock timeout. That ends as a
// timeout on cpu_seconds with timed_out set, on every runner, not as a
// failure with exit code -1 and nothing said (seen on a loaded CI with
// cpu_seconds defaulting to a 1 s timeout).
func TestCPULimit(t *testing.T) {
	t.Parallel()
	deno := denoPath(t)
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			d := e.decision()
			d.Limits.CPUSeconds = 1
			res, data := exec(t, New(Options{Runner: r, Deno: deno}), d, nil, map[string]any{"code": "while (true) {}", "timeout_s": 60})
			if res.Status != wire.StatusTimedOut || res.Output.Error == nil || res.Output.Error.Code != wire.CodeTimeout || res.Output.Error.Details["field"] != "cpu_seconds" {
				t.Fatalf("status %s error %+v, want timed_out with timeout on cpu_seconds (stderr %.300q)", res.Status, res.Output.Error, data.Stderr)
			}
			if !data.TimedOut || string(data.Result) != "null" || data.Exception != nil || data.DurationMS >= 30000 {
				t.Errorf("data %+v", data)
			}
		})
	}
}
