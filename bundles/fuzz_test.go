package bundles

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"strings"
	"testing"
)

// FuzzReadArchive feeds arbitrary bytes to the bundle reader a bundle
// service's answer goes through (ReadArchive, then Files and signature
// verification, exactly as activation does). It must never panic, and what
// it accepts must stay inside the bundle root and within its bounds; an
// accepted archive only verifies when it carries a signature by the key.
func FuzzReadArchive(f *testing.F) {
	key := ecKey(f)
	vc, err := VerificationConfig(key.pubFile, "k1")
	if err != nil {
		f.Fatal(err)
	}
	signed, err := Build(tinyBundle("true"), BuildOptions{SigningKey: key.priv, KeyID: "k1", Revision: "r1"})
	if err != nil {
		f.Fatal(err)
	}
	unsigned, err := Build(tinyBundle("true"), BuildOptions{Revision: "r1"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(signed)
	f.Add(unsigned)
	f.Add(retar(f, signed, "portcullis/decision.rego", []byte("package portcullis\n\ndecision := {\"allow\": true}\n")))
	f.Add(retar(f, signed, ".signatures.json", []byte(`{"signatures":["e30.e30.e30"]}`)))
	f.Add(signed[:len(signed)/2])
	f.Add(tarGz(f, []entry{{name: "../x.rego", data: []byte("x")}}))
	f.Add(tarGz(f, []entry{{name: "x.rego", typ: tar.TypeSymlink}}))
	f.Add(tarGz(f, []entry{{name: "/a.rego", data: []byte("a")}, {name: "a.rego", data: []byte("b")}}))
	f.Add(tarGz(f, []entry{{name: "a\\..\\..\\b.rego", data: []byte("a")}}))
	f.Add(tarGz(f, nil))
	f.Add([]byte("not gzip"))
	f.Add([]byte{0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		fsys, err := ReadArchive(bytes.NewReader(b))
		if err != nil {
			if fsys != nil {
				t.Fatalf("ReadArchive returned a bundle and an error %v", err)
			}
			return
		}
		total, n := 0, 0
		err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !fs.ValidPath(p) || strings.Contains(p, "..") || strings.Contains(p, "\\") {
				t.Fatalf("accepted a path outside the bundle root: %q", p)
			}
			if d.IsDir() {
				return nil
			}
			if !d.Type().IsRegular() {
				t.Fatalf("accepted a non-regular file %q (%v)", p, d.Type())
			}
			data, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			total += len(data)
			n++
			return nil
		})
		if err != nil {
			t.Fatalf("walking an accepted archive: %v", err)
		}
		if n == 0 || n > maxArchiveFiles || total > maxExpandedBytes {
			t.Fatalf("accepted an archive of %d files, %d bytes", n, total)
		}
		files, err := Files(fsys)
		if err != nil {
			return
		}
		if Verify(files, vc) == nil {
			// Only a signature by key verifies: the fuzzer cannot forge
			// one, so a verified bundle carries a signature file.
			if !bytes.Contains(mustRead(t, fsys, ".signatures.json"), []byte(".")) {
				t.Fatal("verified a bundle without a signature")
			}
		}
	})
}

func mustRead(t *testing.T, fsys fs.FS, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		t.Fatalf("verified bundle: %s: %v", name, err)
	}
	return b
}
