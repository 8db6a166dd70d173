package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a bytes.Buffer safe for the flusher and the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLogWriter: every line written before Close is out after it, whole
// and in each writer's order, whether it went through the flusher, the
// back-pressure path or after Close.
func TestLogWriter(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		writers, lines int
		lineLen        int
	}{
		{"one line", 1, 1, 10},
		{"concurrent", 8, 500, 40},
		{"over the buffer bound", 4, 40, maxLogBuffer / 16},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dst := &lockedBuffer{}
			w := newLogWriter(dst)
			var wg sync.WaitGroup
			for g := range tc.writers {
				wg.Go(func() {
					pad := strings.Repeat("x", tc.lineLen)
					for i := range tc.lines {
						line := fmt.Sprintf("%d %d %s\n", g, i, pad)
						if n, err := w.Write([]byte(line)); err != nil || n != len(line) {
							t.Errorf("Write = %d, %v", n, err)
						}
					}
				})
			}
			wg.Wait()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write([]byte("after close\n")); err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSuffix(dst.String(), "\n"), "\n")
			if want := tc.writers*tc.lines + 1; len(got) != want {
				t.Fatalf("%d lines out, want %d", len(got), want)
			}
			next := make([]int, tc.writers)
			for _, l := range got[:len(got)-1] {
				var g, i int
				var pad string
				if _, err := fmt.Sscanf(l, "%d %d %s", &g, &i, &pad); err != nil || len(pad) != tc.lineLen {
					t.Fatalf("torn line %.60q: %v", l, err)
				}
				if i != next[g] {
					t.Fatalf("writer %d: line %d out before line %d", g, i, next[g])
				}
				next[g]++
			}
			if got[len(got)-1] != "after close" {
				t.Errorf("last line %q", got[len(got)-1])
			}
		})
	}
}
