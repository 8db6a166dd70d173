package exectool

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/wire"
)

// pathTree is a granted directory with secrets and escapes planted in it,
// and a directory outside every grant.
type pathTree struct {
	work, outside, secret string
}

func newPathTree(t *testing.T) pathTree {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := pathTree{work: filepath.Join(root, "work"), outside: filepath.Join(root, "outside"), secret: "TOPSECRET-plan"}
	for _, d := range []string{p.work, p.outside, filepath.Join(p.work, "deep", "a"), filepath.Join(p.work, "hidden")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(p.work, "ok.txt"):                "fine\n",
		filepath.Join(p.work, ".env"):                  p.secret,
		filepath.Join(p.work, "deep", "a", ".env"):     p.secret,
		filepath.Join(p.work, "deep", "a", "id_rsa"):   p.secret,
		filepath.Join(p.work, "hidden", "x.txt"):       p.secret,
		filepath.Join(p.outside, "secret.txt"):         p.secret,
		filepath.Join(p.work, "deep", "a", "plain.go"): "package a\n",
	}
	for f, c := range files {
		if err := os.WriteFile(f, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"link":     filepath.Join(p.outside, "secret.txt"),
		"dirlink":  p.outside,
		"innocent": filepath.Join(p.work, "deep", "a", ".env"),
		"rel":      "../outside/secret.txt",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(p.work, name)); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func (p pathTree) decision(plan *wire.ExecPlan) wire.Decision {
	d := usrGrant(wire.FSGrant{Path: p.work, Mode: wire.ModeRead})
	d.Exec = plan
	d.FSDeny = []string{filepath.Join(p.work, "hidden")}
	return d
}

// TestPathArgs: every argument the policy names as a path is resolved the
// way the kernel will (cwd, symlinks, "..") and held against the grants,
// the secret-name rule at every depth and fs_deny, before anything runs.
// The refusal never says whether a host file outside the grants exists.
func TestPathArgs(t *testing.T) {
	t.Parallel()
	p := newPathTree(t)
	tool := newTool()
	operand := &wire.ExecPlan{PathArgs: []wire.PathArg{{Index: 1}}}
	value := &wire.ExecPlan{PathArgs: []wire.PathArg{{Index: 1, Value: true}}}
	tests := []struct {
		name  string
		argv  []string
		cwd   string // "" for none, "work" for p.work
		plan  *wire.ExecPlan
		allow bool
	}{
		{"absolute outside every grant", []string{"/bin/cat", "/etc/shadow"}, "work", operand, false},
		{"missing outside every grant", []string{"/bin/cat", "/etc/no-such-file-here"}, "work", operand, false},
		{"relative climbing out", []string{"/bin/cat", "../outside/secret.txt"}, "work", operand, false},
		{"symlink out of the grant", []string{"/bin/cat", "link"}, "work", operand, false},
		{"relative symlink out of the grant", []string{"/bin/cat", "rel"}, "work", operand, false},
		{"through a directory symlink", []string{"/bin/cat", "dirlink/secret.txt"}, "work", operand, false},
		{"dot-dot after a directory symlink", []string{"/bin/cat", "dirlink/../outside/secret.txt"}, "work", operand, false},
		{".env at the top", []string{"/bin/cat", ".env"}, "work", operand, false},
		{".env deep in the grant", []string{"/bin/cat", "deep/a/.env"}, "work", operand, false},
		{".env by absolute path", []string{"/bin/cat", "WORK/deep/a/.env"}, "", operand, false},
		{".ENV in another case", []string{"/bin/cat", "deep/a/.ENV"}, "work", operand, false},
		{"private key name", []string{"/bin/cat", "deep/a/id_rsa"}, "work", operand, false},
		{"innocent name linking to .env", []string{"/bin/cat", "innocent"}, "work", operand, false},
		{"secret name lexically removed", []string{"/bin/cat", ".env/../ok.txt"}, "work", operand, false},
		{"fs_deny", []string{"/bin/cat", "hidden/x.txt"}, "work", operand, false},
		{"option value outside", []string{"/bin/cat", "--file=/etc/shadow"}, "work", value, false},
		{"relative climbing without cwd", []string{"/bin/cat", "../../etc/shadow"}, "", operand, false},
		{"inside", []string{"/bin/cat", "ok.txt"}, "work", operand, true},
		{"inside, absolute", []string{"/bin/cat", "WORK/ok.txt"}, "", operand, true},
		{"inside, missing", []string{"/bin/cat", "not-yet"}, "work", operand, true},
		{"relative without cwd stays in the private directory", []string{"/bin/cat", "x.txt"}, "", operand, true},
		{"not a path argument", []string{"/bin/echo", "/etc/shadow"}, "work", nil, true},
	}
	messages := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			argv := make([]string, len(tt.argv))
			for i, a := range tt.argv {
				argv[i] = strings.ReplaceAll(a, "WORK", p.work)
			}
			in := map[string]any{"argv": argv}
			if tt.cwd != "" {
				in["cwd"] = p.work
			}
			b, _ := json.Marshal(in)
			call, err := tool.Prepare(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			scope, err := call.Enforce(context.Background(), p.decision(tt.plan))
			if !tt.allow {
				we := wireErr(t, err)
				if we.Code != wire.CodeFSDenied || we.Details["field"] != "argv[1]" {
					t.Fatalf("error %v, want fs_denied naming argv[1]", err)
				}
				if strings.Contains(we.Message, p.secret) || strings.Contains(we.Message, p.outside) {
					t.Errorf("message reveals what the path resolves to: %q", we.Message)
				}
				messages[tt.name] = strings.Replace(we.Message, fmt.Sprintf("%q", argv[1]), "ARG", 1)
				return
			}
			if err != nil {
				t.Fatalf("Enforce: %v", err)
			}
			res := call.Run(context.Background(), scope)
			if out := data(t, res).Stdout; strings.Contains(out, p.secret) {
				t.Errorf("output leaks the secret: %q", out)
			}
		})
	}
	// A host file outside the grants that exists and one that does not
	// are refused in the same words.
	if a, b := messages["absolute outside every grant"], messages["missing outside every grant"]; a == "" || a != b {
		t.Errorf("refusals differ for an existing and a missing file:\n%q\n%q", a, b)
	}
}

