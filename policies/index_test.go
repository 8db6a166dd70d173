package policies

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/portcullis/portcullis/wire"
)

func TestIndexPrecomputedForShipped(t *testing.T) {
	t.Parallel()
	c := shippedEngine(t).live.Load()
	if c.index == nil {
		t.Fatal("no index precomputed for the shipped policy")
	}
	for _, name := range []string{"role_tool", "own", "merged", "profiles"} {
		if c.index.values[name] == nil {
			t.Errorf("index rule %s not precomputed", name)
		}
	}
}

// Only rules that cannot depend on the call are precomputed, and a `with`
// modifier still sees the rules evaluated under it.
func TestIndexPrecomputesOnlyDataRules(t *testing.T) {
	t.Parallel()
	fsys := policyFS(`decision := {"allow": data.portcullis.index.from_input == "x", "reasons": [v]} if {
	v := data.portcullis.index.from_data with data.portcullis.src as "mocked"
}`)
	fsys["data.json"] = mapFile(`{"portcullis": {"src": "stored"}}`)
	fsys["portcullis/index.rego"] = mapFile(`package portcullis.index
from_data := data.portcullis.src
via := from_data
from_input := input.tool
via_input := from_input
now := time.now_ns()
via_fn := _tool_of(input)
_tool_of(x) := x.tool
`)
	e := loaded(t, fsys)
	ix := e.live.Load().index
	for name, want := range map[string]bool{"from_data": true, "via": true, "from_input": false, "via_input": false, "now": false, "via_fn": false} {
		if _, got := ix.values[name]; got != want {
			t.Errorf("index rule %s precomputed = %v, want %v", name, got, want)
		}
	}
	if v := ix.values["from_data"]; v == nil || !v.Equal(ast.StringTerm("stored")) {
		t.Errorf("from_data = %v, want \"stored\"", v)
	}
	in := execInput("/usr/bin/true")
	in.Tool = "x"
	d, err := e.Decide(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allow || len(d.Reasons) != 1 || d.Reasons[0] != "mocked" {
		t.Errorf("Decide = allow %v reasons %q, want allow and [mocked]", d.Allow, d.Reasons)
	}
}

func mapFile(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

// decisionFromAST must agree with parseDecision whenever it accepts a value.
func TestDecisionFromASTAgreesWithParseDecision(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		`{"allow": true, "reasons": [], "fs_grants": [{"path": "/usr", "mode": "r"}, {"path": "/srv/work", "mode": "rw", "alias": "@project"}],
		  "network": {"posture": "allowlist", "allow": ["api.github.com:443"]}, "env": {"pass": ["GOFLAGS"], "set": {"CI": "1"}},
		  "limits": {"timeout_s": 60, "memory_bytes": 536870912, "nofile": 256}}`,
		`{"allow": true, "network": {"posture": "off", "allow": ["x:1"]}}`,
		`{"allow": false, "reasons": ["no"]}`,
		`{"allow": false}`,
		`{"allow": true, "limits": {"timeout_s": 60.5}}`,
		`{"allow": true, "limits": {"timeout_s": -1}}`,
		`{"allow": true, "fs_grants": [{"path": "/a/../b", "mode": "r"}]}`,
		`{"allow": true, "env": {"set": {"A=B": "1"}}}`,
		`{"allow": null, "reasons": [1]}`,
		`[1]`,
		`{"allow": true, "reasons": [], "rule_ids": ["grant:role/agent/Exec", "exec.shape.git.log"]}`,
		`{"allow": false, "reasons": ["no"], "rule_ids": ["grants.no_grant"]}`,
		`{"allow": true, "rule_ids": []}`,
		`{"allow": true, "rule_ids": "grants.no_grant"}`,
		`{"allow": true, "rule_ids": ["ok", 1]}`,
		`{"allow": true, "rule_ids": ["has space"]}`,
		`{"allow": false, "reasons": ["no"], "rule_ids": [""]}`,
		`{"allow": true, "rule_ids": null}`,
		`{"allow": true, "exec": {"insert": [{"at": 1, "args": ["-I"]}], "path_args": [{"index": 2}, {"index": 3, "value": true}], "exec_restrict": true, "exec_allow": ["../pkg/tool"]}}`,
		`{"allow": true, "exec": {"path_args": []}}`,
		`{"allow": true, "exec": {"path_arg": [{"index": 1}]}}`,
		`{"allow": true, "exec": {"path_args": [{"index": 0}]}}`,
		`{"allow": true, "exec": {"insert": [{"at": 1, "args": [""]}]}}`,
		`{"allow": true, "exec": {"exec_allow": ["/usr"]}}`,
		`{"allow": true, "exec": []}`,
		`{"allow": true, "fs_grants": [{"path": "/srv/dots", "mode": "rw", "alias": "@dots", "allow_autorun": true}, {"path": "/srv/w", "mode": "rw", "allow_autorun": false}]}`,
		`{"allow": true, "fs_grants": [{"path": "/srv/dots", "mode": "rw", "allow_autorun": "yes"}, {"path": "/srv/w", "mode": "r"}]}`,
		`{"allow": true, "fs_grants": [{"alias": "@state", "mode": "rw"}, {"path": "/srv/w", "mode": "r"}]}`,
		`{"allow": true, "fs_grants": [{"alias": "@state", "mode": "rw", "path": ""}]}`,
		`{"allow": true, "fs_grants": [{"alias": "@state", "mode": "rw", "path": "/srv/elsewhere"}, {"path": "/srv/w", "mode": "r"}]}`,
		`{"allow": true, "fs_grants": [{"alias": "@state", "mode": "rw", "path": 7}]}`,
		`{"allow": true, "fs_grants": [{"alias": "@other", "mode": "rw"}]}`,
		`{"allow": true, "quotas": [{"key": "a/Exec", "limit": 10, "window_s": 60}, {"key": "a/*", "limit": 0, "window_s": 3600, "cost": 2}]}`,
		`{"allow": true, "quotas": []}`,
		`{"allow": true, "quotas": [{"key": "a", "limit": 1, "window_s": 1, "extra": 1}]}`,
		`{"allow": true, "quotas": [{"key": "a", "limit": 1}]}`,
		`{"allow": true, "quotas": [{"key": "", "limit": 1, "window_s": 1}]}`,
		`{"allow": true, "quotas": [{"key": "a", "limit": 1.5, "window_s": 1}]}`,
		`{"allow": true, "quotas": [{"key": "a", "limit": 1, "window_s": 1, "cost": 0}]}`,
		`{"allow": true, "quotas": {"key": "a"}}`,
		`{"allow": true, "approval": {"required": true}}`,
	} {
		v := ast.MustParseTerm(src).Value
		x, err := ast.JSON(v)
		if err != nil {
			t.Fatal(err)
		}
		want := parseDecision(x)
		if got, ok := decisionFromAST(v); ok {
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: (-parseDecision +decisionFromAST):\n%s", src, diff)
			}
		}
		if got, err := decisionOf(ast.NewTerm(v)); err != nil || !cmp.Equal(want, got) {
			t.Errorf("%s: decisionOf = %+v, %v; want %+v", src, got, err, want)
		}
	}
}

