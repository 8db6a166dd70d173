package exectool

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/portcullis/portcullis/backends/process"
)

// TestResolverSeesChanges: a remembered answer is never given once the file
// system it depends on has changed: each case asks, changes the tree, and
// asks again; both answers must be what the plain walk (leadsTo) says at
// that moment, and the first must have been remembered.
func TestResolverSeesChanges(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		ask    string // relative to the case's directory
		change func(t *testing.T, d string)
	}{
		{"symlink swapped", "link/prog", func(t *testing.T, d string) {
			must(t, os.Remove(filepath.Join(d, "link")))
			must(t, os.Symlink(filepath.Join(d, "b"), filepath.Join(d, "link")))
		}},
		{"symlink swapped by rename", "link/prog", func(t *testing.T, d string) {
			must(t, os.Symlink(filepath.Join(d, "b"), filepath.Join(d, "tmp")))
			must(t, os.Rename(filepath.Join(d, "tmp"), filepath.Join(d, "link")))
		}},
		{"file replaced by a symlink", "a/prog", func(t *testing.T, d string) {
			must(t, os.Remove(filepath.Join(d, "a", "prog")))
			must(t, os.Symlink(filepath.Join(d, "b", "prog"), filepath.Join(d, "a", "prog")))
		}},
		{"missing name created as a symlink", "a/missing/x", func(t *testing.T, d string) {
			must(t, os.Symlink(filepath.Join(d, "b"), filepath.Join(d, "a", "missing")))
		}},
		{"directory moved away and replaced", "a/prog", func(t *testing.T, d string) {
			must(t, os.Rename(filepath.Join(d, "a"), filepath.Join(d, "old")))
			must(t, os.Symlink(filepath.Join(d, "b"), filepath.Join(d, "a")))
		}},
		{"deep symlink target changed", "link/sub/prog", func(t *testing.T, d string) {
			must(t, os.Remove(filepath.Join(d, "a", "sub")))
			must(t, os.Symlink("../b", filepath.Join(d, "a", "sub")))
		}},
		{"symlink loop broken", "loop/prog", func(t *testing.T, d string) {
			must(t, os.Remove(filepath.Join(d, "loop")))
			must(t, os.Symlink(filepath.Join(d, "a"), filepath.Join(d, "loop")))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := filepath.EvalSymlinks(t.TempDir())
			must(t, err)
			for _, dir := range []string{"a", "b"} {
				must(t, os.Mkdir(filepath.Join(d, dir), 0o755))
				must(t, os.WriteFile(filepath.Join(d, dir, "prog"), []byte("#!/bin/sh\n"), 0o755))
			}
			must(t, os.Symlink(filepath.Join(d, "a"), filepath.Join(d, "link")))
			must(t, os.Symlink(".", filepath.Join(d, "a", "sub")))
			must(t, os.Symlink(filepath.Join(d, "loop"), filepath.Join(d, "loop")))

			r := newResolver()
			if r == nil {
				t.Skip("no inotify here")
			}
			t.Cleanup(r.close)
			p := filepath.Join(d, tc.ask)
			// Asked until remembered: anything created next to the
			// test's directory (in the shared temporary directory, by
			// other tests or processes) is an event that rightly drops
			// the answer.
			for i := range 50 {
				if got, want := r.leadsTo(p), leadsTo(p); got != want {
					t.Fatalf("before the change (ask %d): %s leads to %s, the walk says %s", i, p, got, want)
				}
				if _, ok := r.answers[p]; ok && i > 0 {
					break
				}
			}
			if _, ok := r.answers[p]; !ok {
				t.Fatalf("the answer for %s was not remembered", p)
			}
			before := leadsTo(p)
			tc.change(t, d)
			got, want := r.leadsTo(p), leadsTo(p)
			if got != want {
				t.Errorf("after the change: %s leads to %s, the walk says %s", p, got, want)
			}
			if want == before {
				t.Errorf("the change did not change the answer (%s): the case tests nothing", want)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestResolverExecChainSeesChanges: a remembered exec chain is never given
// once a script's #! line, the interpreter it names or a directory on the
// way has changed: each case asks, changes, asks again, and both answers
// must be process.ExecChain's at that moment.
func TestResolverExecChainSeesChanges(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(t *testing.T, d string)
	}{
		{"#! line rewritten in place", func(t *testing.T, d string) {
			f, err := os.OpenFile(filepath.Join(d, "bin", "script"), os.O_WRONLY, 0)
			must(t, err)
			_, err = f.WriteAt([]byte("#!"+filepath.Join(d, "bin", "interp2")+"\n"), 0)
			must(t, err)
			must(t, f.Close())
		}},
		{"script replaced by rename", func(t *testing.T, d string) {
			must(t, os.WriteFile(filepath.Join(d, "tmp"), []byte("#!"+filepath.Join(d, "bin", "interp2")+"\n"), 0o755))
			must(t, os.Rename(filepath.Join(d, "tmp"), filepath.Join(d, "bin", "script")))
		}},
		{"interpreter link retargeted", func(t *testing.T, d string) {
			must(t, os.Remove(filepath.Join(d, "bin", "interp")))
			must(t, os.Symlink("interp2", filepath.Join(d, "bin", "interp")))
		}},
		{"interpreter's own #! line rewritten", func(t *testing.T, d string) {
			must(t, os.WriteFile(filepath.Join(d, "bin", "real-interp"), []byte("#!"+filepath.Join(d, "bin", "interp2")+"\n"), 0o755))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := filepath.EvalSymlinks(t.TempDir())
			must(t, err)
			must(t, os.Mkdir(filepath.Join(d, "bin"), 0o755))
			must(t, os.WriteFile(filepath.Join(d, "bin", "real-interp"), []byte("#!/bin/sh\n"), 0o755))
			must(t, os.WriteFile(filepath.Join(d, "bin", "interp2"), []byte("#!/bin/sh\n"), 0o755))
			must(t, os.Symlink("real-interp", filepath.Join(d, "bin", "interp")))
			must(t, os.WriteFile(filepath.Join(d, "bin", "script"), []byte("#!"+filepath.Join(d, "bin", "interp")+"\n"), 0o755))

			r := newResolver()
			if r == nil {
				t.Skip("no inotify here")
			}
			t.Cleanup(r.close)
			p := filepath.Join(d, "bin", "script")
			for i := range 50 { // asked until remembered, as in TestResolverSeesChanges
				if got, want := r.execChain(p), process.ExecChain(p); !slices.Equal(got, want) {
					t.Fatalf("before the change (ask %d): chain %v, ExecChain says %v", i, got, want)
				}
				if _, ok := r.chains[p]; ok && i > 0 {
					break
				}
			}
			if _, ok := r.chains[p]; !ok {
				t.Fatalf("the chain of %s was not remembered", p)
			}
			before := process.ExecChain(p)
			tc.change(t, d)
			got, want := r.execChain(p), process.ExecChain(p)
			if !slices.Equal(got, want) {
				t.Errorf("after the change: chain %v, ExecChain says %v", got, want)
			}
			if slices.Equal(want, before) {
				t.Errorf("the change did not change the chain (%v): the case tests nothing", want)
			}
		})
	}
}

// TestResolverSkipsOtherFileSystems: a path through a file system whose
// changes inotify may not see (here procfs) is answered by the walk and
// never remembered.
func TestResolverSkipsOtherFileSystems(t *testing.T) {
	t.Parallel()
	r := newResolver()
	if r == nil {
		t.Skip("no inotify here")
	}
	t.Cleanup(r.close)
	for _, p := range []string{"/proc/self/exe", "/proc/sys/kernel/hostname"} {
		if got, want := r.leadsTo(p), leadsTo(p); got != want {
			t.Errorf("%s leads to %s, the walk says %s", p, got, want)
		}
		if _, ok := r.answers[p]; ok {
			t.Errorf("%s remembered, though /proc is not a local file system", p)
		}
	}
}

// TestResolverWatchMasksOnlyGrow: an exec chain naming a directory (a
// script whose #! line is a directory, an ELF whose PT_INTERP is one) must
// not narrow the watch a remembered leadsTo answer depends on. inotify
// keeps one watch per inode and, without IN_MASK_ADD, a second
// inotify_add_watch replaces its mask: the directory's watch would then
// report only the file events (contents, attributes), not the entries
// created, deleted or renamed in it, and a symlink planted there would
// leave a stale answer.
func TestResolverWatchMasksOnlyGrow(t *testing.T) {
	t.Parallel()
	r := newResolver()
	if r == nil {
		t.Skip("no inotify")
	}
	defer r.close()
	d, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	dd := filepath.Join(d, "D")
	for _, sub := range []string{"D", "a", "b"} {
		must(t, os.Mkdir(filepath.Join(d, sub), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(d, "a", "prog"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Symlink(filepath.Join(d, "a"), filepath.Join(dd, "sub")))
	must(t, os.WriteFile(filepath.Join(d, "script"), []byte("#!"+dd+"\n"), 0o755))
	p := filepath.Join(dd, "sub", "prog")
	if got, want := r.leadsTo(p), leadsTo(p); got != want {
		t.Fatalf("leadsTo %s = %s, want %s", p, got, want)
	}
	r.mu.Lock()
	_, remembered := r.answers[p]
	r.mu.Unlock()
	if !remembered {
		t.Skip("answer not remembered (file system not watched)")
	}
	_ = r.execChain(filepath.Join(d, "script"))
	must(t, os.Remove(filepath.Join(dd, "sub")))
	must(t, os.Symlink(filepath.Join(d, "b"), filepath.Join(dd, "sub")))
	if got, want := r.leadsTo(p), leadsTo(p); got != want {
		t.Fatalf("after the symlink %s/sub was swapped: remembered %s, the walk says %s", dd, got, want)
	}
}

// TestResolverRaceSwaps: a symlink swapped (by rename) in a tight loop while
// the resolver answers never leaves a stale answer once the swapping has
// stopped: every round ends with the remembered answers (where the path
// leads, its exec chain) equal to a fresh walk.
func TestResolverRaceSwaps(t *testing.T) {
	t.Parallel()
	r := newResolver()
	if r == nil {
		t.Skip("no inotify")
	}
	defer r.close()
	d, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	for sub, interp := range map[string]string{"a": "/bin/sh", "b": "/usr/bin/env"} {
		must(t, os.MkdirAll(filepath.Join(d, sub, "in"), 0o755))
		must(t, os.WriteFile(filepath.Join(d, sub, "in", "prog"), []byte("#!"+interp+"\n"), 0o755))
	}
	must(t, os.Symlink(filepath.Join(d, "a"), filepath.Join(d, "link")))
	p := filepath.Join(d, "link", "in", "prog")
	for round := range 50 {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				target := filepath.Join(d, []string{"a", "b"}[i%2])
				tmp := filepath.Join(d, "tmp")
				_ = os.Remove(tmp)
				if os.Symlink(target, tmp) == nil {
					_ = os.Rename(tmp, filepath.Join(d, "link"))
				}
			}
		}()
		for range 20 {
			_ = r.leadsTo(p)
			_ = r.execChain(p)
		}
		close(stop)
		<-done
		if got, want := r.leadsTo(p), leadsTo(p); got != want {
			t.Fatalf("round %d: after the swaps stopped: remembered %s, the walk says %s", round, got, want)
		}
		if got, want := r.leadsTo(p), leadsTo(p); got != want {
			t.Fatalf("round %d: asked again: %s, the walk says %s", round, got, want)
		}
		if got, want := r.execChain(p), process.ExecChain(p); !slices.Equal(got, want) {
			t.Fatalf("round %d: after the swaps stopped: chain %v, ExecChain says %v", round, got, want)
		}
	}
}
