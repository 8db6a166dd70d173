package bundles

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
)

// retar rewrites archive with file set to data (added when absent),
// keeping the other entries: how an attacker would tamper with a bundle.
func retar(t testing.TB, archive []byte, file string, data []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var entries []entry
	replaced := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if strings.TrimPrefix(h.Name, "/") == file {
			b, replaced = data, true
		}
		entries = append(entries, entry{name: h.Name, data: b})
	}
	if !replaced {
		entries = append(entries, entry{name: "/" + file, data: data})
	}
	return tarGz(t, entries)
}

type entry struct {
	name string
	data []byte
	typ  byte
}

func tarGz(t testing.TB, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Typeflag: typ}
		if typ != tar.TypeReg {
			h.Size = 0
			h.Linkname = "/etc/passwd"
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			tw.Write(e.data)
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func TestReadArchiveRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entries []entry
		want    string
	}{
		{"parent escape", []entry{{name: "../x.rego", data: []byte("x")}}, "not a path inside"},
		{"symlink", []entry{{name: "x.rego", typ: tar.TypeSymlink}}, "only regular files"},
		{"duplicate", []entry{{name: "/a.rego", data: []byte("a")}, {name: "a.rego", data: []byte("b")}}, "appears twice"},
		{"empty", nil, "no files"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ReadArchive(bytes.NewReader(tarGz(t, tc.entries)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := ReadArchive(strings.NewReader("not gzip")); err == nil {
		t.Error("a non-gzip archive was accepted")
	}
}
