package bundles

import (
	"context"
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/portcullis/portcullis/policies"
)

// shiftingFS serves one file's first contents for its first reads and
// other contents afterwards: a bundle directory rewritten while a reload
// reads it.
type shiftingFS struct {
	fstest.MapFS
	path  string
	after int32
	later []byte
	opens atomic.Int32
}

func (s *shiftingFS) Open(name string) (fs.File, error) {
	if name == s.path && s.opens.Add(1) > s.after {
		m := fstest.MapFS{name: {Data: s.later, Mode: 0o444}}
		return m.Open(name)
	}
	return s.MapFS.Open(name)
}

type fsSource struct{ fsys fs.FS }

func (f fsSource) Fetch(context.Context) (fs.FS, error) { return f.fsys, nil }
func (f fsSource) String() string                       { return "shifting" }

// TestReloadReadsTheBundleOnce: a reload reads the candidate's files once
// and checks, activates and archives that one snapshot. It read the source
// three times (scratch check, live load, archive), so a bundle directory
// rewritten during a reload left data_dir/bundles/<digest>.tar.gz holding
// other files than the bundle of that digest, and `policy replay` then
// re-decided receipts with a bundle that was never live.
func TestReloadReadsTheBundleOnce(t *testing.T) {
	t.Parallel()
	base := tinyBundle("true")
	src := &shiftingFS{MapFS: base, path: "portcullis/decision.rego", after: 2,
		later: []byte("package portcullis\n\ndecision := {\"allow\": false, \"reasons\": [\"r\"]}\n")}
	dir := t.TempDir()
	eng := policies.NewEngine(policies.Options{})
	m := New(Options{Engine: eng, Source: fsSource{src}, ArchiveDir: dir, Load: policies.LoadOptions{RunTests: true}})
	res, err := m.Reload(context.Background(), TriggerStart)
	if err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if n := src.opens.Load(); n != 1 {
		t.Errorf("the reload read the changing file %d times, want once", n)
	}
	archived, err := Open(filepath.Join(dir, res.Policy.Digest+".tar.gz"))
	if err != nil {
		t.Fatalf("archived bundle: %v", err)
	}
	info, err := policies.NewEngine(policies.Options{}).Load(context.Background(), archived, "archive")
	if err != nil {
		t.Fatal(err)
	}
	if info.Digest != res.Policy.Digest {
		t.Fatalf("archive %s.tar.gz holds a bundle of digest %s: not the bundle that went live", res.Policy.Digest, info.Digest)
	}
}
