package bundles

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"strings"
	"testing"
)

// TestReadArchiveBoundsEverything: what is not file content counts against
// the archive's bounds too. Directory entries were not counted and header
// bytes (PAX records up to 1 MiB per entry) were not bounded, so a small
// archive from a hostile bundle source could make every fetch walk
// millions of headers or inflate gigabytes before any check failed, and
// before its signature was looked at.
func TestReadArchiveBoundsEverything(t *testing.T) {
	t.Parallel()
	build := func(t *testing.T, write func(tw *tar.Writer) error) []byte {
		t.Helper()
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		tw := tar.NewWriter(zw)
		if err := write(tw); err != nil {
			t.Fatal(err)
		}
		reg := &tar.Header{Name: "p.rego", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(reg); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte("x=1"))
		_ = tw.Close()
		_ = zw.Close()
		return buf.Bytes()
	}
	tests := []struct {
		name  string
		write func(tw *tar.Writer) error
		want  string
	}{
		{"huge PAX headers", func(tw *tar.Writer) error {
			// Each PAX header may be up to 1 MiB, which the tar reader
			// decompresses and parses before any file data is counted.
			comment := strings.Repeat("a", 900<<10)
			for i := range maxTarBytes/(900<<10) + 8 {
				h := &tar.Header{Name: fmt.Sprintf("f%d.json", i), Mode: 0o644, Size: 2, Typeflag: tar.TypeReg,
					Format: tar.FormatPAX, PAXRecords: map[string]string{"comment": comment}}
				if err := tw.WriteHeader(h); err != nil {
					return err
				}
				if _, err := tw.Write([]byte("{}")); err != nil {
					return err
				}
			}
			return nil
		}, "expands beyond"},
		{"more directory entries than files allowed", func(tw *tar.Writer) error {
			for i := range maxArchiveFiles + 1 {
				if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%d/", i), Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
					return err
				}
			}
			return nil
		}, "more than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := build(t, tc.write)
			_, err := ReadArchive(bytes.NewReader(b))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ReadArchive = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
