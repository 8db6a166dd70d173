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
	own := filepath.Join(root, statedir.Name(agentFull, "s1"))
	for _, dir := range []string{root, own} {
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
	var names []string
	if ents, err := os.ReadDir(root); err == nil {
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	want := []string{statedir.Name(agentFull, "s1"), statedir.Name(agentFull, "s2"), statedir.Name(agentNarrow, "s1")}
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
}
