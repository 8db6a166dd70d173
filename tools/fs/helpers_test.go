package fstool

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// fixture is a directory tree with two grants and an outside world:
//
//	work/            rw, @w
//	  a.txt          "alpha\nbeta\ngamma\n"
//	  sub/b.txt      "bee\n"
//	  inner -> sub          (relative link, inside)
//	  escape -> ../outside  (relative link, out)
//	  absescape -> <root>/outside (absolute link, out)
//	  leak.txt -> ../outside/secret.txt
//	  dangling -> ../outside/nothing
//	ro/              r, @ro
//	  r.txt
//	outside/secret.txt
type fixture struct {
	root, work, ro, outside string
	tools                   map[string]tools.Tool
	decision                wire.Decision
}

const secret = "TOP SECRET outside the grant\n"

func newFixture(t testing.TB) *fixture {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{root: root, work: filepath.Join(root, "work"), ro: filepath.Join(root, "ro"), outside: filepath.Join(root, "outside")}
	for _, d := range []string{f.work, filepath.Join(f.work, "sub"), f.ro, f.outside} {
		must(t, os.MkdirAll(d, 0o755))
	}
	writeT(t, filepath.Join(f.work, "a.txt"), "alpha\nbeta\ngamma\n")
	writeT(t, filepath.Join(f.work, "sub", "b.txt"), "bee\n")
	writeT(t, filepath.Join(f.ro, "r.txt"), "read only\n")
	writeT(t, filepath.Join(f.outside, "secret.txt"), secret)
	must(t, os.Symlink("sub", filepath.Join(f.work, "inner")))
	must(t, os.Symlink("../outside", filepath.Join(f.work, "escape")))
	must(t, os.Symlink(f.outside, filepath.Join(f.work, "absescape")))
	must(t, os.Symlink("../outside/secret.txt", filepath.Join(f.work, "leak.txt")))
	must(t, os.Symlink("../outside/nothing", filepath.Join(f.work, "dangling")))
	f.tools = map[string]tools.Tool{}
	for _, tl := range Tools(Options{}) {
		f.tools[tl.Name()] = tl
	}
	f.decision = wire.Decision{Allow: true, FSGrants: []wire.FSGrant{
		{Path: f.work, Mode: wire.ModeReadWrite, Alias: "@w"},
		{Path: f.ro, Mode: wire.ModeRead, Alias: "@ro"},
	}}
	return f
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeT(t testing.TB, p, s string) {
	t.Helper()
	must(t, os.WriteFile(p, []byte(s), 0o644))
}

func readT(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// outcome is one call through Prepare, Enforce and Run, as the pipeline
// does it.
type outcome struct {
	stage string // "prepare", "enforce", "run"
	code  string // contract error code, "" on success
	err   *wire.Error
	data  json.RawMessage
	res   tools.Result
	call  tools.Call
}

func (f *fixture) do(t testing.TB, tool string, input any) outcome {
	t.Helper()
	return f.doWith(t, tool, input, f.decision)
}

func (f *fixture) doWith(t testing.TB, tool string, input any, d wire.Decision) outcome {
	t.Helper()
	raw, ok := input.(string)
	if !ok {
		b, err := json.Marshal(input)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	ctx := context.Background()
	tl := f.tools[tool]
	if tl == nil {
		t.Fatalf("no tool %s", tool)
	}
	c, err := tl.Prepare(ctx, json.RawMessage(raw))
	if err != nil {
		return errOutcome(t, "prepare", err)
	}
	scope, err := c.Enforce(ctx, d)
	if err != nil {
		return errOutcome(t, "enforce", err)
	}
	res := c.Run(ctx, scope)
	o := outcome{stage: "run", res: res, call: c}
	if res.Output.Error != nil {
		o.code, o.err = string(res.Output.Error.Code), res.Output.Error
		if res.Output.Success || res.Output.Data != nil || res.OutputSHA256 != "" {
			t.Errorf("failed result carries success or data: %+v", res)
		}
	} else {
		o.data = json.RawMessage(res.Output.Data.(wire.CompactJSON))
		if !res.Output.Success || res.Status != wire.StatusSucceeded || len(res.OutputSHA256) != 64 {
			t.Errorf("successful result is inconsistent: %+v", res)
		}
	}
	if res.Backend != Backend || res.Output.Metadata["backend"] != Backend {
		t.Errorf("backend = %q / %v, want fs", res.Backend, res.Output.Metadata["backend"])
	}
	if _, ok := res.Output.Metadata["duration_ms"].(int64); !ok {
		t.Errorf("metadata.duration_ms missing: %v", res.Output.Metadata)
	}
	return o
}

func errOutcome(t testing.TB, stage string, err error) outcome {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) {
		t.Fatalf("%s returned a non-contract error: %v", stage, err)
	}
	if we.Message == "" {
		t.Errorf("%s: error without a message", stage)
	}
	return outcome{stage: stage, code: string(we.Code), err: we}
}

func (o outcome) decode(t testing.TB, v any) {
	t.Helper()
	if o.code != "" {
		t.Fatalf("call failed at %s: %s: %s", o.stage, o.code, o.err.Message)
	}
	if err := json.Unmarshal(o.data, v); err != nil {
		t.Fatal(err)
	}
}

// noTemps fails if the gateway left temporary or backup files under dir.
func noTemps(t testing.TB, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), tempPrefix) {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

// outsideUnchanged fails if anything in outside/ differs from the fixture.
func (f *fixture) outsideUnchanged(t testing.TB) {
	t.Helper()
	ents, err := os.ReadDir(f.outside)
	must(t, err)
	if len(ents) != 1 || ents[0].Name() != "secret.txt" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("outside/ holds %v, want only secret.txt: something was written outside the grant", names)
	}
	if got := readT(t, filepath.Join(f.outside, "secret.txt")); got != secret {
		t.Errorf("outside/secret.txt changed: %q", got)
	}
}
