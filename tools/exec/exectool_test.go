package exectool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

func TestMain(m *testing.M) {
	process.MaybeRunHelper()
	os.Exit(m.Run())
}

func newTool(environ ...string) *Tool {
	return New(Options{
		Runner:  process.New(process.Options{}),
		Environ: func() []string { return environ },
	})
}

// usrGrant is a decision that grants /usr read-only, which holds /bin's
// programs on this system (/bin -> usr/bin) and wherever they really are.
func usrGrant(extra ...wire.FSGrant) wire.Decision {
	return wire.Decision{Allow: true, FSGrants: append([]wire.FSGrant{{Path: "/usr", Mode: "r"}, {Path: "/bin", Mode: "r"}}, extra...)}
}

func wireErr(t *testing.T, err error) *wire.Error {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("error %v (%T) is not a *wire.Error", err, err)
	}
	return we
}

func TestPrepareValidation(t *testing.T) {
	t.Parallel()
	// argv[0] and cwd that are missing, not programs or not directories
	// are refused at Enforce, after the grants: TestHostPathOracle.
	big := strings.Repeat("a", MaxArgBytes+1)
	manyArgs, _ := json.Marshal(append([]string{"/bin/true"}, slices.Repeat([]string{"x"}, MaxArgs)...))
	hugeArgv, _ := json.Marshal(append([]string{"/bin/true"}, slices.Repeat([]string{strings.Repeat("b", 100<<10)}, 11)...))

	tests := []struct {
		name      string
		input     string
		wantCode  wire.Code
		wantField string
	}{
		{"not json", `{`, wire.CodeInvalidInput, "input"},
		{"not an object", `["/bin/true"]`, wire.CodeInvalidInput, "input"},
		{"null", `null`, wire.CodeInvalidInput, "input"},
		{"empty body", ``, wire.CodeInvalidInput, "input"},
		{"trailing data", `{"argv":["/bin/true"]} {}`, wire.CodeInvalidInput, "input"},
		{"invalid utf-8 in input", "{\"argv\":[\"/bin/echo\",\"\xff\"]}", wire.CodeInvalidInput, "input"},
		{"unknown field", `{"argv":["/bin/true"],"shell":true}`, wire.CodeInvalidInput, "shell"},
		{"duplicate key", `{"argv":["/bin/true"],"argv":["/bin/false"]}`, wire.CodeInvalidInput, "argv"},
		{"missing argv", `{}`, wire.CodeInvalidInput, "argv"},
		{"null argv", `{"argv":null}`, wire.CodeInvalidInput, "argv"},
		{"argv not array", `{"argv":"/bin/true"}`, wire.CodeInvalidInput, "argv"},
		{"empty argv", `{"argv":[]}`, wire.CodeInvalidInput, "argv"},
		{"argv number", `{"argv":["/bin/echo",1]}`, wire.CodeInvalidInput, "argv[1]"},
		{"argv null element", `{"argv":["/bin/echo",null]}`, wire.CodeInvalidInput, "argv[1]"},
		{"argv empty string", `{"argv":["/bin/echo",""]}`, wire.CodeInvalidInput, "argv[1]"},
		{"argv NUL", `{"argv":["/bin/echo","a\u0000b"]}`, wire.CodeInvalidInput, "argv[1]"},
		{"argv lone surrogate", `{"argv":["/bin/echo","\ud800"]}`, wire.CodeInvalidInput, "argv[1]"},
		{"argv0 relative", `{"argv":["true"]}`, wire.CodeInvalidInput, "argv[0]"},
		{"argv0 dot relative", `{"argv":["./true"]}`, wire.CodeInvalidInput, "argv[0]"},
		{"too many args", fmt.Sprintf(`{"argv":%s}`, manyArgs), wire.CodeTooLarge, "argv"},
		{"arg too big", fmt.Sprintf(`{"argv":["/bin/echo",%q]}`, big), wire.CodeTooLarge, "argv[1]"},
		{"argv total too big", fmt.Sprintf(`{"argv":%s}`, hugeArgv), wire.CodeTooLarge, "argv"},
		{"cwd relative", `{"argv":["/bin/true"],"cwd":"tmp"}`, wire.CodeInvalidInput, "cwd"},
		{"cwd empty", `{"argv":["/bin/true"],"cwd":""}`, wire.CodeInvalidInput, "cwd"},
		{"cwd not string", `{"argv":["/bin/true"],"cwd":7}`, wire.CodeInvalidInput, "cwd"},
		{"env not object", `{"argv":["/bin/true"],"env":["A=1"]}`, wire.CodeInvalidInput, "env"},
		{"env empty name", `{"argv":["/bin/true"],"env":{"":"x"}}`, wire.CodeInvalidInput, "env."},
		{"env name with =", `{"argv":["/bin/true"],"env":{"A=B":"x"}}`, wire.CodeInvalidInput, "env.A=B"},
		{"env name with NUL", `{"argv":["/bin/true"],"env":{"A\u0000":"x"}}`, wire.CodeInvalidInput, "env.A\x00"},
		{"env name underscore", `{"argv":["/bin/true"],"env":{"_X":"x"}}`, wire.CodeInvalidInput, "env._X"},
		{"env LD_PRELOAD", `{"argv":["/bin/true"],"env":{"LD_PRELOAD":"/tmp/x.so"}}`, wire.CodeInvalidInput, "env.LD_PRELOAD"},
		{"env value number", `{"argv":["/bin/true"],"env":{"A":1}}`, wire.CodeInvalidInput, "env.A"},
		{"env value null", `{"argv":["/bin/true"],"env":{"A":null}}`, wire.CodeInvalidInput, "env.A"},
		{"env value NUL", `{"argv":["/bin/true"],"env":{"A":"x\u0000"}}`, wire.CodeInvalidInput, "env.A"},
		{"env duplicate", `{"argv":["/bin/true"],"env":{"A":"1","A":"2"}}`, wire.CodeInvalidInput, "env.A"},
		{"timeout zero", `{"argv":["/bin/true"],"timeout_s":0}`, wire.CodeInvalidInput, "timeout_s"},
		{"timeout too big", `{"argv":["/bin/true"],"timeout_s":601}`, wire.CodeInvalidInput, "timeout_s"},
		{"timeout fraction", `{"argv":["/bin/true"],"timeout_s":1.5}`, wire.CodeInvalidInput, "timeout_s"},
		{"timeout string", `{"argv":["/bin/true"],"timeout_s":"60"}`, wire.CodeInvalidInput, "timeout_s"},
		{"timeout negative", `{"argv":["/bin/true"],"timeout_s":-1}`, wire.CodeInvalidInput, "timeout_s"},
		{"timeout huge exponent", `{"argv":["/bin/true"],"timeout_s":1e400}`, wire.CodeInvalidInput, "timeout_s"},
		{"output too small", `{"argv":["/bin/true"],"max_output_bytes":1023}`, wire.CodeInvalidInput, "max_output_bytes"},
		{"output too big", `{"argv":["/bin/true"],"max_output_bytes":4194305}`, wire.CodeInvalidInput, "max_output_bytes"},
		{"output bool", `{"argv":["/bin/true"],"max_output_bytes":true}`, wire.CodeInvalidInput, "max_output_bytes"},
	}
	tool := newTool()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			call, err := tool.Prepare(context.Background(), json.RawMessage(tt.input))
			if err == nil {
				t.Fatalf("Prepare accepted %s: args %v", tt.input[:min(len(tt.input), 120)], call.Args())
			}
			we := wireErr(t, err)
			if we.Code != tt.wantCode || we.Details["field"] != tt.wantField {
				t.Errorf("got %s field %q (%s), want %s field %q", we.Code, we.Details["field"], we.Message, tt.wantCode, tt.wantField)
			}
			if we.Message == "" {
				t.Error("empty message")
			}
		})
	}
}