// TestParseExec: the Exec plan is read exactly; anything malformed denies
// the call (a dropped path check or forced flag would widen access).
func TestParseExec(t *testing.T) {
	t.Parallel()
	ok := map[string]wire.ExecPlan{
		`{}`: {},
		`{"insert": [{"at": 1, "args": ["-I", "-X", "pycache_prefix=${HOME}/c"]}, {"at": 3, "args": ["--isolated"]}]}`: {
			Insert: []wire.ArgInsert{{At: 1, Args: []string{"-I", "-X", "pycache_prefix=${HOME}/c"}}, {At: 3, Args: []string{"--isolated"}}},
		},
		`{"path_args": [{"index": 2}, {"index": 4, "value": true}]}`:                  {PathArgs: []wire.PathArg{{Index: 2}, {Index: 4, Value: true}}},
		`{"exec_restrict": true, "exec_allow": ["/usr/lib/git-core", "../pkg/tool"]}`: {ExecRestrict: true, ExecAllow: []string{"/usr/lib/git-core", "../pkg/tool"}},
		`{"exec_restrict": true, "exec_allow": []}`:                                   {ExecRestrict: true},
	}
	for src, want := range ok {
		d := parseDecision(jsonValue(t, `{"allow": true, "exec": `+src+`}`))
		if !d.Allow || d.Exec == nil {
			t.Errorf("%s: denied (%v)", src, d.Reasons)
			continue
		}
		if diff := cmp.Diff(want, *d.Exec, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: (-want +got):\n%s", src, diff)
		}
	}
	for _, src := range []string{
		`[]`, `"x"`, `{"unknown": 1}`, `{"insert": {}}`, `{"insert": [{"at": 0, "args": ["x"]}]}`,
		`{"insert": [{"at": 1.5, "args": ["x"]}]}`, `{"insert": [{"at": 1}]}`, `{"insert": [{"at": 1, "args": ["x"], "extra": 1}]}`,
		`{"insert": [{"at": 1, "args": [""]}]}`, `{"insert": [{"at": 1, "args": ["a\u0000"]}]}`, `{"insert": [{"at": 1, "args": [1]}]}`,
		`{"path_args": {}}`, `{"path_args": [1]}`, `{"path_args": [{}]}`, `{"path_args": [{"index": -1}]}`,
		`{"path_args": [{"index": 1, "value": "yes"}]}`, `{"path_args": [{"index": 1, "kind": "r"}]}`,
		`{"exec_restrict": "true"}`, `{"exec_allow": ["/usr"]}`, `{"exec_restrict": true, "exec_allow": "/usr"}`,
		`{"exec_restrict": true, "exec_allow": [""]}`,
	} {
		d := parseDecision(jsonValue(t, `{"allow": true, "exec": `+src+`}`))
		if d.Allow || d.Exec != nil || len(d.Reasons) == 0 || !strings.Contains(d.Reasons[len(d.Reasons)-1], "policy exec is malformed") {
			t.Errorf("%s: allow %v exec %+v reasons %v, want a denial noting the malformed exec", src, d.Allow, d.Exec, d.Reasons)
		}
	}
}

