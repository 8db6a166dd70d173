// Package testutil holds helpers that tests in several packages share, so
// that a test's setup is written once. Only tests import it.
package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"
)

// MedianMS runs fn b.N times and reports the median in milliseconds
// ("median-ms"): on a shared, loaded machine the mean is dominated by the
// neighbours.
func MedianMS(b *testing.B, fn func() error) {
	b.Helper()
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(t0))
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "median-ms")
}

// ProjectTree makes a project-like tree under a fresh temporary directory
// (its real path) and returns its root: 2,000 directories holding 20,000
// files (10 each), up to 7 levels deep, with a git repository (config and
// hooks, which the autorun guard covers) and a few secret-shaped files
// (.env) at various depths. Sandbox benchmarks grant it.
func ProjectTree(tb testing.TB) string {
	tb.Helper()
	tmp, err := filepath.EvalSymlinks(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	root := filepath.Join(tmp, "proj")
	n := 0
	var mk func(dir string, depth int)
	mk = func(dir string, depth int) {
		if n >= 2000 {
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			tb.Fatal(err)
		}
		n++
		for i := range 10 {
			name := "f" + strconv.Itoa(i) + ".go"
			if n%400 == 0 && i == 0 {
				name = ".env"
			}
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
				tb.Fatal(err)
			}
		}
		if depth < 7 {
			for i := range 4 {
				mk(filepath.Join(dir, "d"+strconv.Itoa(i)), depth+1)
			}
		}
	}
	for i := 0; n < 2000; i++ {
		mk(filepath.Join(root, "pkg"+strconv.Itoa(i)), 1)
	}
	for p, content := range map[string]string{".git/config": "[core]\n", ".git/hooks/pre-commit.sample": ""} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return root
}

// Tree lists every entry under dir with its content (symlinks as "->
// target", directories with a trailing "/"), to prove later that a
// directory did not change (SameTree).
func Tree(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	m := map[string]string{}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			m[rel] = "-> " + l
		case d.IsDir():
			m[rel+"/"] = ""
		default:
			b, _ := os.ReadFile(p)
			m[rel] = string(b)
		}
		return nil
	})
	return m
}

// SameTree fails the test when after (a Tree) differs from before, listing
// the first 20 differences ("+path=content" added or changed, "-path"
// gone).
func SameTree(tb testing.TB, what string, before, after map[string]string) {
	tb.Helper()
	var diff []string
	for k, v := range after {
		if w, ok := before[k]; !ok || w != v {
			diff = append(diff, fmt.Sprintf("+%s=%q", k, v))
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			diff = append(diff, "-"+k)
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		tb.Errorf("%s changed: %v", what, diff[:min(len(diff), 20)])
	}
}

// SwapToSymlink is one round of an attacker's race against a path check:
// it moves the directory flip aside (to real), puts a symlink to outside in
// its place for hold, and moves the directory back. It reports whether the
// round completed; a round that could not start repairs what it can (a
// write may have recreated flip while it was away: that directory is
// dropped, and a link is removed, never followed).
func SwapToSymlink(flip, real, outside string, hold time.Duration) bool {
	if err := os.Rename(flip, real); err != nil {
		if _, serr := os.Lstat(real); serr == nil {
			_ = os.RemoveAll(flip)
			_ = os.Rename(real, flip)
		}
		return false
	}
	if os.Symlink(outside, flip) == nil {
		time.Sleep(hold)
		_ = os.Remove(flip)
	}
	if os.Rename(real, flip) != nil {
		_ = os.RemoveAll(flip)
		_ = os.Rename(real, flip)
	}
	return true
}
