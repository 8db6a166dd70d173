package fstool

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkRead is one fs.read through Prepare, Enforce and Run, as the
// pipeline does it, of a 2 KB file three directories below the grant: the
// cost the confinement walk adds to the hot path.
func BenchmarkRead(b *testing.B) {
	f := newFixture(b)
	dir := filepath.Join(f.work, "src", "pkg", "deep")
	must(b, os.MkdirAll(dir, 0o755))
	body := make([]byte, 0, 2048)
	for len(body) < 2000 {
		body = append(body, "some source line of a typical file\n"...)
	}
	writeT(b, filepath.Join(dir, "file.go"), string(body))
	for _, bc := range []struct{ name, path string }{
		{"alias", "@w/src/pkg/deep/file.go"},
		{"absolute", filepath.Join(dir, "file.go")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			input := json.RawMessage(`{"path":"` + bc.path + `"}`)
			tl := f.tools[NameRead]
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				c, err := tl.Prepare(ctx, input)
				if err != nil {
					b.Fatal(err)
				}
				scope, err := c.Enforce(ctx, f.decision)
				if err != nil {
					b.Fatal(err)
				}
				if res := c.Run(ctx, scope); res.Output.Error != nil {
					b.Fatal(res.Output.Error)
				}
			}
		})
	}
}