func jsonValue(t *testing.T, src string) any {
	t.Helper()
	v, err := ast.JSON(ast.MustParseTerm(src).Value)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAllowAutorunParsed: a grant's allow_autorun reaches the decision (the
// autorun guard's per-grant lift); a non-boolean drops the grant.
func TestAllowAutorunParsed(t *testing.T) {
	t.Parallel()
	d := parseDecision(map[string]any{"allow": true, "fs_grants": []any{
		map[string]any{"path": "/a", "mode": "rw", "allow_autorun": true},
		map[string]any{"path": "/b", "mode": "rw"},
		map[string]any{"path": "/c", "mode": "rw", "allow_autorun": "yes"},
	}})
	if len(d.FSGrants) != 2 || !d.FSGrants[0].AllowAutorun || d.FSGrants[1].AllowAutorun {
		t.Errorf("grants %+v, want /a with allow_autorun, /b without, /c dropped", d.FSGrants)
	}
}

// TestStateGrant: @state takes no path from the policy (the gateway binds
// it per session); a policy that names one loses the grant, and any other
// alias still needs a path.
func TestStateGrant(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		src   string
		want  []wire.FSGrant
		noted bool
	}{
		{`[{"alias": "@state", "mode": "rw"}]`, []wire.FSGrant{{Alias: wire.AliasState, Mode: wire.ModeReadWrite}}, false},
		{`[{"alias": "@state", "mode": "r", "path": ""}]`, []wire.FSGrant{{Alias: wire.AliasState, Mode: wire.ModeRead}}, false},
		{`[{"alias": "@state", "mode": "rw", "path": "/etc"}]`, []wire.FSGrant{}, true},
		{`[{"alias": "@state", "mode": "rwx"}]`, []wire.FSGrant{}, true},
		{`[{"alias": "@project", "mode": "rw"}]`, []wire.FSGrant{}, true},
	} {
		d := parseDecision(jsonValue(t, `{"allow": true, "fs_grants": `+c.src+`}`))
		if diff := cmp.Diff(c.want, d.FSGrants, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: (-want +got):\n%s", c.src, diff)
		}
		if noted := strings.Contains(strings.Join(d.Reasons, "\n"), "fs_grants[0] dropped"); noted != c.noted {
			t.Errorf("%s: reasons %q, want a dropped note: %v", c.src, d.Reasons, c.noted)
		}
	}
}