// TestPlanInsertsAndHome: forced arguments go where the plan says, the
// caller's own arguments are kept verbatim (a literal ${HOME} stays
// literal), HomeToken in a forced argument is the call's private HOME, and
// the scope records the inserts in argv order.
func TestPlanInsertsAndHome(t *testing.T) {
	t.Parallel()
	d := usrGrant()
	d.Exec = &wire.ExecPlan{Insert: []wire.ArgInsert{
		{At: 2, Args: []string{"mid"}},
		{At: 1, Args: []string{"first", HomeToken}},
		{At: 3, Args: []string{"last"}},
	}}
	scope, res := runCall(t, newTool(), `{"argv":["/bin/echo","a","${HOME}"]}`, d)
	got := strings.Fields(data(t, res).Stdout)
	if len(got) != 6 || got[0] != "first" || !strings.Contains(got[1], "portcullis-home-") || got[2] != "a" || got[3] != "mid" || got[4] != "${HOME}" || got[5] != "last" {
		t.Errorf("argv as run: %q, want first <home> a mid ${HOME} last", got)
	}
	if scope.Exec == nil || len(scope.Exec.Insert) != 3 || scope.Exec.Insert[0].At != 1 || scope.Exec.Insert[2].At != 3 {
		t.Errorf("scope exec %+v, want the inserts sorted by position", scope.Exec)
	}
}

// TestPlanMalformed: a plan that does not fit the argv is the policy's
// bug and fails closed.
func TestPlanMalformed(t *testing.T) {
	t.Parallel()
	tool := newTool()
	for name, plan := range map[string]*wire.ExecPlan{
		"insert past the end":      {Insert: []wire.ArgInsert{{At: 3, Args: []string{"x"}}}},
		"insert at argv0":          {Insert: []wire.ArgInsert{{At: 0, Args: []string{"x"}}}},
		"empty insert":             {Insert: []wire.ArgInsert{{At: 1}}},
		"path argv0":               {PathArgs: []wire.PathArg{{Index: 0}}},
		"path past the end":        {PathArgs: []wire.PathArg{{Index: 2}}},
		"value without an =":       {PathArgs: []wire.PathArg{{Index: 1, Value: true}}},
		"insert with a NUL inside": {Insert: []wire.ArgInsert{{At: 1, Args: []string{"a\x00b"}}}},
	} {
		call, err := tool.Prepare(context.Background(), json.RawMessage(`{"argv":["/bin/echo","hi"]}`))
		if err != nil {
			t.Fatal(err)
		}
		d := usrGrant()
		d.Exec = plan
		if _, err := call.Enforce(context.Background(), d); err == nil || wireErr(t, err).Code != wire.CodeInternal {
			t.Errorf("%s: %v, want internal", name, err)
		}
	}
}

