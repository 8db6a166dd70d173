// Package testutil holds helpers that tests in several packages share, so
// that a test's setup is written once. Only tests import it.
package testutil

import (
	"os"
	"path/filepath"
	"slices"
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
