package policies

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/wire"
)

var fixedNow = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// shippedMap copies the shipped bundle into a MapFS, with files replaced or
// added by overrides (a nil value deletes the file).
func shippedMap(t testing.TB, overrides map[string]*string) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	err := fs.WalkDir(Shipped(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(Shipped(), p)
		if err != nil {
			return err
		}
		m[p] = &fstest.MapFile{Data: b}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, s := range overrides {
		if s == nil {
			delete(m, p)
			continue
		}
		m[p] = &fstest.MapFile{Data: []byte(*s)}
	}
	return m
}

func str(s string) *string { return &s }

// policyFS is a minimal bundle whose decision rule is body.
func policyFS(body string) fstest.MapFS {
	return fstest.MapFS{
		".manifest":         {Data: []byte(`{"roots": ["portcullis"]}`)},
		"portcullis/p.rego": {Data: []byte("package portcullis\n\n" + body + "\n")},
	}
}

func loaded(t testing.TB, fsys fs.FS) *Engine {
	t.Helper()
	e := NewEngine(Options{Now: func() time.Time { return fixedNow }})
	if _, err := e.Load(context.Background(), fsys, "test"); err != nil {
		t.Fatalf("Load: %v", err)
	}
	return e
}

func execInput(argv ...string) wire.PolicyInput {
	base := argv[0][strings.LastIndex(argv[0], "/")+1:]
	av := make([]any, len(argv))
	for i, a := range argv {
		av[i] = a
	}
	return wire.PolicyInput{
		Principal: wire.Principal{ID: "agent-alpha", Roles: []string{"agent"}, Attributes: map[string]any{}},
		Tool:      "Exec",
		Purpose:   wire.PurposeCall,
		Args:      map[string]any{"argv": av, "timeout_s": 30},
		Resolved:  map[string]any{"argv0": argv[0], "argv0_base": base, "argv": av, "cwd": "", "env_names": []string{}},
		SessionID: "run-42",
		CallID:    "call_abc",
		Time:      fixedNow,
	}
}

// TestShippedRegoTests runs the shipped library's Rego tests through OPA's
// tester: a failing Rego test fails here.
func TestShippedRegoTests(t *testing.T) {
	t.Parallel()
	results, err := RunTests(context.Background(), Shipped())
	if err != nil {
		t.Fatalf("RunTests: %v", err)
	}
	if len(results) < 30 {
		t.Fatalf("ran %d Rego tests, want the whole shipped suite (>= 30)", len(results))
	}
	for _, r := range results {
		t.Run(r.Package+"."+r.Name, func(t *testing.T) {
			if !r.Pass {
				t.Errorf("%s", r.Fail)
			}
		})
	}
}

// TestRunTestsReportsFailures proves RunTests does not hide a failing or
// erroring test.
func TestRunTestsReportsFailures(t *testing.T) {
	t.Parallel()
	fsys := policyFS(`decision := {"allow": false}

test_passes if decision.allow == false
test_fails if decision.allow == true
test_errors if 1 / 0 == 1`)
	results, err := RunTests(context.Background(), fsys)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range results {
		got[r.Name] = r.Pass
		if !r.Pass && r.Fail == "" {
			t.Errorf("%s failed without saying why", r.Name)
		}
	}
	want := map[string]bool{"test_passes": true, "test_fails": false, "test_errors": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

func TestRunTestsBadBundle(t *testing.T) {
	t.Parallel()
	if _, err := RunTests(context.Background(), policyFS("decision := ")); err == nil {
		t.Fatal("RunTests on an unparsable bundle: want error")
	}
}

func TestDecideWithoutPolicy(t *testing.T) {
	t.Parallel()
	e := NewEngine(Options{})
	if e.Ready() {
		t.Error("Ready before Load")
	}
	if _, ok := e.Info(); ok {
		t.Error("Info ok before Load")
	}
	_, err := e.Decide(context.Background(), execInput("/usr/bin/echo", "hi"))
	if !errors.Is(err, ErrNoPolicy) {
		t.Fatalf("Decide without policy: err = %v, want ErrNoPolicy", err)
	}
}

func TestDecideFailsClosed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		body    string
		want    wire.Decision
		wantErr bool
	}{
		{
			name: "undefined decision",
			body: `decision := {"allow": true} if input.tool == "nothing"`,
			want: deny("policy returned no decision"),
		},
		{
			name:    "evaluation error",
			body:    "decision := {\"allow\": true} if input.tool\ndecision := {\"allow\": false} if input.tool",
			wantErr: true,
		},
		{
			name: "allow is a string",
			body: `decision := {"allow": "true"}`,
			want: deny("policy allow is a string, not a boolean: denied"),
		},
		{
			name: "allow is one",
			body: `decision := {"allow": 1, "reasons": ["r"]}`,
			want: withReasons(deny(""), "r", "policy allow is a number, not a boolean: denied"),
		},
		{
			name: "decision not an object",
			body: `decision := true`,
			want: deny("policy decision is a boolean, not an object"),
		},
		{
			name: "malformed fs_deny denies rather than widening access",
			body: `decision := {"allow": true, "fs_deny": ["relative/path"]}`,
			want: deny("policy fs_deny[0] is not a clean absolute path: call denied"),
		},
		{
			name: "fs_deny not a list denies",
			body: `decision := {"allow": true, "fs_deny": "/home"}`,
			want: deny("policy fs_deny is a string, not an array of absolute paths: call denied"),
		},
		{
			name: "rule_ids not an array denies",
			body: `decision := {"allow": true, "rule_ids": "grants.no_grant"}`,
			want: deny("policy rule_ids is a string, not an array of rule ids: call denied"),
		},
		{
			name: "rule id of the wrong type denies",
			body: `decision := {"allow": true, "rule_ids": ["a.b", 7]}`,
			want: deny("policy rule_ids[1] is not a rule id (1-128 of A-Z a-z 0-9 _ . : / -): call denied"),
		},
		{
			name: "rule id with a bad character denies",
			body: `decision := {"allow": true, "rule_ids": ["exec.shape.git log"]}`,
			want: deny("policy rule_ids[0] is not a rule id (1-128 of A-Z a-z 0-9 _ . : / -): call denied"),
		},
		{
			name: "empty rule id denies",
			body: `decision := {"allow": true, "rule_ids": [""]}`,
			want: deny("policy rule_ids[0] is not a rule id (1-128 of A-Z a-z 0-9 _ . : / -): call denied"),
		},
		{
			name: "too long rule id denies",
			body: `decision := {"allow": true, "rule_ids": ["ok", concat("", ["a" | some _ in numbers.range(1, 129)])]}`,
			want: deny("policy rule_ids[1] is not a rule id (1-128 of A-Z a-z 0-9 _ . : / -): call denied"),
		},
		{
			name: "too many rule ids deny",
			body: `decision := {"allow": true, "rule_ids": [sprintf("r%d", [i]) | some i in numbers.range(1, 33)]}`,
			want: deny("policy rule_ids has 33 entries, more than 32: call denied"),
		},
		{
			name: "rule ids of a denial are kept with its reasons",
			body: `decision := {"allow": false, "reasons": ["no grant"], "rule_ids": ["grants.no_grant", "exec.env_deny"]}`,
			want: withRuleIDs(deny("no grant"), "grants.no_grant", "exec.env_deny"),
		},
		{
			name: "32 valid rule ids allow",
			body: `decision := {"allow": true, "rule_ids": [sprintf("r%d", [i]) | some i in numbers.range(1, 32)]}`,
			want: allowWithRuleIDs(32),
		},
		{
			name: "plain deny gets a reason",
			body: `decision := {"allow": false}`,
			want: deny("policy did not allow the call"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := loaded(t, policyFS(tt.body))
			got, err := e.Decide(context.Background(), execInput("/usr/bin/echo", "hi"))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Decide = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			info, _ := e.Info()
			tt.want.PolicyRevision = info.Revision
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFSDenyReachesTheDecision: a well-formed fs_deny is carried to the
// decision (and so to the sandbox), on the fast and the general path alike.
func TestFSDenyReachesTheDecision(t *testing.T) {
	t.Parallel()
	e := loaded(t, policyFS(`decision := {"allow": true, "fs_deny": ["/srv/work/secrets", "/srv/work/.env"]}`))
	got, err := e.Decide(context.Background(), execInput("/usr/bin/echo", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Allow || !slices.Equal(got.FSDeny, []string{"/srv/work/secrets", "/srv/work/.env"}) {
		t.Errorf("decision = %+v, want allow with both fs_deny paths", got)
	}
}

// TestAllowAutorunReachesTheDecision: a grant's allow_autorun: true lifts
// the file tools' autorun guard only for that grant, on the fast and the
// general path alike; anything but a boolean drops the grant (fail closed).
func TestAllowAutorunReachesTheDecision(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, body string
		want       []wire.FSGrant
	}{
		{"fast path", `decision := {"allow": true, "fs_grants": [{"path": "/srv/dots", "mode": "rw", "allow_autorun": true}, {"path": "/srv/w", "mode": "rw"}]}`,
			[]wire.FSGrant{{Path: "/srv/dots", Mode: "rw", AllowAutorun: true}, {Path: "/srv/w", Mode: "rw"}}},
		{"general path", `decision := {"allow": true, "fs_deny": ["/x"], "fs_grants": [{"path": "/srv/dots", "mode": "rw", "allow_autorun": true}, {"path": "/srv/w", "mode": "rw", "allow_autorun": false}]}`,
			[]wire.FSGrant{{Path: "/srv/dots", Mode: "rw", AllowAutorun: true}, {Path: "/srv/w", Mode: "rw"}}},
		{"not a boolean drops the grant", `decision := {"allow": true, "fs_grants": [{"path": "/srv/dots", "mode": "rw", "allow_autorun": "true"}, {"path": "/srv/w", "mode": "r"}]}`,
			[]wire.FSGrant{{Path: "/srv/w", Mode: "r"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := loaded(t, policyFS(c.body))
			got, err := e.Decide(context.Background(), execInput("/usr/bin/echo", "hi"))
			if err != nil {
				t.Fatal(err)
			}
			if !got.Allow || !slices.Equal(got.FSGrants, c.want) {
				t.Errorf("fs_grants = %+v, want %+v", got.FSGrants, c.want)
			}
		})
	}
}

func withRuleIDs(d wire.Decision, ids ...string) wire.Decision {
	d.RuleIDs = ids
	return d
}

// allowWithRuleIDs is an allow with no grants whose rule ids are r1..rn.
func allowWithRuleIDs(n int) wire.Decision {
	d := deny("")
	d.Allow, d.Reasons = true, []string{}
	for i := 1; i <= n; i++ {
		d.RuleIDs = append(d.RuleIDs, fmt.Sprintf("r%d", i))
	}
	return d
}

func withReasons(d wire.Decision, rs ...string) wire.Decision {
	d.Reasons = rs
	return d
}

func TestLoadErrorKeepsLivePolicy(t *testing.T) {
	t.Parallel()
	e := loaded(t, Shipped())
	before, _ := e.Info()
	bad := []struct {
		name string
		fsys fs.FS
	}{
		{"syntax error", shippedMap(t, map[string]*string{"portcullis/extra.rego": str("package portcullis\nx := ")})},
		{"bad data", shippedMap(t, map[string]*string{"data.json": str("{not json")})},
		{"outside roots", shippedMap(t, map[string]*string{"other/p.rego": str("package other\nx := 1")})},
		{"empty", fstest.MapFS{}},
		{"query undefined at compile", policyFS("x := 1 +")},
	}
	for _, b := range bad {
		if _, err := e.Load(context.Background(), b.fsys, b.name); err == nil {
			t.Errorf("%s: Load succeeded, want error", b.name)
		}
	}
	after, ok := e.Info()
	if !ok {
		t.Fatal("no policy after failed loads")
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("live policy changed by failed loads (-before +after):\n%s", diff)
	}
	d, err := e.Decide(context.Background(), execInput("/usr/bin/echo", "hi"))
	if err != nil || !d.Allow {
		t.Fatalf("Decide after failed loads = %+v, %v; want the shipped allow", d, err)
	}
}

func TestInfo(t *testing.T) {
	t.Parallel()
	e := loaded(t, Shipped())
	info, ok := e.Info()
	if !ok || !e.Ready() {
		t.Fatal("not ready after Load")
	}
	if len(info.Digest) != 64 || info.Revision != "sha256:"+info.Digest[:12] {
		t.Errorf("revision %q digest %q: want sha256:<12 hex of digest>", info.Revision, info.Digest)
	}
	if !info.LoadedAt.Equal(fixedNow) || info.Source != "test" {
		t.Errorf("LoadedAt %v Source %q", info.LoadedAt, info.Source)
	}
	for _, f := range []string{".manifest", "data.json", "portcullis/decision.rego"} {
		found := false
		for _, g := range info.Files {
			found = found || g == f
		}
		if !found {
			t.Errorf("Files %v lacks %s", info.Files, f)
		}
	}

	// Same content, same digest; any change, a new digest.
	again := loaded(t, shippedMap(t, nil))
	info2, _ := again.Info()
	if info2.Digest != info.Digest {
		t.Errorf("digest differs for identical content: %s vs %s", info2.Digest, info.Digest)
	}
	changed := loaded(t, shippedMap(t, map[string]*string{"portcullis/extra.rego": str("package portcullis.extra\nx := 1\n")}))
	info3, _ := changed.Info()
	if info3.Digest == info.Digest {
		t.Error("digest unchanged after adding a file")
	}

	// A manifest revision wins.
	rev := loaded(t, shippedMap(t, map[string]*string{".manifest": str(`{"roots": ["portcullis"], "revision": "v42"}`)}))
	info4, _ := rev.Info()
	if info4.Revision != "v42" {
		t.Errorf("Revision = %q, want manifest revision v42", info4.Revision)
	}
	d, err := rev.Decide(context.Background(), execInput("/usr/bin/echo", "hi"))
	if err != nil || d.PolicyRevision != "v42" {
		t.Errorf("Decide revision = %q, %v; want v42", d.PolicyRevision, err)
	}
}

func TestLoadDir(t *testing.T) {
	t.Parallel()
	e := NewEngine(Options{})
	info, err := e.LoadDir(context.Background(), "bundle")
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	shipped := loaded(t, Shipped())
	want, _ := shipped.Info()
	if info.Digest != want.Digest {
		t.Errorf("directory digest %s != embedded digest %s", info.Digest, want.Digest)
	}
	if _, err := e.LoadDir(context.Background(), "no/such/dir"); err == nil {
		t.Error("LoadDir of a missing directory: want error")
	}
}

// TestConcurrentDecideDuringLoad swaps between two revisions that answer
// differently while decisions run: each decision must be the one its
// revision gives, never a mix.
func TestConcurrentDecideDuringLoad(t *testing.T) {
	t.Parallel()
	revA := shippedMap(t, map[string]*string{".manifest": str(`{"roots": ["portcullis"], "revision": "A"}`)})
	revB := shippedMap(t, map[string]*string{
		".manifest": str(`{"roots": ["portcullis"], "revision": "B"}`),
		"data.json": str(`{"portcullis": {"config": {"roles": {"agent": {"tools": {}}}}}}`),
	})
	e := loaded(t, revA)
	ctx := context.Background()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var seen [2]atomic.Int64
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				d, err := e.Decide(ctx, execInput("/usr/bin/echo", "hi"))
				if err != nil {
					t.Errorf("Decide: %v", err)
					return
				}
				switch d.PolicyRevision {
				case "A":
					seen[0].Add(1)
					if !d.Allow || len(d.FSGrants) != 1 {
						t.Errorf("revision A decided %+v, want allow with /usr", d)
					}
				case "B":
					seen[1].Add(1)
					if d.Allow || len(d.Reasons) != 1 || d.Reasons[0] != "tool Exec not granted to agent-alpha" {
						t.Errorf("revision B decided %+v, want not granted", d)
					}
				default:
					t.Errorf("unknown revision %q", d.PolicyRevision)
				}
			}
		})
	}
	for i := range 20 {
		fsys := revA
		if i%2 == 0 {
			fsys = revB
		}
		if _, err := e.Load(ctx, fsys, "swap"); err != nil {
			t.Errorf("Load: %v", err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if seen[0].Load() == 0 || seen[1].Load() == 0 {
		t.Errorf("decisions per revision A=%d B=%d: want both seen", seen[0].Load(), seen[1].Load())
	}
}

// TestDeniedBuiltinsRefused: a policy that would send packets (http.send,
// net.lookup_ip_addr) or read the gateway's runtime (opa.runtime) does not
// compile, in the decision or in its own tests, so a dry run or a listing
// can never reach the network through the policy.
func TestDeniedBuiltinsRefused(t *testing.T) {
	t.Parallel()
	hits := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.URL.Path
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	cases := map[string]string{
		"http.send":          `decision := {"allow": true} if { http.send({"method": "GET", "url": "` + srv.URL + `/decide"}) }`,
		"net.lookup_ip_addr": `decision := {"allow": true} if { net.lookup_ip_addr("localhost") }`,
		"opa.runtime":        `decision := {"allow": true, "reasons": [sprintf("%v", [opa.runtime()])]}`,
		"http.send in tests": "decision := {\"allow\": false}\ntest_x if { http.send({\"method\": \"GET\", \"url\": \"" + srv.URL + "/test\"}) }",
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := NewEngine(Options{Now: func() time.Time { return fixedNow }})
			_, err := e.LoadWith(context.Background(), policyFS(body), name, LoadOptions{RunTests: true})
			if err == nil {
				t.Fatalf("Load succeeded; want a compile error naming the built-in")
			}
			builtin, _, _ := strings.Cut(name, " ")
			if !strings.Contains(err.Error(), builtin) {
				t.Errorf("error %q does not name %s", err, builtin)
			}
		})
	}
	t.Cleanup(func() {
		select {
		case p := <-hits:
			t.Errorf("a policy reached the network: %s", p)
		default:
		}
	})
}