// TestRecheckPathArgs: a path argument swapped for a link out of the grant
// between the check and the run is refused, and the program never runs.
func TestRecheckPathArgs(t *testing.T) {
	t.Parallel()
	p := newPathTree(t)
	target := filepath.Join(p.work, "swap")
	if err := os.WriteFile(target, []byte("fine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tool := newTool()
	call, err := tool.Prepare(context.Background(), json.RawMessage(fmt.Sprintf(`{"argv":["/bin/cat","swap"],"cwd":%q}`, p.work)))
	if err != nil {
		t.Fatal(err)
	}
	scope, err := call.Enforce(context.Background(), p.decision(&wire.ExecPlan{PathArgs: []wire.PathArg{{Index: 1}}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(target); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(p.outside, "secret.txt"), target); err != nil {
		t.Fatal(err)
	}
	res := call.Run(context.Background(), scope)
	if res.Output.Error == nil || res.Output.Error.Code != wire.CodeSandboxViolation || res.Output.Data != nil {
		t.Errorf("result %+v, want sandbox_violation and no data", res)
	}
}

// TestPlanExecRestrict: under exec_restrict the program runs but cannot
// start anything else; exec_allow entries relative to argv[0]'s directory
// are resolved and recorded in the scope.
func TestPlanExecRestrict(t *testing.T) {
	t.Parallel()
	if process.LandlockABI() < 1 {
		t.Skip("no Landlock here")
	}
	tool := newTool()
	dir := t.TempDir()
	proof := filepath.Join(dir, "ran")
	d := usrGrant()
	d.Exec = &wire.ExecPlan{ExecRestrict: true, ExecAllow: []string{"../lib/no-such-dir"}}
	in := fmt.Sprintf(`{"argv":["/bin/sh","-c","/usr/bin/touch %s; echo ran-shell"]}`, proof)
	scope, res := runCall(t, tool, in, d)
	if !strings.Contains(data(t, res).Stdout, "ran-shell") {
		t.Fatalf("the program did not run: %+v", res)
	}
	if _, err := os.Stat(proof); err == nil {
		t.Error("the restricted program executed touch")
	}
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	if scope.Exec == nil || !scope.Exec.ExecRestrict || len(scope.Exec.ExecAllow) == 0 || scope.Exec.ExecAllow[0] != sh {
		t.Errorf("scope exec %+v, want the restriction with %s first", scope.Exec, sh)
	}
}

// TestPlanExecAllowNotFromWritableGrant: an exec_allow entry relative to
// argv[0]'s directory ("../pkg/tool" for go) names a path the caller
// controls when argv[0] lies in a writable grant: a program of its own
// named go, next to a symlink pkg/tool pointing at /usr/bin, must not
// bring /usr/bin into the allow list. Such entries are left out (the
// program then cannot execute them: closed).
func TestPlanExecAllowNotFromWritableGrant(t *testing.T) {
	t.Parallel()
	if process.LandlockABI() < 1 {
		t.Skip("no Landlock here")
	}
	tool := newTool()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "go"), []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin", filepath.Join(dir, "pkg", "tool")); err != nil {
		t.Fatal(err)
	}
	d := usrGrant(wire.FSGrant{Path: dir, Mode: "rw"})
	d.Exec = &wire.ExecPlan{ExecRestrict: true, ExecAllow: []string{"../pkg/tool", "/usr/lib/git-core"}}
	in := fmt.Sprintf(`{"argv":[%q]}`, filepath.Join(dir, "bin", "go"))
	scope, _ := runCall(t, tool, in, d)
	usrBin, _ := filepath.EvalSymlinks("/usr/bin")
	if scope.Exec == nil || slices.Contains(scope.Exec.ExecAllow, usrBin) {
		t.Errorf("scope exec %+v: a symlink in the writable grant brought %s into the allow list", scope.Exec, usrBin)
	}
}
