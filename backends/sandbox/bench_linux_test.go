package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/portcullis/portcullis/internal/testutil"
)

// BenchmarkProfileTree measures building the profile of a call granted a
// 20k-file, 2k-directory tree read-write: cold (a new cache: full scan and
// watches), warm (cache hit), and after one change in the tree (one
// directory listed again).
func BenchmarkProfileTree(b *testing.B) {
	root := testutil.ProjectTree(b)
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
