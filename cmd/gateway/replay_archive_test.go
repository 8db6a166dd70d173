package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/portcullis/portcullis/bundles"
	"github.com/portcullis/portcullis/policies"
)

// TestArchivedBundleAmbiguousRevision: two activated bundles can carry the
// same .manifest revision (a revision is whatever the author wrote). The
// receipt names only the revision, so replay cannot tell which one decided
// it; it refuses rather than re-deciding with whichever archive sorts
// first, and names the digests.
func TestArchivedBundleAmbiguousRevision(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(allow string) string {
		fsys := fstest.MapFS{
			".manifest":                {Data: []byte(`{"roots":["portcullis"]}`)},
			"portcullis/decision.rego": {Data: []byte("package portcullis\n\ndecision := {\"allow\": " + allow + "}\n")},
		}
		b, err := bundles.Build(fsys, bundles.BuildOptions{Revision: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		arch, err := bundles.ReadArchive(strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		info, err := policies.NewEngine(policies.Options{}).Load(context.Background(), arch, "x")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, info.Digest+".tar.gz"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return info.Digest
	}
	a := write("true")
	engine := policies.NewEngine(policies.Options{Logger: slog.New(slog.DiscardHandler)})
	if _, info, err := archivedBundle(context.Background(), engine, dir, "r1"); err != nil || info.Digest != a {
		t.Fatalf("one archive of r1: %s, %v; want %s", info.Digest, err, a)
	}
	b := write("false")
	_, info, err := archivedBundle(context.Background(), engine, dir, "r1")
	if err == nil || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
		t.Fatalf("two archives of r1 = %s, %v; want an error naming both digests", info.Digest, err)
	}
}
