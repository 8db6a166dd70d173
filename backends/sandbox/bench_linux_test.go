package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchTree makes a project-like tree of 2,000 directories holding 20,000
// files (10 each), up to 7 levels deep, with a git repository (config and
// hooks, guarded) and a few secret-shaped files at various depths.
func benchTree(b testing.TB) string {
	b.Helper()
	root := filepath.Join(tmpTree(b), "proj")
	n := 0
	var mk func(dir string, depth int)
	mk = func(dir string, depth int) {
		if n >= 2000 {
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		n++
		for i := range 10 {
			name := fmt.Sprintf("f%d.go", i)
			if n%400 == 0 && i == 0 {
				name = ".env"
			}
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		if depth < 7 {
			for i := range 4 {
				mk(filepath.Join(dir, fmt.Sprintf("d%d", i)), depth+1)
			}
		}
	}
	for i := 0; n < 2000; i++ {
		mk(filepath.Join(root, fmt.Sprintf("pkg%d", i)), 1)
	}
	put(b, filepath.Join(root, ".git/config"), "[core]\n")
	put(b, filepath.Join(root, ".git/hooks/pre-commit.sample"), "")
	return root
}

// BenchmarkProfileTree measures building the profile of a call granted a
// 20k-file, 2k-directory tree read-write: cold (a new cache: full scan and
// watches), warm (cache hit), and after one change in the tree (one
// directory listed again).
func BenchmarkProfileTree(b *testing.B) {
	root := benchTree(b)
	spec := rwSpec(root)
	opts := ProfileOptions{UserHome: "/nonexistent"}
	b.Run("cold", func(b *testing.B) {
		for range b.N {
			c := NewCache(opts)
			_, w, err := c.Build(spec)
			if err != nil {
				b.Fatal(err)
			}
			w.Close()
			c.Close()
		}
	})
	b.Run("uncached-full-walk", func(b *testing.B) {
		for range b.N {
			if _, err := BuildProfile(spec, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
	c := NewCache(opts)
	defer c.Close()
	if _, w, err := c.Build(spec); err != nil {
		b.Fatal(err)
	} else {
		w.Close()
	}
	b.Run("warm", func(b *testing.B) {
		for range b.N {
			_, w, err := c.Build(spec)
			if err != nil {
				b.Fatal(err)
			}
			w.Close()
		}
	})
	b.Run("after-one-change", func(b *testing.B) {
		f := filepath.Join(root, "pkg0/d1/d2/new.txt")
		for i := range b.N {
			if i%2 == 0 {
				put(b, f, "")
			} else {
				os.Remove(f)
			}
			_, w, err := c.Build(spec)
			if err != nil {
				b.Fatal(err)
			}
			w.Close()
		}
	})
}
