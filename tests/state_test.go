package tests

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/gateway/statedir"
)

// TestStateDirPerSession drives @state through the real binary: a policy
// grants {"alias": "@state", "mode": "rw"} with no path, and each
// principal's session gets its own private directory under
// data_dir/state. Another session of the same principal, or the same
// session id under another principal, cannot read it by alias or by its
// absolute path (file tools and Exec); a call without a session gets no
// @state at all; a symlink the agent plants in its own state does not lead
// out of it.
func TestStateDirPerSession(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"bwrap", "process"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			if backend == "bwrap" {
				requireBwrap(t)
			}
			testStateDir(t, newDeploymentWith(t, storeSQLite, backend), backend)
		})
	}
}

func testStateDir(t *testing.T, d *deployment, backend string) {
	stateGrants := []map[string]any{{"path": "/usr", "mode": "r"}, {"alias": "@state", "mode": "rw"}}
	editPrincipals(t, d, func(ps map[string]map[string]any) {
		for _, p := range []string{agentFull, agentNarrow} {
			ps[p]["tools"] = []string{"Exec", "fs.read", "fs.write", "fs.list"}
			ps[p]["fs_grants"] = stateGrants
		}
	})
	// A small cap on state directories per principal, to try to pass it.
	cfg, err := os.ReadFile(d.configPath)
	if err != nil {
		t.Fatal(err)
	}
	patched := strings.Replace(string(cfg), "sandbox:\n", "sandbox:\n  state_max_per_principal: 3\n", 1)
	if patched == string(cfg) {
		t.Fatal("could not patch the sandbox section of the config")
	}
	writeFile(t, d.configPath, []byte(patched))
	g := d.start(t)
	call := func(t *testing.T, who, session, tool string, input map[string]any) *toolCallResult {
		t.Helper()
		body := map[string]any{"tool": tool, "input": input, "call_id": "st"}
		if session != "" {
			body["session_id"] = session
		}
		return g.call(t, d.keys[who], body)
	}
	const secret = "S1_STATE_ONLY"

	w := call(t, agentFull, "s1", "fs.write", map[string]any{"path": "@state/notes.md", "content": secret + "\n", "ifMatchSha256": ""})
	if !w.Output.Success {
		t.Fatalf("fs.write @state/notes.md in session s1: %s", w.response)
	}
	if r := call(t, agentFull, "s1", "fs.read", map[string]any{"path": "@state/notes.md"}); !r.Output.Success || !strings.Contains(string(r.Output.Data), secret) {
		t.Fatalf("the same session reads its state back: %s", r.response)
	}

	root := filepath.Join(d.dataDir, "state")
	own := filepath.Join(root, statedir.Rel(agentFull, "s1"))
	for _, dir := range []string{root, filepath.Dir(own), own} {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want a 0700 directory", dir, fi, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(own, "notes.md")); err != nil || string(b) != secret+"\n" {
		t.Fatalf("session s1's state is not at %s: %q %v", own, b, err)
	}

	// Under bwrap, Exec sees the state read-write; under the process
	// backend programs run as nobody and the 0700 directory is closed to
	// them (docs/policies.md).
	cat := call(t, agentFull, "s1", "Exec", map[string]any{"argv": []string{"/usr/bin/cat", filepath.Join(own, "notes.md")}})
	if got := strings.Contains(cat.exec(t).Stdout, secret); got != (backend == "bwrap") {
		t.Errorf("%s: Exec cat of its own state: read it %v: %s", backend, got, cat.response)
	}

	// Others: by alias, by absolute path, through Exec.
	for _, c := range []struct{ name, who, session string }{
		{"another session", agentFull, "s2"},
		{"the same session id under another principal", agentNarrow, "s1"},
		{"no session", agentFull, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, in := range []struct {
				tool  string
				input map[string]any
			}{
				{"fs.read", map[string]any{"path": "@state/notes.md"}},
				{"fs.read", map[string]any{"path": filepath.Join(own, "notes.md")}},
				{"fs.list", map[string]any{"path": own}},
				{"Exec", map[string]any{"argv": []string{"/usr/bin/cat", filepath.Join(own, "notes.md")}}},
			} {
				res := call(t, c.who, c.session, in.tool, in.input)
				if strings.Contains(string(res.body), secret) || strings.Contains(string(res.body), "notes.md\"") && in.tool == "fs.list" && res.Output.Success {
					t.Errorf("%s %v reached session s1's state: %s", in.tool, in.input, res.response)
				}
				if in.tool != "Exec" && res.Output.Success {
					t.Errorf("%s %v succeeded: %s", in.tool, in.input, res.response)
				}
			}
		})
	}
	// Without a session the grant is dropped, and the receipt says why.
	res := call(t, agentFull, "", "fs.write", map[string]any{"path": "@state/x.md", "content": "x", "ifMatchSha256": ""})
	if res.Output.Success {
		t.Fatalf("fs.write @state without a session: %s", res.response)
	}
	if rc, ok := g.getReceipt(t, res.ReceiptID); !ok || !strings.Contains(strings.Join(rc.Reasons, "\n"), "@state grant dropped") {
		t.Errorf("receipt of a sessionless @state call does not say the grant was dropped: %+v", rc.Reasons)
	}
	names := stateDirsUnder(t, root)
	want := []string{statedir.Rel(agentFull, "s1"), statedir.Rel(agentFull, "s2"), statedir.Rel(agentNarrow, "s1")}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("state root holds %v, want one directory per principal and session %v (none for the sessionless calls)", names, want)
	}

	// A symlink planted in its own state leads nowhere outside it.
	if r := call(t, agentFull, "s1", "Exec", map[string]any{"argv": []string{"/usr/bin/ln", "-s", "/etc", filepath.Join(own, "etc")}}); r.status != http.StatusOK {
		t.Fatalf("Exec ln -s in own state: %s", r.response)
	}
	for _, p := range []string{"@state/etc/passwd", filepath.Join(own, "etc", "passwd")} {
		if r := call(t, agentFull, "s1", "fs.read", map[string]any{"path": p}); r.Output.Success || strings.Contains(string(r.body), "root:") {
			t.Errorf("fs.read %s through a planted symlink: %s", p, r.response)
		}
	}

	// Varying session_id cannot make a principal unbounded directories:
	// at the cap (3 here) a new session is refused with rate_limited and
	// Retry-After, a receipt, and no directory; a known session still works.
	if r := call(t, agentFull, "s3", "fs.write", map[string]any{"path": "@state/x.md", "content": "x", "ifMatchSha256": ""}); !r.Output.Success {
		t.Fatalf("a third session under a cap of 3: %s", r.response)
	}
	over := call(t, agentFull, "s4", "fs.write", map[string]any{"path": "@state/x.md", "content": "x", "ifMatchSha256": ""})
	if over.status != http.StatusTooManyRequests || over.Output.Error == nil || over.Output.Error.Code != "rate_limited" || over.header.Get("Retry-After") == "" {
		t.Fatalf("a fourth session past the cap: %d %s (Retry-After %q), want 429 rate_limited", over.status, over.response, over.header.Get("Retry-After"))
	}
	if _, ok := g.getReceipt(t, over.ReceiptID); !ok {
		t.Errorf("the refused call has no receipt")
	}
	if slices.Contains(stateDirsUnder(t, root), statedir.Rel(agentFull, "s4")) {
		t.Errorf("the refused session got a directory")
	}
	if r := call(t, agentFull, "s2", "fs.list", map[string]any{"path": "@state"}); !r.Output.Success {
		t.Errorf("a known session at the cap: %s", r.response)
	}
}

// stateDirsUnder lists root's state directories as paths relative to it
// (principal/session), sorted.
func stateDirsUnder(t *testing.T, root string) []string {
	t.Helper()
	var names []string
	ps, _ := os.ReadDir(root)
	for _, p := range ps {
		ss, _ := os.ReadDir(filepath.Join(root, p.Name()))
		for _, s := range ss {
			names = append(names, filepath.Join(p.Name(), s.Name()))
		}
	}
	slices.Sort(names)
	return names
}
