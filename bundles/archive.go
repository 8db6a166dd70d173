// Package bundles gets policy bundles to the engine and keeps the live one
// honest: it reads bundles from a directory, a .tar.gz OPA bundle or an
// HTTP(S) bundle service (polled with ETag/If-None-Match and backoff),
// enforces signature verification whenever a key is configured, activates a
// candidate only after it verifies, compiles and passes its own tests,
// records every activation as evidence, and evaluates an optional shadow
// bundle beside the live one without ever affecting a decision. It also
// builds, signs and inspects bundles for `gateway bundle`.
package bundles

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"testing/fstest"
)

// Bounds on an archive, so a hostile or mistaken bundle (a gzip bomb, a
// million tiny files) fails fast instead of exhausting memory. The engine
// applies its own per-file and total bounds again when it reads the files.
const (
	MaxArchiveBytes  = 64 << 20 // compressed, as fetched
	maxExpandedBytes = 64 << 20
	maxArchiveFiles  = 10000
	// maxTarBytes bounds the whole decompressed tar stream, headers
	// included: file contents (maxExpandedBytes) plus room for the headers
	// and padding of maxArchiveFiles entries with modest PAX records. A
	// PAX header alone may be 1 MiB, so headers must be bounded too.
	maxTarBytes = maxExpandedBytes + 16<<20
)

// errExpands is what a too-large decompressed stream reads as.
var errExpands = fmt.Errorf("expands beyond %d bytes", maxTarBytes)

// boundedReader fails, rather than ending, after max bytes.
type boundedReader struct {
	r   io.Reader
	max int64
	n   int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.n >= b.max {
		return 0, errExpands
	}
	if int64(len(p)) > b.max-b.n {
		p = p[:b.max-b.n]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

// ReadArchive reads a gzipped tar OPA bundle into memory. Only regular files
// and directories are accepted; links, devices and paths leaving the bundle
// root are refused, and a path that appears twice is an error rather than a
// silent overwrite.
func ReadArchive(r io.Reader) (fs.FS, error) {
	zr, err := gzip.NewReader(io.LimitReader(r, MaxArchiveBytes+1))
	if err != nil {
		return nil, fmt.Errorf("bundle archive: %w", err)
	}
	defer zr.Close()
	tr := tar.NewReader(&boundedReader{r: zr, max: maxTarBytes})
	files := fstest.MapFS{}
	total := int64(0)
	entries := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("bundle archive: %w", err)
		}
		// Every entry counts, directories too: each costs a header parse.
		if entries++; entries > maxArchiveFiles {
			return nil, fmt.Errorf("bundle archive: more than %d entries", maxArchiveFiles)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return nil, fmt.Errorf("bundle archive: %s: only regular files are allowed (type %q)", h.Name, h.Typeflag)
		}
		name, err := cleanName(h.Name)
		if err != nil {
			return nil, fmt.Errorf("bundle archive: %w", err)
		}
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("bundle archive: %s appears twice", name)
		}
		if len(files) >= maxArchiveFiles {
			return nil, fmt.Errorf("bundle archive: more than %d files", maxArchiveFiles)
		}
		if h.Size < 0 || total+h.Size > maxExpandedBytes {
			return nil, fmt.Errorf("bundle archive: expands beyond %d bytes", maxExpandedBytes)
		}
		var buf bytes.Buffer
		n, err := io.Copy(&buf, io.LimitReader(tr, h.Size+1))
		if err != nil {
			return nil, fmt.Errorf("bundle archive: %s: %w", name, err)
		}
		if n != h.Size {
			return nil, fmt.Errorf("bundle archive: %s: size mismatch", name)
		}
		total += n
		files[name] = &fstest.MapFile{Data: buf.Bytes(), Mode: 0o444}
	}
	if len(files) == 0 {
		return nil, errors.New("bundle archive: no files")
	}
	return files, nil
}

// cleanName turns an archive path ("/x.rego", "./a/b.json") into an fs.FS
// name, refusing anything that would leave the bundle root.
func cleanName(name string) (string, error) {
	n := strings.TrimPrefix(path.Clean("/"+strings.ReplaceAll(name, "\\", "/")), "/")
	if n == "" || n == "." || !fs.ValidPath(n) || strings.Contains(name, "..") {
		return "", fmt.Errorf("%q: not a path inside the bundle", name)
	}
	return n, nil
}
