package tests

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAcceptance runs the contract's acceptance list against a real gateway
// process, once per evidence store. Each store gets its own deployment; the
// cases within a store share one gateway and run in parallel.
func TestAcceptance(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		fn   func(*testing.T, *gateway)
	}{
		{"ArgvValidation", testArgvValidation},
		{"InputValidation", testInputValidation},
		{"NoShell", testNoShell},
		{"PermissionDenied", testPermissionDenied},
		{"FSDenied", testFSDenied},
		{"Cwd", testCwd},
		{"Env", testEnv},
		{"Timeout", testTimeout},
		{"Detached", testDetached},
		{"OutputTruncation", testOutputTruncation},
		{"Unauthenticated", testUnauthenticated},
		{"Roles", testRoles},
		{"ToolsList", testToolsList},
		{"ReceiptQuery", testReceiptQuery},
		{"Concurrent", testConcurrent},
		{"ReceiptExport", testReceiptExport},
		{"DryRun", testDryRun},
		{"BadHTTPInput", testBadHTTPInput},
		{"OpenAPI", testOpenAPI},
	}
	variants := []struct {
		name    string
		store   store
		backend string
	}{
		{"sqlite", storeSQLite, "process"},
		{"postgres", storePostgres, "process"},
		{"sqlite-bwrap", storeSQLite, "bwrap"},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			d := newDeploymentWith(t, v.store, v.backend)
			g := startVariant(t, d)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.fn(t, g)
				})
			}
		})
	}
}

// startVariant starts d's gateway. A bwrap deployment that cannot start
// (no bubblewrap, or a build without the backend) skips, unless
// PORTCULLIS_REQUIRE_BWRAP=1 makes the sandbox mandatory.
func startVariant(t *testing.T, d *deployment) *gateway {
	t.Helper()
	if d.backend != "bwrap" {
		return d.start(t)
	}
	required := os.Getenv("PORTCULLIS_REQUIRE_BWRAP") == "1"
	if _, err := exec.LookPath("bwrap"); err != nil {
		if required {
			t.Fatalf("bubblewrap required (PORTCULLIS_REQUIRE_BWRAP=1) but not found: %v", err)
		}
		t.Skipf("bubblewrap not installed: %v", err)
	}
	g, err := tryStartProcess(t, d, startOptions{})
	if err != nil {
		if required {
			t.Fatalf("gateway with sandbox.backend bwrap (PORTCULLIS_REQUIRE_BWRAP=1): %v", err)
		}
		t.Skipf("gateway cannot run sandbox.backend bwrap here: %v", err)
	}
	return g
}

// execCall builds a tool-call body for Exec.
func execCall(input map[string]any, callID, sessionID string) map[string]any {
	b := map[string]any{"tool": "Exec", "input": input}
	if callID != "" {
		b["call_id"] = callID
	}
	if sessionID != "" {
		b["session_id"] = sessionID
	}
	return b
}

// wantStatus fails unless the answer has the HTTP status and error code.
func wantStatus(t testing.TB, res *toolCallResult, status int, code string) {
	t.Helper()
	if res.status != status || res.errCode() != code {
		t.Fatalf("got HTTP %d code %q, want HTTP %d code %q\n%s", res.status, res.errCode(), status, code, res.response)
	}
}