func TestPrepareNormalizes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	realDir, _ := filepath.EvalSymlinks(real)
	input := fmt.Sprintf(`{"argv":["/bin/echo","hi"],"cwd":%q,"env":{"B":"2","A":"1"},"timeout_s":5,"max_output_bytes":2048,"cwd_ignored":null}`, link)
	if _, err := newTool().Prepare(context.Background(), json.RawMessage(input)); err == nil {
		t.Fatal("unknown field accepted")
	}
	input = fmt.Sprintf(`{"argv":["/bin/echo","hi"],"cwd":%q,"env":{"B":"2","A":"1"},"timeout_s":5,"max_output_bytes":2048}`, link)
	call, err := newTool().Prepare(context.Background(), json.RawMessage(input))
	if err != nil {
		t.Fatal(err)
	}
	echo, _ := filepath.EvalSymlinks("/bin/echo")
	wantArgs := map[string]any{
		"argv": []any{"/bin/echo", "hi"}, "cwd": link, "env": map[string]any{"A": "1", "B": "2"},
		"timeout_s": float64(5), "max_output_bytes": float64(2048),
	}
	if d := cmp.Diff(wantArgs, call.Args()); d != "" {
		t.Errorf("Args (-want +got):\n%s", d)
	}
	wantResolved := map[string]any{
		"argv0": echo, "argv0_base": filepath.Base(echo), "argv": []any{echo, "hi"},
		"cwd": realDir, "env_names": []any{"A", "B"},
		"paths": []any{nil, map[string]any{"path": filepath.Join(realDir, "hi")}},
	}
	if d := cmp.Diff(wantResolved, call.Resolved()); d != "" {
		t.Errorf("Resolved (-want +got):\n%s", d)
	}

	// Optional fields sent as null count as absent, and defaults apply.
	call, err = newTool().Prepare(context.Background(), json.RawMessage(`{"argv":["/bin/true"],"cwd":null,"env":null,"timeout_s":null,"max_output_bytes":null}`))
	if err != nil {
		t.Fatal(err)
	}
	scope, err := call.Enforce(context.Background(), usrGrant())
	if err != nil {
		t.Fatal(err)
	}
	if scope.Limits.TimeoutS != DefaultTimeoutS || scope.Limits.MaxOutputBytes != DefaultMaxOutputBytes {
		t.Errorf("defaults not applied: %+v", scope.Limits)
	}
}

