package fstool

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testutil"
	"github.com/portcullis/portcullis/wire"
)

// TestSwapRace flips work/flip between a real directory and a symlink to
// the outside while writes, reads and patches run through it. Whatever the
// interleaving, nothing may land outside and nothing outside may be read.
func TestSwapRace(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	flip := filepath.Join(f.work, "flip")
	real := filepath.Join(f.work, "flip.real")
	must(t, os.Mkdir(flip, 0o755))
	writeT(t, filepath.Join(flip, "secret.txt"), "inside\n")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	var flips atomic.Int64
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			// dir -> symlink to outside -> dir.
			if testutil.SwapToSymlink(flip, real, f.outside, 50*time.Microsecond) {
				flips.Add(1)
			}
		}
	}()
	var okWrites, refused, leaks atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				var tool, input string
				switch i % 3 {
				case 0:
					tool, input = NameWrite, fmt.Sprintf(`{"path":"@w/flip/w%d-%d.txt","content":"pwned"}`, w, i)
				case 1:
					tool, input = NameRead, `{"path":"@w/flip/secret.txt"}`
				case 2:
					tool, input = NamePatch, `{"patch":"--- a/@w/flip/secret.txt\n+++ b/@w/flip/secret.txt\n@@ -1 +1 @@\n-TOP SECRET outside the grant\n+pwned\n"}`
				}
				c, err := f.tools[tool].Prepare(ctx, json.RawMessage(input))
				if err != nil {
					t.Error(err)
					return
				}
				scope, err := c.Enforce(ctx, f.decision)
				if err != nil {
					refused.Add(1)
					continue
				}
				res := c.Run(ctx, scope)
				if res.Output.Error != nil {
					refused.Add(1)
					continue
				}
				b, _ := json.Marshal(res.Output.Data)
				if strings.Contains(string(b), "TOP SECRET") || (tool == NameRead && strings.Contains(string(b), sum(secret))) {
					leaks.Add(1)
				}
				if tool == NameWrite {
					okWrites.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if leaks.Load() > 0 {
		t.Errorf("%d reads returned the outside file", leaks.Load())
	}
	f.outsideUnchanged(t)
	noTemps(t, f.root)
	t.Logf("flips %d, writes ok %d, refused %d", flips.Load(), okWrites.Load(), refused.Load())
	if flips.Load() < 10 || okWrites.Load() == 0 {
		t.Errorf("the race did not exercise both states: flips %d, writes %d", flips.Load(), okWrites.Load())
	}
}

// TestConcurrentReaderSeesWholeFiles: a reader polling a file being
// rewritten only ever sees one complete version.
func TestConcurrentReaderSeesWholeFiles(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	p := filepath.Join(f.work, "atomic.txt")
	versions := map[string]bool{}
	for i := range 20 {
		v := strings.Repeat(fmt.Sprintf("version %02d\n", i), 5000) // ~55 KB
		versions[v] = true
	}
	first := strings.Repeat("version 00\n", 5000)
	writeT(t, p, first)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var reads, torn atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			b, err := os.ReadFile(p)
			if err != nil {
				torn.Add(1) // the name must always exist
				continue
			}
			reads.Add(1)
			if !versions[string(b)] {
				torn.Add(1)
			}
		}
	}()
	for i := range 20 {
		v := strings.Repeat(fmt.Sprintf("version %02d\n", i), 5000)
		o := f.do(t, NameWrite, map[string]any{"path": "@w/atomic.txt", "content": v})
		if o.code != "" {
			t.Fatalf("write %d: %v", i, o.err)
		}
	}
	cancel()
	wg.Wait()
	if torn.Load() > 0 {
		t.Errorf("%d of %d reads saw a partial or missing file", torn.Load(), reads.Load())
	}
	noTemps(t, f.root)
}

// TestConcurrentIfMatch: of many writers racing with the same precondition,
// exactly one wins.
func TestConcurrentIfMatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	base := sum("alpha\nbeta\ngamma\n")
	var wg sync.WaitGroup
	var wins, lost atomic.Int64
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := f.do(t, NameWrite, map[string]any{"path": "@w/a.txt", "content": fmt.Sprint(i), "ifMatchSha256": base})
			switch o.code {
			case "":
				wins.Add(1)
			case string(wire.CodePreconditionFailed):
				lost.Add(1)
			default:
				t.Errorf("unexpected %q", o.code)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 || lost.Load() != 15 {
		t.Errorf("wins %d, lost %d; want 1 and 15", wins.Load(), lost.Load())
	}
}
