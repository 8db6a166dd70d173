package sandbox

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/wire"
)

// tmpTree is a real temporary directory (symlinks resolved).
func tmpTree(t testing.TB) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func put(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func rwSpec(paths ...string) Spec {
	s := Spec{Scope: wire.Scope{Network: wire.Network{Posture: wire.PostureOff}}}
	for _, p := range paths {
		s.Scope.FSGrants = append(s.Scope.FSGrants, wire.FSGrant{Path: p, Mode: wire.ModeReadWrite})
	}
	return s
}

func mustBuild(t testing.TB, c *Cache, s Spec) (Profile, *Window) {
	t.Helper()
	p, w, err := c.Build(s)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return p, w
}

func deep(root string, n int, leaf string) string {
	p := root
	for i := range n {
		p = filepath.Join(p, fmt.Sprintf("d%d", i))
	}
	return filepath.Join(p, leaf)
}

// TestCacheHidesSecretsAtEveryDepth: secret-shaped names 1, 5 and 12
// levels down are all masked; a secret directory is masked whole.
func TestCacheHidesSecretsAtEveryDepth(t *testing.T) {
	t.Parallel()
	root := tmpTree(t)
	a, b, c12 := filepath.Join(root, ".env"), deep(root, 5, "server.key"), deep(root, 12, ".env.production")
	for _, p := range []string{a, b, c12, deep(root, 7, ".aws/credentials"), deep(root, 7, "ok.txt")} {
		put(t, p, "x")
	}
	cache := NewCache(ProfileOptions{UserHome: "/nonexistent"})
	defer cache.Close()
	p, w := mustBuild(t, cache, rwSpec(root))
	defer w.Close()
	want := []string{a, b, c12}
	slices.Sort(want)
	if !slices.Equal(p.DenyFiles, want) {
		t.Errorf("deny files %v, want %v", p.DenyFiles, want)
	}
	if d := []string{filepath.Dir(deep(root, 7, ".aws/x"))}; !slices.Equal(p.DenyDirs, d) {
		t.Errorf("deny dirs %v, want %v", p.DenyDirs, d)
	}
}

// TestCacheFollowsChanges: after the cache is warm, what another process
// (or an earlier Exec) did to the tree is seen by the next Build: a deep
// secret created, a directory holding one moved 10 levels down, a parent
// renamed, a secret deleted.
func TestCacheFollowsChanges(t *testing.T) {
	t.Parallel()
	root := tmpTree(t)
	put(t, filepath.Join(root, "proj/cfg/.env"), "s")
	put(t, deep(filepath.Join(root, "src"), 3, "main.go"), "x")
	cache := NewCache(ProfileOptions{UserHome: "/nonexistent"})
	defer cache.Close()
	spec := rwSpec(root)
	check := func(what string, want ...string) {
		t.Helper()
		p, w := mustBuild(t, cache, spec)
		w.Close()
		slices.Sort(want)
		if !slices.Equal(p.DenyFiles, want) {
			t.Errorf("%s: deny files %v, want %v", what, p.DenyFiles, want)
		}
		fresh, err := BuildProfile(spec, ProfileOptions{UserHome: "/nonexistent"})
		if err != nil || !slices.Equal(fresh.DenyFiles, p.DenyFiles) {
			t.Errorf("%s: the cache says %v, a fresh search %v (%v)", what, p.DenyFiles, fresh.DenyFiles, err)
		}
	}
	check("warm", filepath.Join(root, "proj/cfg/.env"))

	late := deep(filepath.Join(root, "src"), 12, ".env")
	put(t, late, "s")
	check("deep secret created", filepath.Join(root, "proj/cfg/.env"), late)

	far := deep(filepath.Join(root, "src"), 10, "cfg")
	if err := os.Rename(filepath.Join(root, "proj/cfg"), far); err != nil {
		t.Fatal(err)
	}
	check("directory moved 10 levels down", filepath.Join(far, ".env"), late)

	if err := os.Rename(filepath.Join(root, "src"), filepath.Join(root, "src2")); err != nil {
		t.Fatal(err)
	}
	moved := func(p string) string { return strings.Replace(p, root+"/src/", root+"/src2/", 1) }
	check("parent renamed", moved(filepath.Join(far, ".env")), moved(late))

	if err := os.Remove(moved(late)); err != nil {
		t.Fatal(err)
	}
	check("secret deleted", moved(filepath.Join(far, ".env")))
}

// TestCacheRefusals: a secret-shaped symlink, and a tree over the budget
// (at the first look, and after it grew), refuse the call.
func TestCacheRefusals(t *testing.T) {
	t.Parallel()
	root := tmpTree(t)
	put(t, filepath.Join(root, "a/b/c/d/e/f/x.txt"), "x")
	cache := NewCache(ProfileOptions{UserHome: "/nonexistent", MaxScanEntries: 50, MaxScanDirs: 20})
	defer cache.Close()
	_, w := mustBuild(t, cache, rwSpec(root))
	w.Close()

	for i := range 60 {
		put(t, filepath.Join(root, "a/b/c/d/e/f", fmt.Sprintf("n%d", i)), "x")
	}
	_, _, err := cache.Build(rwSpec(root))
	if !errors.Is(err, ErrScanBudget) || !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), "mask_max_entries") {
		t.Errorf("tree grown past the budget: err %v, want ErrScanBudget naming the setting", err)
	}
	big := tmpTree(t)
	for i := range 25 {
		if err := os.MkdirAll(filepath.Join(big, fmt.Sprintf("d%d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := cache.Build(rwSpec(big)); !errors.Is(err, ErrScanBudget) {
		t.Errorf("too many directories: err %v, want ErrScanBudget", err)
	}

	small := tmpTree(t)
	if err := os.MkdirAll(deep(small, 8, ""), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", deep(small, 8, ".env")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cache.Build(rwSpec(small)); !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("deep symlinked .env: err %v, want a refusal naming the symlink", err)
	}
}

// TestWindowVerify: a change between Build and Verify that can leave a mask
// on the wrong file fails Verify; an unrelated one does not.
func TestWindowVerify(t *testing.T) {
	t.Parallel()
	root := tmpTree(t)
	put(t, filepath.Join(root, "d/sub/.env"), "s")
	put(t, filepath.Join(root, "other/x.txt"), "x")
	cache := NewCache(ProfileOptions{UserHome: "/nonexistent"})
	defer cache.Close()
	spec := rwSpec(root)

	_, w := mustBuild(t, cache, spec)
	put(t, filepath.Join(root, "other/y.txt"), "x")
	if err := os.Mkdir(filepath.Join(root, "other/newdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := w.Verify(); err != nil {
		t.Errorf("unrelated changes: Verify = %v", err)
	}
	w.Close()

	for _, tt := range []struct {
		name   string
		change func()
	}{
		{"parent of a mask renamed", func() {
			if err := os.Rename(filepath.Join(root, "d"), filepath.Join(root, "d2")); err != nil {
				t.Fatal(err)
			}
		}},
		{"secret created", func() { put(t, filepath.Join(root, "other/deep/er/.npmrc"), "s") }},
		{"secret moved", func() {
			if err := os.Rename(filepath.Join(root, "d2/sub/.env"), filepath.Join(root, "other/.env")); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		name, change := tt.name, tt.change
		_, w := mustBuild(t, cache, spec)
		change()
		if err := w.Verify(); !errors.Is(err, ErrTreeChanged) || !errors.Is(err, ErrUnsafePath) {
			t.Errorf("%s: Verify = %v, want ErrTreeChanged", name, err)
		}
		w.Close()
	}
}

// TestCacheOverflow: events lost to a queue overflow make every open window
// fail and the next Build search afresh.
func TestCacheOverflow(t *testing.T) {
	t.Parallel()
	root := tmpTree(t)
	put(t, filepath.Join(root, "flood/x"), "x")
	cache := NewCache(ProfileOptions{UserHome: "/nonexistent"})
	defer cache.Close()
	_, w := mustBuild(t, cache, rwSpec(root))
	// More than fs.inotify.max_queued_events (16384 by default) events.
	max := 16384
	if b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events"); err == nil {
		fmt.Sscan(string(b), &max)
	}
	if max > 100000 {
		t.Skipf("max_queued_events %d too large to overflow in a test", max)
	}
	for i := range max/2 + 10 {
		f := filepath.Join(root, "flood", fmt.Sprintf("f%d", i))
		put(t, f, "")
		os.Remove(f)
	}
	put(t, deep(filepath.Join(root, "flood"), 6, ".env"), "s")
	if err := w.Verify(); !errors.Is(err, ErrTreeChanged) {
		t.Errorf("after an overflow: Verify = %v, want ErrTreeChanged", err)
	}
	w.Close()
	p, w := mustBuild(t, cache, rwSpec(root))
	w.Close()
	if want := []string{deep(filepath.Join(root, "flood"), 6, ".env")}; !slices.Equal(p.DenyFiles, want) {
		t.Errorf("after an overflow: deny files %v, want %v", p.DenyFiles, want)
	}
}

// TestCacheMatchesFreshSearch applies random renames, creations and
// removals to a tree, and after each step compares the cache's profile with
// a fresh search: the incremental bookkeeping must never drift.
func TestCacheMatchesFreshSearch(t *testing.T) {
	t.Parallel()
	root := tmpTree(t)
	rng := rand.New(rand.NewPCG(seedFromEnv(), 13))
	names := []string{"a", "b", "c", ".git", "hooks", ".env", "x.key", ".github", "workflows", ".bashrc", "config", "src", ".ssh"}
	var dirs []string
	refreshDirs := func() {
		dirs = dirs[:0]
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	refreshDirs()
	cache := NewCache(ProfileOptions{UserHome: "/nonexistent"})
	defer cache.Close()
	spec := rwSpec(root)
	spec.Scope.FSGrants = append(spec.Scope.FSGrants, wire.FSGrant{Path: root + "/a", Mode: wire.ModeRead})
	if err := os.MkdirAll(root+"/a", 0o755); err != nil {
		t.Fatal(err)
	}
	for step := range 300 {
		for range 1 + rng.IntN(6) {
			dir := dirs[rng.IntN(len(dirs))]
			name := names[rng.IntN(len(names))]
			p := filepath.Join(dir, name)
			switch rng.IntN(5) {
			case 0, 1:
				_ = os.MkdirAll(p, 0o755)
			case 2:
				_ = os.WriteFile(p, []byte("x"), 0o644)
			case 3:
				to := filepath.Join(dirs[rng.IntN(len(dirs))], names[rng.IntN(len(names))])
				if p != root+"/a" && !within(to, p) {
					_ = os.Rename(p, to)
				}
			case 4:
				if p != root+"/a" {
					_ = os.RemoveAll(p)
				}
			}
			refreshDirs()
		}
		_ = os.MkdirAll(root+"/a", 0o755)
		got, w, err := cache.Build(spec)
		w.Close()
		want, werr := BuildProfile(spec, ProfileOptions{UserHome: "/nonexistent"})
		if (err == nil) != (werr == nil) {
			t.Fatalf("step %d: cache err %v, fresh err %v", step, err, werr)
		}
		if err != nil {
			continue
		}
		fresh := NewCache(ProfileOptions{UserHome: "/nonexistent"})
		if _, w, err := fresh.Build(spec); err == nil {
			w.Close()
			cache.mu.Lock()
			c, f := cache.nodes[root], fresh.nodes[root]
			if c == nil || f == nil || c.subEntries != f.subEntries || c.subDirs != f.subDirs || len(cache.nodes) != len(fresh.nodes) {
				t.Fatalf("step %d: counts drifted: cache %+v (%d nodes), fresh %+v (%d nodes)", step, c, len(cache.nodes), f, len(fresh.nodes))
			}
			cache.mu.Unlock()
		}
		fresh.Close()
		if !slices.Equal(got.DenyFiles, want.DenyFiles) || !slices.Equal(got.DenyDirs, want.DenyDirs) || !slices.Equal(got.AutorunReadOnly, want.AutorunReadOnly) {
			t.Fatalf("step %d: cache and fresh search differ:\ncache %v %v %v\nfresh %v %v %v", step,
				got.DenyFiles, got.DenyDirs, got.AutorunReadOnly, want.DenyFiles, want.DenyDirs, want.AutorunReadOnly)
		}
	}
}

// TestAutorunGuardBinds: inside a read-write grant, existing guarded files
// and directories are bound read-only (a guarded symlink's target when it
// is writable); allow_autorun and read-only grants bind nothing.
func TestAutorunGuardBinds(t *testing.T) {
	t.Parallel()
	root := tmpTree(t)
	for _, p := range []string{".bashrc", "repo/.git/config", "repo/.git/HEAD", "repo/.git/hooks/pre-commit", "repo/.github/workflows/ci.yml",
		"repo/.vscode/tasks.json", "repo/src/main.go", "dot/zshrc", "wt/.git", "repo/.git/hooks/.env"} {
		put(t, filepath.Join(root, p), "x")
	}
	if err := os.Symlink("dot/zshrc", filepath.Join(root, ".zshrc")); err != nil {
		t.Fatal(err)
	}
	cache := NewCache(ProfileOptions{UserHome: "/nonexistent"})
	defer cache.Close()
	p, w := mustBuild(t, cache, rwSpec(root))
	w.Close()
	var want []string
	for _, r := range []string{".bashrc", "repo/.git/config", "repo/.git/hooks", "repo/.github/workflows", "repo/.vscode/tasks.json", "dot/zshrc", "wt/.git"} {
		want = append(want, filepath.Join(root, r))
	}
	slices.SortFunc(want, func(a, b string) int {
		if c := strings.Count(a, "/") - strings.Count(b, "/"); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	if !slices.Equal(p.AutorunReadOnly, want) {
		t.Errorf("read-only binds\n%v\nwant\n%v", p.AutorunReadOnly, want)
	}
	if !slices.Contains(p.DenyFiles, filepath.Join(root, "repo/.git/hooks/.env")) {
		t.Errorf("a secret inside a guarded directory is not hidden: %v", p.DenyFiles)
	}

	allow := rwSpec(root)
	allow.Scope.FSGrants[0].AllowAutorun = true
	if p, w := mustBuild(t, cache, allow); len(p.AutorunReadOnly) != 0 {
		t.Errorf("allow_autorun: read-only binds %v, want none", p.AutorunReadOnly)
	} else {
		w.Close()
	}
	ro := rwSpec(root)
	ro.Scope.FSGrants[0].Mode = wire.ModeRead
	if p, w := mustBuild(t, cache, ro); len(p.AutorunReadOnly) != 0 {
		t.Errorf("read-only grant: read-only binds %v, want none", p.AutorunReadOnly)
	} else {
		w.Close()
	}
	// A nested read-write grant whose own path holds the pattern: relative
	// to that grant, its config is an ordinary file (as for the fs tools).
	nested := rwSpec(filepath.Join(root, "repo/.git"))
	if p, w := mustBuild(t, cache, nested); slices.Contains(p.AutorunReadOnly, filepath.Join(root, "repo/.git/config")) {
		t.Errorf("grant of .git itself: config bound read-only (%v); AutorunPath is relative to the grant", p.AutorunReadOnly)
	} else {
		w.Close()
	}
}

// TestAutorunGuardFinish: what the run creates at a guarded path is moved
// aside and reported, including by replacing a parent directory; what it
// creates elsewhere, or what appears under a directory that stayed bound
// read-only, is left alone.
func TestAutorunGuardFinish(t *testing.T) {
	t.Parallel()
	root := tmpTree(t)
	put(t, filepath.Join(root, "repo/.git/config"), "[core]\n")
	put(t, filepath.Join(root, "repo/.git/hooks/pre-commit.sample"), "x")
	cache := NewCache(ProfileOptions{UserHome: "/nonexistent"})
	defer cache.Close()
	_, w := mustBuild(t, cache, rwSpec(root))

	// What a run could do (the bound directory's new file comes from
	// someone else: the sandbox saw it read-only).
	put(t, filepath.Join(root, "home/.bashrc"), "evil")
	put(t, filepath.Join(root, "app/.github/workflows/x.yml"), "evil")
	put(t, filepath.Join(root, "app/notes.txt"), "fine")
	put(t, filepath.Join(root, "repo/.git/hooks/post-merge"), "someone else")
	if err := os.Rename(filepath.Join(root, "repo/.git"), filepath.Join(root, "repo/.gx")); err != nil {
		t.Fatal(err)
	}
	put(t, filepath.Join(root, "repo/.git/config"), "[core]\nfsmonitor = evil\n")

	got := w.Finish()
	paths := map[string]AutorunChange{}
	for _, ch := range got {
		paths[ch.Path] = ch
	}
	for _, want := range []string{"home/.bashrc", "app/.github/workflows", "repo/.git/config"} {
		ch, ok := paths[filepath.Join(root, want)]
		if !ok {
			t.Errorf("%s not reported; got %+v", want, got)
			continue
		}
		if ch.Error != "" || !strings.Contains(ch.QuarantinedAs, QuarantineSuffix) || ch.Reason == "" {
			t.Errorf("%s: %+v, want moved aside with a reason", want, ch)
		}
		if _, err := os.Lstat(filepath.Join(root, want)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after the guard: %v", want, err)
		}
		if _, err := os.Lstat(ch.QuarantinedAs); err != nil {
			t.Errorf("%s: quarantined copy missing: %v", want, err)
		}
	}
	if len(got) != 3 {
		t.Errorf("reported %d changes, want 3: %+v", len(got), got)
	}
	if _, err := os.Stat(filepath.Join(root, "repo/.gx/hooks/post-merge")); err != nil {
		t.Errorf("a file under the bound hooks directory was touched: %v", err)
	}

	// allow_autorun: nothing is checked.
	allow := rwSpec(root)
	allow.Scope.FSGrants[0].AllowAutorun = true
	_, w = mustBuild(t, cache, allow)
	put(t, filepath.Join(root, "home2/.profile"), "x")
	if got := w.Finish(); len(got) != 0 {
		t.Errorf("allow_autorun: %+v, want nothing", got)
	}
}

// TestPin: the read-only binds are opened, and the overlays' targets
// checked, walking from the grant without following symlinks; a target
// gone or reached through a symlink swapped in since means ErrTreeChanged.
func TestPin(t *testing.T) {
	t.Parallel()
	root := tmpTree(t)
	put(t, filepath.Join(root, "repo/.git/config"), "x")
	put(t, filepath.Join(root, "repo/.env"), "s")
	put(t, filepath.Join(root, "elsewhere/.git/config"), "host file")
	cache := NewCache(ProfileOptions{UserHome: "/nonexistent"})
	defer cache.Close()
	p, w := mustBuild(t, cache, rwSpec(root))
	w.Close()
	files, err := p.Pin()
	if err != nil || len(files) != 2 || len(p.AutorunReadOnly) != 2 {
		t.Fatalf("Pin = %v, %v", files, err)
	}
	for _, f := range files {
		f.Close()
	}
	// A concurrent call swaps repo for a symlink to another tree.
	if err := os.Rename(filepath.Join(root, "repo"), filepath.Join(root, "repo2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "elsewhere"), filepath.Join(root, "repo")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Pin(); !errors.Is(err, ErrTreeChanged) {
		t.Errorf("symlinked parent: Pin = %v, want ErrTreeChanged", err)
	}
	os.Remove(filepath.Join(root, "repo"))
	if _, err := p.Pin(); !errors.Is(err, ErrTreeChanged) {
		t.Errorf("vanished: Pin = %v, want ErrTreeChanged", err)
	}
	// Shared prefixes: every bind of a deep tree is opened, each the right one.
	put(t, filepath.Join(root, "a/b/.git/config"), "1")
	put(t, filepath.Join(root, "a/b/c/.bashrc"), "2")
	put(t, filepath.Join(root, "a/d/.profile"), "3")
	p = Profile{ReadWrite: []string{root}, AutorunReadOnly: []string{root + "/a/b/.git/config", root + "/a/b/c/.bashrc", root + "/a/d/.profile", root + "/elsewhere/.git/config"}}
	files, err = p.Pin()
	if err != nil || len(files) != 4 {
		t.Fatalf("Pin = %v, %v", files, err)
	}
	for i, f := range files {
		var a, b unix.Stat_t
		if unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(p.AutorunReadOnly[i], &b) != nil || a.Ino != b.Ino {
			t.Errorf("%s: the descriptor is another file", p.AutorunReadOnly[i])
		}
		f.Close()
	}
}

// seedFromEnv lets a longer local run vary TestCacheMatchesFreshSearch
// (PORTCULLIS_CACHE_SEED); the default is fixed.
func seedFromEnv() uint64 {
	var n uint64 = 7
	fmt.Sscan(os.Getenv("PORTCULLIS_CACHE_SEED"), &n)
	return n
}

// TestMayMask: the prediction says yes for a tree not searched yet, for
// one holding a secret-shaped or guarded entry (also one planted since,
// once drained), for a policy fs_deny and for a credential store of the
// gateway user inside the grant; no only for a searched, watched tree with
// nothing to mask or bind read-only.
func TestMayMask(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		plant string // relative to the grant, created after the first Build
		deny  bool
		home  bool // the gateway user's home is the grant
		want  bool
	}{
		{name: "clean tree", want: false},
		{name: "secret planted", plant: "a/b/.env", want: true},
		{name: "guarded file planted", plant: "repo/.git/config", want: true},
		{name: "git hook planted", plant: ".git/hooks/pre-commit", want: true},
		{name: "ordinary file planted", plant: "a/b/main.go", want: false},
		{name: "fs_deny", deny: true, want: true},
		{name: "home credentials", home: true, want: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := tmpTree(t)
			put(t, filepath.Join(root, "src/main.go"), "package main\n")
			opts := ProfileOptions{UserHome: "/nonexistent"}
			if tt.home {
				opts.UserHome = root
			}
			c := NewCache(opts)
			defer c.Close()
			s := rwSpec(root)
			if tt.deny {
				s.Scope.FSDeny = []string{filepath.Join(root, "src")}
			}
			if !c.MayMask(s) {
				t.Fatal("a tree not searched yet: want a yes")
			}
			_, w := mustBuild(t, c, s)
			w.Close()
			if tt.plant != "" {
				put(t, filepath.Join(root, tt.plant), "x")
				_, w := mustBuild(t, c, s) // drains the change
				w.Close()
			}
			if got := c.MayMask(s); got != tt.want {
				t.Errorf("MayMask = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("closed cache", func(t *testing.T) {
		t.Parallel()
		root := tmpTree(t)
		c := NewCache(ProfileOptions{UserHome: "/nonexistent"})
		_, w := mustBuild(t, c, rwSpec(root))
		w.Close()
		c.Close()
		if !c.MayMask(rwSpec(root)) {
			t.Error("a closed cache (no watch): want a yes")
		}
	})
}