func TestEnforce(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	mk := func(rel string) string {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile("/bin/true")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inside := mk("work/bin/prog")
	prefixTrick := mk("workx/prog")
	outside := mk("other/prog")
	if err := os.Symlink(outside, filepath.Join(base, "work/escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "work"), filepath.Join(base, "worklink")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(base, "work/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(base, "work")

	tests := []struct {
		name      string
		argv0     string
		cwd       string
		grants    []wire.FSGrant
		wantCode  wire.Code
		wantField string
		wantPath  string
	}{
		{name: "inside", argv0: inside, grants: []wire.FSGrant{{Path: work, Mode: "r"}}},
		{name: "inside with cwd", argv0: inside, cwd: filepath.Join(work, "sub"), grants: []wire.FSGrant{{Path: work, Mode: "rw"}}},
		{name: "grant given through a symlink", argv0: inside, grants: []wire.FSGrant{{Path: filepath.Join(base, "worklink"), Mode: "r"}}},
		{name: "grant equal to the file", argv0: inside, grants: []wire.FSGrant{{Path: inside, Mode: "r"}}},
		{name: "root grant", argv0: inside, grants: []wire.FSGrant{{Path: "/", Mode: "r"}}},
		{name: "no grants", argv0: inside, wantCode: wire.CodeFSDenied, wantField: "argv[0]", wantPath: inside},
		{name: "outside", argv0: outside, grants: []wire.FSGrant{{Path: work, Mode: "r"}}, wantCode: wire.CodeFSDenied, wantField: "argv[0]", wantPath: outside},
		{name: "string prefix is not a path prefix", argv0: prefixTrick, grants: []wire.FSGrant{{Path: work, Mode: "r"}}, wantCode: wire.CodeFSDenied, wantField: "argv[0]"},
		{name: "symlink pointing out of the grant", argv0: filepath.Join(work, "escape"), grants: []wire.FSGrant{{Path: work, Mode: "r"}}, wantCode: wire.CodeFSDenied, wantField: "argv[0]", wantPath: filepath.Join(work, "escape")},
		{name: "cwd outside", argv0: inside, cwd: "/usr", grants: []wire.FSGrant{{Path: work, Mode: "r"}}, wantCode: wire.CodeFSDenied, wantField: "cwd", wantPath: "/usr"},
		{name: "grant that does not exist is ignored", argv0: inside, grants: []wire.FSGrant{{Path: filepath.Join(base, "gone"), Mode: "r"}}, wantCode: wire.CodeFSDenied, wantField: "argv[0]"},
		{name: "relative grant is ignored", argv0: inside, grants: []wire.FSGrant{{Path: "work", Mode: "r"}}, wantCode: wire.CodeFSDenied, wantField: "argv[0]"},
		{name: "unknown mode is ignored", argv0: inside, grants: []wire.FSGrant{{Path: work, Mode: "x"}}, wantCode: wire.CodeFSDenied, wantField: "argv[0]"},
		{name: "grant with dotdot is cleaned", argv0: prefixTrick, grants: []wire.FSGrant{{Path: work + "/../work", Mode: "r"}}, wantCode: wire.CodeFSDenied, wantField: "argv[0]"},
	}
	tool := newTool()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := map[string]any{"argv": []string{tt.argv0}}
			if tt.cwd != "" {
				in["cwd"] = tt.cwd
			}
			raw, _ := json.Marshal(in)
			call, err := tool.Prepare(context.Background(), raw)
			if err != nil {
				t.Fatal(err)
			}
			scope, err := call.Enforce(context.Background(), wire.Decision{Allow: true, FSGrants: tt.grants})
			if tt.wantCode == "" {
				if err != nil {
					t.Fatalf("Enforce: %v", err)
				}
				if scope.Backend != "process" || len(scope.FSGrants) != len(tt.grants) {
					t.Errorf("scope %+v", scope)
				}
				for _, g := range scope.FSGrants {
					if real, _ := filepath.EvalSymlinks(g.Path); real != g.Path {
						t.Errorf("scope grant %s is not a real path", g.Path)
					}
				}
				return
			}
			we := wireErr(t, err)
			if we.Code != tt.wantCode || we.Details["field"] != tt.wantField {
				t.Errorf("got %s field %v (%s), want %s %s", we.Code, we.Details["field"], we.Message, tt.wantCode, tt.wantField)
			}
			if tt.wantPath != "" && we.Details["path"] != tt.wantPath {
				t.Errorf("path %v, want %s", we.Details["path"], tt.wantPath)
			}
		})
	}
}