func testArgvValidation(t *testing.T, g *gateway) {
	d := g.dep
	cases := []struct {
		name  string
		input string // raw JSON of "input"
	}{
		{"argv not a list", `{"argv": "/bin/echo hi"}`},
		{"argv element not a string", `{"argv": ["/bin/echo", 5]}`},
		{"argv element null", `{"argv": ["/bin/echo", null]}`},
		{"argv empty list", `{"argv": []}`},
		{"argv null", `{"argv": null}`},
		{"argv missing", `{}`},
		{"argv empty string element", `{"argv": ["/bin/echo", ""]}`},
		{"argv0 empty", `{"argv": [""]}`},
		{"argv0 relative", `{"argv": ["echo", "hi"]}`},
		{"argv0 dot relative", `{"argv": ["./echo"]}`},
		{"argv0 missing file", mustJSON(t, map[string]any{"argv": []string{filepath.Join(d.scratch, "no-such-program")}})},
		{"argv0 is a directory", `{"argv": ["/usr/bin"]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			callID := "call_" + randHex(t, 6)
			body := `{"tool": "Exec", "call_id": "` + callID + `", "input": ` + c.input + `}`
			res := g.call(t, d.keys[agentFull], body)
			wantStatus(t, res, http.StatusBadRequest, "invalid_input")
			field, _ := res.Output.Error.Details["field"].(string)
			if !strings.Contains(field, "argv") {
				t.Errorf("details.field = %q, want it to name argv\n%s", field, res.response)
			}
			if res.CallID != callID {
				t.Errorf("call_id echoed %q, want %q", res.CallID, callID)
			}
			g.checkReceipt(t, res, expectReceipt{
				principal: agentFull, decision: "invalid",
				statuses: []string{"error", "failed"}, errorCode: "invalid_input",
				secrets: []string{d.secret},
			}, callID, "")
		})
	}
}

func testInputValidation(t *testing.T, g *gateway) {
	d := g.dep
	cases := []struct {
		name  string
		input string
		field string // details.field must contain this
	}{
		{"unknown input field", `{"argv": ["/bin/echo"], "bogus_field": 1}`, "bogus_field"},
		{"timeout_s zero", `{"argv": ["/bin/echo"], "timeout_s": 0}`, "timeout_s"},
		{"timeout_s too big", `{"argv": ["/bin/echo"], "timeout_s": 601}`, "timeout_s"},
		{"timeout_s string", `{"argv": ["/bin/echo"], "timeout_s": "1"}`, "timeout_s"},
		{"timeout_s fraction", `{"argv": ["/bin/echo"], "timeout_s": 1.5}`, "timeout_s"},
		{"max_output_bytes too small", `{"argv": ["/bin/echo"], "max_output_bytes": 1023}`, "max_output_bytes"},
		{"max_output_bytes too big", `{"argv": ["/bin/echo"], "max_output_bytes": 4194305}`, "max_output_bytes"},
		{"cwd relative", `{"argv": ["/bin/echo"], "cwd": "tmp"}`, "cwd"},
		{"env not an object", `{"argv": ["/bin/echo"], "env": ["A=1"]}`, "env"},
		{"env value not a string", `{"argv": ["/bin/echo"], "env": {"A": 1}}`, "env"},
		{"env key starts with underscore", `{"argv": ["/bin/echo"], "env": {"_X": "1"}}`, "env"},
		{"input not an object", `"/bin/echo hi"`, "input"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res := g.call(t, d.keys[agentFull], `{"tool": "Exec", "input": `+c.input+`}`)
			wantStatus(t, res, http.StatusBadRequest, "invalid_input")
			field, _ := res.Output.Error.Details["field"].(string)
			if !strings.Contains(field, c.field) {
				t.Errorf("details.field = %q, want it to name %q\n%s", field, c.field, res.response)
			}
			g.checkReceipt(t, res, expectReceipt{
				principal: agentFull, decision: "invalid",
				statuses: []string{"error", "failed"}, errorCode: "invalid_input",
				secrets: []string{d.secret},
			}, "", "")
		})
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func testNoShell(t *testing.T, g *gateway) {
	d := g.dep
	cases := []struct {
		name string
		argv []string
		want string
	}{
		{"semicolon", []string{"/bin/echo", "; pwd"}, "; pwd\n"},
		{"metacharacters", []string{"/bin/echo", "$(id -u)", "`whoami`", "*", "$HOME", "a|b", "&&", ">x"},
			"$(id -u) `whoami` * $HOME a|b && >x\n"},
		{"usr path", []string{"/usr/bin/printf", "%s|%s", "a b", "c"}, "a b|c"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			callID, session := "call_"+randHex(t, 6), "run-"+randHex(t, 6)
			res := g.call(t, d.keys[agentFull], execCall(map[string]any{"argv": c.argv}, callID, session))
			wantStatus(t, res, http.StatusOK, "")
			if !res.Output.Success {
				t.Fatalf("success false\n%s", res.response)
			}
			x := res.exec(t)
			if x.Stdout != c.want {
				t.Errorf("stdout = %q, want %q (no shell)", x.Stdout, c.want)
			}
			if x.ExitCode == nil || *x.ExitCode != 0 || x.TimedOut || x.Signal != nil || x.DurationMS == nil {
				t.Errorf("exit_code %s, timed_out %v, signal %v, duration_ms set %v: want 0, false, null, true\n%s",
					intp(x.ExitCode), x.TimedOut, x.Signal, x.DurationMS != nil, res.response)
			}
			if got := res.Output.Metadata["backend"]; got != d.backend {
				t.Errorf("metadata.backend = %v, want %s", got, d.backend)
			}
			if res.Decision == nil || !res.Decision.Allow || res.Decision.PolicyRevision == "" {
				t.Errorf("decision = %+v, want allow with a policy_revision", res.Decision)
			}
			if res.CallID != callID {
				t.Errorf("call_id = %q, want %q", res.CallID, callID)
			}
			rc := g.checkReceipt(t, res, expectReceipt{
				principal: agentFull, decision: "allow", statuses: []string{"succeeded"},
				secrets: []string{d.secret},
			}, callID, session)
			if rc.Outcome.ExitCode == nil || *rc.Outcome.ExitCode != 0 {
				t.Errorf("receipt outcome.exit_code = %s, want 0\n%s", intp(rc.Outcome.ExitCode), rc.raw)
			}
			if rc.Outcome.Backend != d.backend {
				t.Errorf("receipt outcome.backend = %q, want %s", rc.Outcome.Backend, d.backend)
			}
		})
	}
	t.Run("non-zero exit is 200 with status failed", func(t *testing.T) {
		t.Parallel()
		res := g.call(t, d.keys[agentFull], execCall(map[string]any{"argv": []string{"/bin/sh", "-c", "echo oops >&2; exit 3"}}, "", ""))
		wantStatus(t, res, http.StatusOK, "")
		x := res.exec(t)
		if x.ExitCode == nil || *x.ExitCode != 3 || x.Stderr != "oops\n" {
			t.Errorf("exit_code=%s stderr=%q, want 3 and \"oops\\n\"", intp(x.ExitCode), tail(x.Stderr, 300))
		}
		rc := g.checkReceipt(t, res, expectReceipt{
			principal: agentFull, decision: "allow", statuses: []string{"failed"}, secrets: []string{d.secret},
		}, "", "")
		if rc.Outcome.ExitCode == nil || *rc.Outcome.ExitCode != 3 {
			t.Errorf("receipt outcome.exit_code = %s, want 3", intp(rc.Outcome.ExitCode))
		}
	})
}

func testPermissionDenied(t *testing.T, g *gateway) {
	d := g.dep
	res := g.call(t, d.keys[agentNoExec], execCall(map[string]any{"argv": []string{"/bin/echo", "hi"}}, "call_deny", ""))
	wantStatus(t, res, http.StatusForbidden, "permission_denied")
	if res.Decision == nil || res.Decision.Allow {
		t.Errorf("decision = %+v, want allow false", res.Decision)
	} else if len(res.Decision.Reasons) == 0 || !strings.Contains(strings.Join(res.Decision.Reasons, " "), "no grant") {
		t.Errorf("decision.reasons = %q, want the policy's reason", res.Decision.Reasons)
	}
	if string(res.Output.Data) != "null" {
		t.Errorf("output.data = %s, want null on failure", res.Output.Data)
	}
	rc := g.checkReceipt(t, res, expectReceipt{
		principal: agentNoExec, decision: "deny", statuses: []string{"error", "failed"},
		errorCode: "permission_denied", secrets: []string{d.secret},
	}, "call_deny", "")
	if len(rc.Reasons) == 0 {
		t.Errorf("receipt reasons empty, want the policy's reasons\n%s", rc.raw)
	}
}

func testFSDenied(t *testing.T, g *gateway) {
	d := g.dep
	t.Run("argv0 outside grants", func(t *testing.T) {
		t.Parallel()
		res := g.call(t, d.keys[agentNarrow], execCall(map[string]any{"argv": []string{"/usr/bin/echo", "hi"}}, "", ""))
		wantStatus(t, res, http.StatusForbidden, "fs_denied")
		g.checkReceipt(t, res, expectReceipt{
			principal: agentNarrow, decision: "deny", statuses: []string{"error", "failed"},
			errorCode: "fs_denied", secrets: []string{d.secret},
		}, "", "")
	})
	t.Run("argv0 symlink out of grants", func(t *testing.T) {
		t.Parallel()
		// A link inside the grant pointing outside it: the real path decides.
		link := filepath.Join(d.narrow, "echo-link-"+randHex(t, 4))
		if err := os.Symlink("/usr/bin/echo", link); err != nil {
			t.Fatal(err)
		}
		res := g.call(t, d.keys[agentNarrow], execCall(map[string]any{"argv": []string{link, "hi"}}, "", ""))
		if res.status != http.StatusForbidden || (res.errCode() != "fs_denied" && res.errCode() != "sandbox_violation") {
			t.Fatalf("got HTTP %d %q, want 403 fs_denied or sandbox_violation\n%s", res.status, res.errCode(), res.response)
		}
	})
	t.Run("argv0 inside grants runs", func(t *testing.T) {
		t.Parallel()
		// Positive control: the narrow agent can run a program inside its grant.
		prog := filepath.Join(d.narrow, "echo-"+randHex(t, 4))
		b, err := os.ReadFile("/usr/bin/echo")
		if err != nil {
			t.Fatal(err)
		}
		writeExecutable(t, prog, b)
		res := g.call(t, d.keys[agentNarrow], execCall(map[string]any{"argv": []string{prog, "inside"}}, "", ""))
		wantStatus(t, res, http.StatusOK, "")
		if x := res.exec(t); x.Stdout != "inside\n" {
			t.Errorf("stdout = %q, want \"inside\\n\"", x.Stdout)
		}
	})
}

func testCwd(t *testing.T, g *gateway) {
	d := g.dep
	t.Run("granted", func(t *testing.T) {
		t.Parallel()
		res := g.call(t, d.keys[agentFull], execCall(map[string]any{"argv": []string{"/bin/pwd"}, "cwd": d.scratch}, "", ""))
		wantStatus(t, res, http.StatusOK, "")
		if x := res.exec(t); x.Stdout != d.scratch+"\n" {
			t.Errorf("pwd = %q, want %q", x.Stdout, d.scratch+"\n")
		}
	})
	t.Run("outside grants", func(t *testing.T) {
		t.Parallel()
		res := g.call(t, d.keys[agentFull], execCall(map[string]any{"argv": []string{"/bin/pwd"}, "cwd": "/etc"}, "", ""))
		wantStatus(t, res, http.StatusForbidden, "fs_denied")
		g.checkReceipt(t, res, expectReceipt{
			principal: agentFull, decision: "deny", statuses: []string{"error", "failed"},
			errorCode: "fs_denied", secrets: []string{d.secret},
		}, "", "")
	})
}

func testEnv(t *testing.T, g *gateway) {
	d := g.dep
	callerVal := "caller-" + randHex(t, 8)
	res := g.call(t, d.keys[agentFull], execCall(map[string]any{
		"argv": []string{"/usr/bin/env"},
		"env":  map[string]string{"E2E_CALLER": callerVal},
	}, "call_env", ""))
	wantStatus(t, res, http.StatusOK, "")
	x := res.exec(t)
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(x.Stdout), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	want := map[string]string{
		"GOFLAGS":    "-mod=mod", // env.pass, from the gateway's environment
		"CI":         "1",        // env.set
		"E2E_CALLER": callerVal,  // the caller's env
		"PATH":       "/usr/local/bin:/usr/bin:/bin",
		"LANG":       "C.UTF-8",
		"LC_ALL":     "C.UTF-8",
		"TERM":       "dumb",
		"SHELL":      "/bin/sh",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("child env %s = %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env["ANTHROPIC_API_KEY"]; ok {
		t.Errorf("ANTHROPIC_API_KEY reached the child although secret-shaped names never pass")
	}
	if _, ok := env["E2E_GATEWAY_ONLY"]; ok {
		t.Errorf("the gateway's own environment leaked into the child (E2E_GATEWAY_ONLY)")
	}
	for k := range env {
		if strings.HasPrefix(k, "PORTCULLIS_") {
			t.Errorf("gateway variable %s leaked into the child", k)
		}
	}
	if strings.Contains(string(res.body), d.secret) {
		t.Errorf("the secret value appears in the tool-call answer")
	}
	rc := g.checkReceipt(t, res, expectReceipt{
		principal: agentFull, decision: "allow", statuses: []string{"succeeded"},
		secrets: []string{d.secret, callerVal},
	}, "call_env", "")
	var args struct {
		Env map[string]string `json:"env"`
	}
	if err := json.Unmarshal(rc.Args, &args); err != nil {
		t.Fatalf("receipt args: %v\n%s", err, rc.raw)
	}
	var scope struct {
		Scope struct {
			EnvNames []string `json:"env_names"`
		} `json:"scope"`
	}
	if err := json.Unmarshal([]byte(rc.raw), &scope); err != nil {
		t.Fatalf("receipt scope: %v", err)
	}
	names := strings.Join(scope.Scope.EnvNames, ",")
	for _, n := range []string{"GOFLAGS", "CI", "E2E_CALLER"} {
		if !strings.Contains(","+names+",", ","+n+",") {
			t.Errorf("receipt scope.env_names = %v, want it to include %s", scope.Scope.EnvNames, n)
		}
	}
	if strings.Contains(names, "ANTHROPIC_API_KEY") {
		t.Errorf("receipt scope.env_names = %v records ANTHROPIC_API_KEY as given", scope.Scope.EnvNames)
	}
	if args.Env["E2E_CALLER"] != "[REDACTED]" {
		t.Errorf("receipt args.env.E2E_CALLER = %q, want [REDACTED]", args.Env["E2E_CALLER"])
	}
	if strings.Contains(g.stderr.String(), d.secret) {
		t.Errorf("the secret value appears in the gateway's logs")
	}
}

// wantRan fails unless the tool ran (HTTP 200); a run that timed out may
// carry the error code "timeout", any other run no error.
func wantRan(t testing.TB, res *toolCallResult, timedOut bool) {
	t.Helper()
	if res.status != http.StatusOK || (res.errCode() != "" && !(timedOut && res.errCode() == "timeout")) {
		t.Fatalf("got HTTP %d code %q, want HTTP 200 (tool ran, timed out: %v)\n%s", res.status, res.errCode(), timedOut, res.response)
	}
}

func testTimeout(t *testing.T, g *gateway) {
	d := g.dep
	cases := []struct {
		name string
		argv func(marker string) []string
	}{
		{"sleep", func(m string) []string { return []string{"/bin/sleep", m} }},
		{"background children", func(m string) []string {
			return []string{"/bin/sh", "-c", "/bin/sleep " + m + " & /bin/sleep " + m + " & /bin/sleep " + m}
		}},
		{"ignores SIGTERM", func(m string) []string {
			return []string{"/bin/sh", "-c", "trap '' TERM; /bin/sleep " + m + "; /bin/sleep " + m}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			marker := sleepMarker(t, 10)
			t0 := time.Now()
			res := g.call(t, d.keys[agentFull], execCall(map[string]any{"argv": c.argv(marker), "timeout_s": 1}, "", ""))
			elapsed := time.Since(t0)
			wantRan(t, res, true)
			x := res.exec(t)
			if !x.TimedOut {
				t.Errorf("timed_out false, want true\n%s", res.response)
			}
			if elapsed >= 5*time.Second {
				t.Errorf("answered after %s, want < 5s (timeout 1 s + 1 s grace)", elapsed)
			}
			if left := waitNoProcs(marker, time.Second); len(left) > 0 {
				t.Errorf("processes left behind after the timeout: pids %v (cmdline contains %s)", left, marker)
			}
			g.checkReceipt(t, res, expectReceipt{
				principal: agentFull, decision: "allow", statuses: []string{"timed_out"}, secrets: []string{d.secret},
			}, "", "")
		})
	}
}

// testDetached checks that a call leaves nothing running once answered, even
// when its program detaches a child into a new session or double-forks.
func testDetached(t *testing.T, g *gateway) {
	d := g.dep
	cases := []struct {
		name string
		argv func(marker string) []string
	}{
		{"setsid", func(m string) []string { return []string{"/usr/bin/setsid", "/bin/sleep", m} }},
		{"double fork", func(m string) []string {
			return []string{"/bin/sh", "-c", "( /bin/sleep " + m + " >/dev/null 2>&1 & ) ; exit 0"}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			marker := sleepMarker(t, 20)
			res := g.call(t, d.keys[agentFull], execCall(map[string]any{"argv": c.argv(marker), "timeout_s": 5}, "", ""))
			wantRan(t, res, true)
			if left := waitNoProcs(marker, 7*time.Second); len(left) > 0 {
				t.Errorf("a detached child outlived its call: pids %v (cmdline contains %s)\n%s", left, marker, res.response)
			}
		})
	}
}

func testOutputTruncation(t *testing.T, g *gateway) {
	d := g.dep
	cases := []struct {
		name     string
		input    map[string]any
		timedOut bool
	}{
		{"1 MiB of NUL bytes", map[string]any{"argv": []string{"/usr/bin/head", "-c", "1048576", "/dev/zero"}, "max_output_bytes": 1024}, false},
		{"1 MiB of text", map[string]any{"argv": []string{"/bin/sh", "-c", "/usr/bin/yes | /usr/bin/head -c 1048576"}, "max_output_bytes": 1024}, false},
		{"endless output until timeout", map[string]any{"argv": []string{"/usr/bin/yes", "portcullis"}, "max_output_bytes": 1024, "timeout_s": 1}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res := g.call(t, d.keys[agentFull], execCall(c.input, "", ""))
			wantRan(t, res, c.timedOut)
			x := res.exec(t)
			if len(x.Stdout) > 1024 {
				t.Errorf("len(stdout) = %d bytes, want ≤ 1024", len(x.Stdout))
			}
			if len(x.Stdout) == 0 {
				t.Errorf("stdout empty, want the first bytes of the output")
			}
			if !x.StdoutTruncated {
				t.Errorf("stdout_truncated false, want true")
			}
			if x.StderrTruncated {
				t.Errorf("stderr_truncated true with no stderr output")
			}
			if x.TimedOut != c.timedOut {
				t.Errorf("timed_out = %v, want %v", x.TimedOut, c.timedOut)
			}
			if !c.timedOut && (x.ExitCode == nil || *x.ExitCode != 0) {
				t.Errorf("exit_code = %s, want 0", intp(x.ExitCode))
			}
			if len(res.body) > 64*1024 {
				t.Errorf("answer is %d bytes for max_output_bytes 1024", len(res.body))
			}
			status := "succeeded"
			if c.timedOut {
				status = "timed_out"
			}
			g.checkReceipt(t, res, expectReceipt{
				principal: agentFull, decision: "allow", statuses: []string{status}, secrets: []string{d.secret},
			}, "", "")
		})
	}
}

func testUnauthenticated(t *testing.T, g *gateway) {
	d := g.dep
	cases := []struct {
		name   string
		header string // full Authorization value; "" = none
	}{
		{"missing", ""},
		{"unknown key", "Bearer pk_" + randHex(t, 24)},
		{"hash of a key instead of the key", "Bearer " + sha256Hex(d.keys[agentFull])},
		{"empty bearer", "Bearer "},
		{"wrong scheme", "Basic " + d.keys[agentFull]},
		{"key with suffix", "Bearer " + d.keys[agentFull] + "x"},
	}
	body := mustJSON(t, execCall(map[string]any{"argv": []string{"/bin/echo", "hi"}}, "", ""))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, ep := range []struct {
				method, path string
				body         any
				toolCall     bool
			}{
				{http.MethodPost, "/v1/tool-calls", body, true},
				{http.MethodGet, "/v1/tools", nil, false},
				{http.MethodGet, "/v1/receipts", nil, false},
			} {
				r, err := g.tryDo(context.Background(), ep.method, ep.path, c.header, ep.body)
				if err != nil {
					t.Fatal(err)
				}
				if r.status != http.StatusUnauthorized {
					t.Errorf("%s %s: got %s, want 401", ep.method, ep.path, r)
					continue
				}
				if ep.toolCall {
					res := decodeToolCall(t, r)
					if res.errCode() != "unauthenticated" {
						t.Errorf("%s %s: code %q, want unauthenticated", ep.method, ep.path, res.errCode())
					}
				} else if code, _ := apiError(t, r); code != "unauthenticated" {
					t.Errorf("%s %s: code %q, want unauthenticated", ep.method, ep.path, code)
				}
			}
		})
	}
}

func testRoles(t *testing.T, g *gateway) {
	d := g.dep
	cases := []struct {
		name      string
		principal string
		method    string
		path      string
		body      any
		status    int
	}{
		{"agent lists receipts", agentFull, http.MethodGet, "/v1/receipts", nil, http.StatusForbidden},
		{"agent reads an unknown receipt", agentFull, http.MethodGet, "/v1/receipts/0190b9a4-0000-7000-8000-000000000000", nil, http.StatusForbidden},
		{"admin lists receipts", admin, http.MethodGet, "/v1/receipts", nil, http.StatusForbidden},
		{"auditor lists receipts", auditor, http.MethodGet, "/v1/receipts", nil, http.StatusOK},
		{"auditor reads an unknown receipt", auditor, http.MethodGet, "/v1/receipts/0190b9a4-0000-7000-8000-000000000000", nil, http.StatusNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := g.do(t, c.method, c.path, d.keys[c.principal], c.body)
			if r.status != c.status {
				t.Fatalf("got %s, want %d", r, c.status)
			}
			switch c.status {
			case http.StatusForbidden:
				if code, _ := apiError(t, r); code != "forbidden" {
					t.Errorf("code %q, want forbidden", code)
				}
			case http.StatusNotFound:
				if code, _ := apiError(t, r); code != "not_found" {
					t.Errorf("code %q, want not_found", code)
				}
			}
		})
	}
	t.Run("auditor may not call tools", func(t *testing.T) {
		t.Parallel()
		res := g.call(t, d.keys[auditor], execCall(map[string]any{"argv": []string{"/bin/echo", "hi"}}, "", ""))
		wantStatus(t, res, http.StatusForbidden, "forbidden")
	})
}

func testToolsList(t *testing.T, g *gateway) {
	d := g.dep
	list := func(t *testing.T, principal string) map[string]json.RawMessage {
		r := g.do(t, http.MethodGet, "/v1/tools", d.keys[principal], nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET /v1/tools as %s: %s", principal, r)
		}
		var body struct {
			Tools []struct {
				Type     string `json:"type"`
				Function struct {
					Name        string          `json:"name"`
					Description string          `json:"description"`
					Parameters  json.RawMessage `json:"parameters"`
				} `json:"function"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil || body.Tools == nil {
			t.Fatalf("GET /v1/tools: want {\"tools\": [...]}: %v\n%s", err, r)
		}
		out := map[string]json.RawMessage{}
		for _, tool := range body.Tools {
			if tool.Type != "function" || tool.Function.Name == "" || tool.Function.Description == "" {
				t.Errorf("tool not in the OpenAI function shape: %+v", tool)
			}
			out[tool.Function.Name] = tool.Function.Parameters
		}
		return out
	}
	full := list(t, agentFull)
	params, ok := full["Exec"]
	if !ok {
		t.Fatalf("agent-full's tools lack Exec: %v", full)
	}
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(params, &schema); err != nil || schema.Type != "object" || schema.Properties["argv"] == nil {
		t.Errorf("Exec parameters are not a JSON Schema object with argv: %v %s", err, params)
	}
	if len(full) != 1 {
		t.Errorf("agent-full sees %d tools, want only Exec (the policy grants nothing else)", len(full))
	}
	if none := list(t, agentNoExec); len(none) != 0 {
		t.Errorf("agent-noexec sees tools %v, want none (denied tools never appear)", none)
	}
}

func testReceiptQuery(t *testing.T, g *gateway) {
	d := g.dep
	session := "run-" + randHex(t, 8)
	ids := map[string]bool{}
	for i, argv := range [][]string{{"/bin/echo", "1"}, {"/bin/echo", "2"}, {"relative"}} {
		res := g.call(t, d.keys[agentFull], execCall(map[string]any{"argv": argv}, "call_q"+string(rune('a'+i)), session))
		if res.ReceiptID == "" {
			t.Fatalf("no receipt_id\n%s", res.response)
		}
		ids[res.ReceiptID] = true
	}
	got := g.listReceipts(t, url.Values{"session_id": {session}})
	if len(got) != len(ids) {
		t.Fatalf("GET /v1/receipts?session_id=%s: %d receipts, want %d", session, len(got), len(ids))
	}
	decisions := map[string]int{}
	for _, rc := range got {
		if !ids[rc.ID] || rc.SessionID != session {
			t.Errorf("unexpected receipt in session query: %s", rc.raw)
		}
		decisions[rc.Decision]++
	}
	if decisions["allow"] != 2 || decisions["invalid"] != 1 {
		t.Errorf("decisions = %v, want 2 allow and 1 invalid", decisions)
	}
	inv := g.listReceipts(t, url.Values{"session_id": {session}, "decision": {"invalid"}})
	if len(inv) != 1 || inv[0].Decision != "invalid" {
		t.Errorf("decision=invalid filter returned %d receipts", len(inv))
	}
	lim := g.listReceipts(t, url.Values{"session_id": {session}, "limit": {"1"}})
	if len(lim) != 1 {
		t.Errorf("limit=1 returned %d receipts", len(lim))
	}
}

func testOpenAPI(t *testing.T, g *gateway) {
	r := g.do(t, http.MethodGet, "/openapi.json", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /openapi.json without auth: %s", r)
	}
	var doc struct {
		OpenAPI string                     `json:"openapi"`
		Paths   map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	for _, p := range []string{"/v1/tool-calls", "/v1/tools", "/v1/receipts"} {
		if _, ok := doc.Paths[p]; !ok {
			t.Errorf("openapi paths lack %s", p)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := g.do(t, http.MethodGet, p, "", nil); r.status != http.StatusOK {
			t.Errorf("GET %s without auth: %s", p, r)
		}
	}
}

// testConcurrent fires many calls at once: every one is answered correctly
// with its own receipt, and paging through the session's receipts with
// next_cursor finds each exactly once.
func testConcurrent(t *testing.T, g *gateway) {
	d := g.dep
	const n = 40
	session := "burst-" + randHex(t, 6)
	type result struct {
		i   int
		res *toolCallResult
	}
	ch := make(chan result, n)
	for i := range n {
		go func() {
			r, err := g.tryDo(context.Background(), http.MethodPost, "/v1/tool-calls", "Bearer "+d.keys[agentFull],
				execCall(map[string]any{"argv": []string{"/bin/echo", "n", strconv.Itoa(i)}}, "call_"+strconv.Itoa(i), session))
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				ch <- result{i, nil}
				return
			}
			ch <- result{i, decodeToolCall(t, r)}
		}()
	}
	ids := map[string]bool{}
	for range n {
		r := <-ch
		if r.res == nil {
			continue
		}
		wantRan(t, r.res, false)
		if x := r.res.exec(t); x.Stdout != "n "+strconv.Itoa(r.i)+"\n" {
			t.Errorf("call %d: stdout %q (answers crossed?): %s", r.i, x.Stdout, r.res.response)
		}
		if r.res.CallID != "call_"+strconv.Itoa(r.i) {
			t.Errorf("call %d: call_id %q", r.i, r.res.CallID)
		}
		if ids[r.res.ReceiptID] {
			t.Errorf("receipt id %s given twice", r.res.ReceiptID)
		}
		ids[r.res.ReceiptID] = true
	}
	seen := map[string]bool{}
	q := url.Values{"session_id": {session}, "limit": {"7"}}
	for page := 0; ; page++ {
		if page > n {
			t.Fatalf("paging did not end after %d pages", page)
		}
		r := g.do(t, http.MethodGet, "/v1/receipts?"+q.Encode(), d.keys[auditor], nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET /v1/receipts?%s: %s", q.Encode(), r)
		}
		var list struct {
			Receipts []struct {
				ID string `json:"id"`
			} `json:"receipts"`
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Receipts) > 7 {
			t.Fatalf("page of %d receipts with limit 7", len(list.Receipts))
		}
		for _, rc := range list.Receipts {
			if seen[rc.ID] {
				t.Errorf("receipt %s on two pages", rc.ID)
			}
			seen[rc.ID] = true
		}
		if list.NextCursor == "" {
			break
		}
		q.Set("cursor", list.NextCursor)
	}
	if len(seen) != len(ids) {
		t.Errorf("paged %d receipts, want %d", len(seen), len(ids))
	}
	for id := range ids {
		if !seen[id] {
			t.Errorf("receipt %s missing from the paged listing", id)
		}
	}
}

// testDryRun checks POST /v1/decisions: the full decision and scope without
// running anything and without a receipt.
func testDryRun(t *testing.T, g *gateway) {
	d := g.dep
	session := "dry-" + randHex(t, 6)
	marker := sleepMarker(t, 3)
	cases := []struct {
		name      string
		principal string
		allow     bool
	}{
		{"granted", agentFull, true},
		{"denied", agentNoExec, false},
	}
	for _, c := range cases {
		r := g.do(t, http.MethodPost, "/v1/decisions", d.keys[c.principal],
			execCall(map[string]any{"argv": []string{"/bin/sleep", marker}}, "", session))
		if r.status != http.StatusOK {
			t.Errorf("%s: POST /v1/decisions: %s", c.name, r)
			continue
		}
		var body struct {
			Decision struct {
				Allow    bool `json:"allow"`
				FSGrants []struct {
					Path string `json:"path"`
				} `json:"fs_grants"`
			} `json:"decision"`
			Scope json.RawMessage `json:"scope"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, r)
		}
		if body.Decision.Allow != c.allow {
			t.Errorf("%s: decision.allow = %v, want %v\n%s", c.name, body.Decision.Allow, c.allow, r)
		}
		if c.allow && (len(body.Decision.FSGrants) == 0 || string(body.Scope) == "null" || len(body.Scope) == 0) {
			t.Errorf("%s: dry run lacks the full decision or scope\n%s", c.name, r)
		}
	}
	if pids := procsWithMarker(marker); len(pids) > 0 {
		t.Errorf("a dry run ran the program: pids %v", pids)
	}
	if rs := g.listReceipts(t, url.Values{"session_id": {session}}); len(rs) != 0 {
		t.Errorf("dry runs wrote %d receipts, want none", len(rs))
	}
}

// intp formats an optional int.
func intp(p *int) string {
	if p == nil {
		return "null"
	}
	return strconv.Itoa(*p)
}

// testReceiptExport checks GET /v1/receipts/export in both formats: every
// receipt of a session, one per JSON line or CSV row, auditor only.
func testReceiptExport(t *testing.T, g *gateway) {
	d := g.dep
	session := "export-" + randHex(t, 6)
	ids := map[string]bool{}
	for _, argv := range [][]string{{"/bin/echo", "a"}, {"/bin/echo", "b"}, {"relative"}} {
		res := g.call(t, d.keys[agentFull], execCall(map[string]any{"argv": argv}, "", session))
		if res.ReceiptID == "" {
			t.Fatalf("no receipt_id\n%s", res.response)
		}
		ids[res.ReceiptID] = true
	}
	base := "/v1/receipts/export?" + url.Values{"session_id": {session}}.Encode()

	r := g.do(t, http.MethodGet, base+"&format=jsonl", d.keys[auditor], nil)
	if r.status != http.StatusOK {
		t.Fatalf("export jsonl: %s", r)
	}
	lines := strings.Split(strings.TrimRight(string(r.body), "\n"), "\n")
	got := map[string]bool{}
	for _, line := range lines {
		var rc receipt
		if err := json.Unmarshal([]byte(line), &rc); err != nil || rc.ID == "" {
			t.Fatalf("export jsonl line is not a receipt: %v: %q", err, line)
		}
		if rc.SessionID != session {
			t.Errorf("export jsonl: receipt of session %q in a %q export", rc.SessionID, session)
		}
		got[rc.ID] = true
	}
	if len(lines) != len(ids) || len(got) != len(ids) {
		t.Errorf("export jsonl: %d lines (%d ids), want %d", len(lines), len(got), len(ids))
	}
	for id := range ids {
		if !got[id] {
			t.Errorf("export jsonl lacks receipt %s", id)
		}
	}

	r = g.do(t, http.MethodGet, base+"&format=csv", d.keys[auditor], nil)
	if r.status != http.StatusOK {
		t.Fatalf("export csv: %s", r)
	}
	rows, err := csv.NewReader(bytes.NewReader(r.body)).ReadAll()
	if err != nil {
		t.Fatalf("export csv does not parse: %v\n%s", err, r)
	}
	if len(rows) != len(ids)+1 {
		t.Fatalf("export csv: %d rows, want a header and %d receipts", len(rows), len(ids))
	}
	col := -1
	for i, h := range rows[0] {
		if h == "id" {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("export csv header %v has no id column", rows[0])
	}
	for _, row := range rows[1:] {
		if !ids[row[col]] {
			t.Errorf("export csv: unexpected receipt %q", row[col])
		}
	}

	if r := g.do(t, http.MethodGet, base+"&format=jsonl", d.keys[agentFull], nil); r.status != http.StatusForbidden {
		t.Errorf("agent export: got %s, want 403 forbidden", r)
	}
	if r := g.do(t, http.MethodGet, base+"&format=xml", d.keys[auditor], nil); r.status != http.StatusBadRequest {
		t.Errorf("export format=xml: got %s, want 400 invalid_input", r)
	}
}
