package coderun

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"testing"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/backends/bwrap"
	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/internal/testutil"
	"github.com/portcullis/portcullis/wire"
)

// BenchmarkCodeRunTrivial is one code.run of a one-line script through
// the tool (prepare, enforce, run directory, bridge, runner, Deno), on the
// process runner and on bwrap where it works. No gateway or evidence.
func BenchmarkCodeRunTrivial(b *testing.B) {
	deno := denoPath(b)
	rs := map[string]backends.Runner{"process": process.New(process.Options{})}
	if err := bwrap.New(bwrap.Options{}).Probe(context.Background()); err == nil {
		rs["bwrap"] = bwrap.New(bwrap.Options{})
	} else {
		b.Logf("bwrap unusable here: %v", err)
	}
	for _, name := range []string{"process", "bwrap"} {
		r, ok := rs[name]
		if !ok {
			continue
		}
		b.Run(name, func(b *testing.B) {
			tool := New(Options{Runner: r, Deno: deno})
			d := wire.Decision{Allow: true, Network: wire.Network{Posture: wire.PostureOff}}
			in := json.RawMessage(`{"code":"export const result = 1 + 1;"}`)
			testutil.MedianMS(b, func() error {
				c, err := tool.Prepare(context.Background(), in)
				if err != nil {
					return err
				}
				scope, err := c.Enforce(context.Background(), d)
				if err != nil {
					return err
				}
				res := c.Run(context.Background(), scope)
				if data, _ := res.Output.Data.(Data); !res.Output.Success || string(data.Result) != "2" {
					return fmt.Errorf("run failed: %+v %+v", res.Output.Error, data)
				}
				return nil
			})
		})
	}
}

// BenchmarkDenoBare is `deno run` of an empty file, fork/exec, no sandbox:
// Deno's own start-up, the floor under code.run.
func BenchmarkDenoBare(b *testing.B) {
	deno := denoPath(b)
	dir := b.TempDir()
	empty := filepath.Join(dir, "empty.js")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	env := []string{"HOME=" + dir, "DENO_DIR=" + filepath.Join(dir, "deno"), "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1", "PATH=/usr/bin:/bin"}
	testutil.MedianMS(b, func() error {
		cmd := osexec.Command(deno, "run", "--quiet", "--no-prompt", "--no-config", "--no-lock", empty)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}