func TestEnforceRefusesDenial(t *testing.T) {
	t.Parallel()
	call, err := newTool().Prepare(context.Background(), json.RawMessage(`{"argv":["/bin/true"]}`))
	if err != nil {
		t.Fatal(err)
	}
	d := usrGrant()
	d.Allow = false
	_, err = call.Enforce(context.Background(), d)
	if we := wireErr(t, err); we.Code != wire.CodePermissionDenied {
		t.Errorf("code %s, want permission_denied", we.Code)
	}
}

func TestEffectiveLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      input
		policy  wire.Limits
		want    wire.Limits
		wantErr bool
	}{
		{
			name: "defaults", in: input{timeoutS: 60, maxOutputBytes: 262144},
			want: wire.Limits{TimeoutS: 60, MaxOutputBytes: 262144, CPUSeconds: 60, MemoryBytes: DefaultMemoryBytes, FsizeBytes: tools.DefaultFsizeBytes, Nofile: tools.DefaultNofile},
		},
		{
			name: "policy lowers timeout and output", in: input{timeoutS: 600, maxOutputBytes: 4194304},
			policy: wire.Limits{TimeoutS: 30, MaxOutputBytes: 2048, CPUSeconds: 5, MemoryBytes: 1 << 20, FsizeBytes: 10, Nofile: 16},
			want:   wire.Limits{TimeoutS: 30, MaxOutputBytes: 2048, CPUSeconds: 5, MemoryBytes: 1 << 20, FsizeBytes: 10, Nofile: 16},
		},
		{
			name: "policy cannot raise the caller's own bound", in: input{timeoutS: 5, maxOutputBytes: 1024},
			policy: wire.Limits{TimeoutS: 600, MaxOutputBytes: 4194304},
			want:   wire.Limits{TimeoutS: 5, MaxOutputBytes: 1024, CPUSeconds: 5, MemoryBytes: DefaultMemoryBytes, FsizeBytes: tools.DefaultFsizeBytes, Nofile: tools.DefaultNofile},
		},
		{
			name: "ceilings", in: input{timeoutS: 60, maxOutputBytes: 262144},
			policy: wire.Limits{CPUSeconds: 1 << 30, MemoryBytes: 1 << 50, FsizeBytes: 1 << 50, Nofile: 1 << 30},
			want:   wire.Limits{TimeoutS: 60, MaxOutputBytes: 262144, CPUSeconds: tools.MaxCPUSeconds, MemoryBytes: MaxMemoryBytes, FsizeBytes: tools.MaxFsizeBytes, Nofile: tools.MaxNofile},
		},
		{
			// RFC 0002: cpu_seconds defaults to the effective timeout
			// (the policy's, when lower than the caller's).
			name: "cpu follows the timeout", in: input{timeoutS: 600, maxOutputBytes: 262144},
			policy: wire.Limits{TimeoutS: 20},
			want:   wire.Limits{TimeoutS: 20, MaxOutputBytes: 262144, CPUSeconds: 20, MemoryBytes: DefaultMemoryBytes, FsizeBytes: tools.DefaultFsizeBytes, Nofile: tools.DefaultNofile},
		},
		{name: "negative fails closed", in: input{timeoutS: 60, maxOutputBytes: 262144}, policy: wire.Limits{MemoryBytes: -1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := effectiveLimits(&tt.in, tt.policy)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, wantErr %v", err, tt.wantErr)
			}
			if d := cmp.Diff(tt.want, got); d != "" && !tt.wantErr {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// runCall prepares, enforces and runs input under decision d.
func runCall(t *testing.T, tool *Tool, input string, d wire.Decision) (wire.Scope, tools.Result) {
	t.Helper()
	call, err := tool.Prepare(context.Background(), json.RawMessage(input))
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	scope, err := call.Enforce(context.Background(), d)
	if err != nil {
		t.Fatalf("Enforce: %v", err)
	}
	return scope, call.Run(context.Background(), scope)
}

func data(t *testing.T, r tools.Result) Data {
	t.Helper()
	d, ok := r.Output.Data.(Data)
	if !ok {
		t.Fatalf("output data %T %v, want Data", r.Output.Data, r.Output.Data)
	}
	return d
}

func TestEnvComposition(t *testing.T) {
	t.Parallel()
	tool := newTool(
		"ANTHROPIC_API_KEY=sk-ant-secret", "GITHUB_TOKEN=ghp_x", "GOFLAGS=-mod=mod", "HOME=/root",
		"PATH=/gateway/bin", "UNLISTED=gateway-only", "DB_PASSWORD=hunter2",
	)
	d := usrGrant()
	d.Env = wire.EnvPolicy{
		Pass: []string{"ANTHROPIC_API_KEY", "GITHUB_TOKEN", "GOFLAGS", "DB_PASSWORD", "HOME", "NOT_SET_ANYWHERE"},
		Set:  map[string]string{"CI": "1", "MODE": "policy"},
	}
	// What the policy sets is forced: the caller cannot override it.
	call, err := tool.Prepare(context.Background(), json.RawMessage(`{"argv":["/usr/bin/env"],"env":{"MODE":"caller"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call.Enforce(context.Background(), d); err == nil || wireErr(t, err).Code != wire.CodePermissionDenied || wireErr(t, err).Details["field"] != "env.MODE" {
		t.Errorf("caller override of a policy-set variable: %v, want permission_denied naming env.MODE", err)
	}
	scope, res := runCall(t, tool, `{"argv":["/usr/bin/env"],"env":{"EXTRA":"x y","HOME":"/caller/home"}}`, d)
	if res.Status != wire.StatusSucceeded {
		t.Fatalf("status %s error %v", res.Status, res.Output.Error)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(data(t, res).Stdout, "\n"), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	home := got["HOME"]
	if !strings.Contains(home, "portcullis-home-") {
		t.Errorf("HOME %q is not a private per-call directory", home)
	}
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		t.Errorf("private HOME %s still exists after the call", home)
	}
	want := map[string]string{
		"PATH": BasePath, "HOME": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "USER": tool.user,
		"TERM": "dumb", "SHELL": "/bin/sh", "GOFLAGS": "-mod=mod", "CI": "1", "MODE": "policy", "EXTRA": "x y",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("child env (-want +got):\n%s", d)
	}
	names := sortedKeys(want)
	if d := cmp.Diff(names, scope.EnvNames); d != "" {
		t.Errorf("scope env names (-want +got):\n%s", d)
	}
}

func TestRunOutcomes(t *testing.T) {
	t.Parallel()
	tool := newTool()
	tests := []struct {
		name        string
		input       string
		wantStatus  string
		wantSuccess bool
		wantErr     wire.Code
		wantField   string // the error's details.field, when it names one
		limits      wire.Limits
		check       func(Data) bool
	}{
		{
			name: "no shell: metacharacters are literal", input: `{"argv":["/bin/echo","; pwd"]}`,
			wantStatus: wire.StatusSucceeded, wantSuccess: true,
			check: func(d Data) bool { return d.Stdout == "; pwd\n" && d.ExitCode == 0 },
		},
		{
			name: "non-zero exit", input: `{"argv":["/bin/sh","-c","echo oops >&2; exit 3"]}`,
			wantStatus: wire.StatusFailed,
			check:      func(d Data) bool { return d.ExitCode == 3 && d.Stderr == "oops\n" && d.Signal == nil },
		},
		{
			name: "timeout", input: `{"argv":["/bin/sleep","30"],"timeout_s":1}`,
			wantStatus: wire.StatusTimedOut, wantErr: wire.CodeTimeout,
			check: func(d Data) bool { return d.TimedOut && d.Signal != nil && d.DurationMS >= 1000 && d.DurationMS < 3000 },
		},
		{
			// All of a program's threads count toward RLIMIT_CPU, so the
			// CPU limit can stop a busy program before its timeout: a
			// timeout on cpu_seconds, not an unexplained failure.
			name: "cpu limit", input: `{"argv":["/bin/sh","-c","while :; do :; done"],"timeout_s":30}`,
			limits:     wire.Limits{CPUSeconds: 1},
			wantStatus: wire.StatusTimedOut, wantErr: wire.CodeTimeout, wantField: "cpu_seconds",
			check: func(d Data) bool {
				return d.TimedOut && d.Signal != nil && *d.Signal == "SIGXCPU" && d.DurationMS < 10000
			},
		},
		{
			name: "output capped", input: `{"argv":["/bin/sh","-c","head -c 100000 /dev/zero | tr '\\0' z"],"max_output_bytes":1024}`,
			wantStatus: wire.StatusSucceeded, wantSuccess: true,
			check: func(d Data) bool { return d.StdoutTruncated && d.Stdout == strings.Repeat("z", 1024) },
		},
		{
			name: "default cwd is a fresh empty directory", input: `{"argv":["/bin/ls","-A"]}`,
			wantStatus: wire.StatusSucceeded, wantSuccess: true,
			check: func(d Data) bool { return d.Stdout == "" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := usrGrant()
			d.Limits = tt.limits
			_, res := runCall(t, tool, tt.input, d)
			if res.Status != tt.wantStatus || res.Output.Success != tt.wantSuccess {
				t.Errorf("status %s success %v, want %s %v (error %v)", res.Status, res.Output.Success, tt.wantStatus, tt.wantSuccess, res.Output.Error)
			}
			if (res.Output.Error == nil) != (tt.wantErr == "") || (res.Output.Error != nil && res.Output.Error.Code != tt.wantErr) {
				t.Errorf("error %v, want code %q", res.Output.Error, tt.wantErr)
			}
			if tt.wantField != "" && (res.Output.Error == nil || res.Output.Error.Details["field"] != tt.wantField) {
				t.Errorf("error %v, want details.field %q", res.Output.Error, tt.wantField)
			}
			dd := data(t, res)
			if !tt.check(dd) {
				t.Errorf("data %+v", dd)
			}
			sum, _ := json.Marshal(res.Output.Data)
			digest := sha256.Sum256(sum)
			if res.OutputSHA256 != hex.EncodeToString(digest[:]) {
				t.Errorf("OutputSHA256 %s does not match the data", res.OutputSHA256)
			}
			if res.Backend != "process" || res.Output.Metadata["backend"] != "process" || res.Output.Metadata["duration_ms"] != dd.DurationMS {
				t.Errorf("backend %q metadata %v", res.Backend, res.Output.Metadata)
			}
			if res.ExitCode == nil || *res.ExitCode != dd.ExitCode {
				t.Errorf("result exit code %v, data %d", res.ExitCode, dd.ExitCode)
			}
		})
	}
}

func TestRunDataJSONShape(t *testing.T) {
	t.Parallel()
	_, res := runCall(t, newTool(), `{"argv":["/bin/true"]}`, usrGrant())
	b, err := json.Marshal(res.Output.Data)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	keys := sortedKeys(m)
	want := []string{"duration_ms", "exit_code", "signal", "stderr", "stderr_truncated", "stdout", "stdout_truncated", "timed_out"}
	if d := cmp.Diff(want, keys); d != "" {
		t.Errorf("data keys (-want +got):\n%s", d)
	}
	if m["signal"] != nil {
		t.Errorf("signal %v, want null", m["signal"])
	}
}

func TestRunBackendUnavailable(t *testing.T) {
	t.Parallel()
	tool := New(Options{Runner: process.New(process.Options{HelperPath: "/nonexistent/helper"})})
	_, res := runCall(t, tool, `{"argv":["/bin/true"]}`, usrGrant())
	if res.Status != wire.StatusError || res.Output.Success || res.Output.Data != nil ||
		res.Output.Error == nil || res.Output.Error.Code != wire.CodeBackendUnavailable || res.ExitCode != nil {
		t.Errorf("result %+v, want status error, backend_unavailable, null data", res)
	}
}

func TestRunRefusesWithoutEnforce(t *testing.T) {
	t.Parallel()
	call, err := newTool().Prepare(context.Background(), json.RawMessage(`{"argv":["/bin/true"]}`))
	if err != nil {
		t.Fatal(err)
	}
	res := call.Run(context.Background(), wire.Scope{Limits: wire.Limits{TimeoutS: 5, MaxOutputBytes: 1024}})
	if res.Status != wire.StatusError || res.Output.Error == nil || res.Output.Error.Code != wire.CodeInternal {
		t.Errorf("result %+v, want an internal error", res)
	}
}

func TestRunRechecksArgv0(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	b, _ := os.ReadFile("/bin/true")
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	tool := newTool()
	call, err := tool.Prepare(context.Background(), json.RawMessage(fmt.Sprintf(`{"argv":[%q]}`, prog)))
	if err != nil {
		t.Fatal(err)
	}
	scope, err := call.Enforce(context.Background(), wire.Decision{Allow: true, FSGrants: []wire.FSGrant{{Path: dir, Mode: "r"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Swap the checked file for a link to a program outside the grant.
	if err := os.Remove(prog); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/bin/false", prog); err != nil {
		t.Fatal(err)
	}
	res := call.Run(context.Background(), scope)
	if res.Output.Error == nil || res.Output.Error.Code != wire.CodeSandboxViolation {
		t.Errorf("result %+v, want sandbox_violation", res)
	}
}

func TestRunContextCancel(t *testing.T) {
	t.Parallel()
	tool := newTool()
	call, err := tool.Prepare(context.Background(), json.RawMessage(`{"argv":["/bin/sleep","30"]}`))
	if err != nil {
		t.Fatal(err)
	}
	scope, err := call.Enforce(context.Background(), usrGrant())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res := call.Run(ctx, scope)
	if time.Since(start) > 8*time.Second {
		t.Errorf("cancel took %v", time.Since(start))
	}
	if res.Status != wire.StatusError || res.Output.Error == nil || res.Output.Error.Code != wire.CodeBackendUnavailable || res.Output.Data == nil {
		t.Errorf("result %+v", res)
	}
}

func TestParametersMatchDecoder(t *testing.T) {
	t.Parallel()
	var schema struct {
		Type                 string                     `json:"type"`
		Properties           map[string]json.RawMessage `json:"properties"`
		Required             []string                   `json:"required"`
		AdditionalProperties *bool                      `json:"additionalProperties"`
	}
	if err := json.Unmarshal(newTool().Parameters(), &schema); err != nil {
		t.Fatalf("Parameters is not JSON: %v", err)
	}
	props := sortedKeys(schema.Properties)
	want := []string{"argv", "cwd", "env", "max_output_bytes", "timeout_s"}
	if schema.Type != "object" || !slices.Equal(props, want) || !slices.Equal(schema.Required, []string{"argv"}) ||
		schema.AdditionalProperties == nil || *schema.AdditionalProperties {
		t.Errorf("schema %+v does not match the decoder's fields %v", schema, want)
	}
}

func FuzzPrepare(f *testing.F) {
	for _, s := range []string{
		`{"argv":["/bin/true"]}`,
		`{"argv":["/bin/echo","hi"],"cwd":"/tmp","env":{"A":"1"},"timeout_s":5,"max_output_bytes":2048}`,
		`{"argv":[]}`, `{"argv":["x"]}`, `{"argv":["/bin/true"],"argv":[]}`, `{"env":{"_":"x"}}`,
		`{"argv":["/bin/true"],"timeout_s":1e3}`, `{"argv":["/bin/true","\ud800"]}`, "{\"argv\":[\"\xff\"]}",
		`[]`, `null`, ``, `{`, `{"argv":["/bin/true"]}x`,
	} {
		f.Add([]byte(s))
	}
	tool := newTool()
	f.Fuzz(func(t *testing.T, b []byte) {
		call, err := tool.Prepare(context.Background(), b)
		if err != nil {
			var we *wire.Error
			if !errors.As(err, &we) || (we.Code != wire.CodeInvalidInput && we.Code != wire.CodeTooLarge) {
				t.Fatalf("Prepare(%q) error %v is not invalid_input/too_large", b, err)
			}
			if _, ok := we.Details["field"].(string); !ok {
				t.Fatalf("Prepare(%q) error has no field: %v", b, we)
			}
			return
		}
		r := call.Resolved()
		if argv0, _ := r["argv0"].(string); !filepath.IsAbs(argv0) {
			t.Fatalf("accepted %q with argv0 %v", b, r["argv0"])
		}
		if call.Args() == nil {
			t.Fatalf("accepted %q with nil args", b)
		}
	})
}
