package policies

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/loader/filter"
)

// Bounds on what Load reads, so a mistaken bundle path (a home directory, a
// log file) fails fast instead of exhausting memory.
const (
	maxFileBytes   = 16 << 20
	maxBundleBytes = 64 << 20
	maxBundleFiles = 10000
)

// ReadFiles reads a bundle's files exactly as the engine loads them (the
// same limits, symlink and ConfigMap rules), sorted by path, so that tools
// which build, sign or inspect bundles see the bytes the engine would
// compile and digest.
func ReadFiles(fsys fs.FS) ([]File, error) {
	return readBundleFiles(fsys)
}

// File is one file of a bundle: a slash-separated path relative to the
// bundle root and its bytes, read once so that the digest and the compiled
// policy come from the same bytes.
type File struct {
	Path string
	Data []byte
}

// readBundleFiles reads every regular file under fsys, sorted by path.
func readBundleFiles(fsys fs.FS) ([]File, error) {
	var files []File
	total := 0
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Kubernetes ConfigMap mounts keep the real files in "..<timestamp>"
			// directories next to symlinks to them: read the symlinks only.
			if p != "." && len(d.Name()) > 1 && d.Name()[:2] == ".." {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			st, err := fs.Stat(fsys, p)
			if err != nil {
				return fmt.Errorf("bundle file %s: %w", p, err)
			}
			if st.IsDir() {
				return nil // a symlinked directory is not followed: no loops, no surprises
			}
			if !st.Mode().IsRegular() {
				return fmt.Errorf("bundle file %s: not a regular file", p)
			}
		}
		if len(files) >= maxBundleFiles {
			return fmt.Errorf("bundle has more than %d files", maxBundleFiles)
		}
		f, err := fsys.Open(p)
		if err != nil {
			return fmt.Errorf("open bundle file %s: %w", p, err)
		}
		data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
		closeErr := f.Close()
		if err != nil {
			return fmt.Errorf("read bundle file %s: %w", p, err)
		}
		if closeErr != nil {
			return fmt.Errorf("close bundle file %s: %w", p, closeErr)
		}
		if len(data) > maxFileBytes {
			return fmt.Errorf("bundle file %s exceeds %d bytes", p, maxFileBytes)
		}
		total += len(data)
		if total > maxBundleBytes {
			return fmt.Errorf("bundle exceeds %d bytes", maxBundleBytes)
		}
		files = append(files, File{Path: p, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk bundle: %w", err)
	}
	if len(files) == 0 {
		return nil, errors.New("bundle is empty")
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// digestFiles is the SHA-256 hex over the sorted files, each framed as
// path NUL length NUL content so no two bundles share a digest by
// shifting bytes between a name and a body.
func digestFiles(files []File) string {
	h := sha256.New()
	for _, f := range files {
		io.WriteString(h, f.Path)
		h.Write([]byte{0})
		io.WriteString(h, strconv.Itoa(len(f.Data)))
		h.Write([]byte{0})
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// parseBundle turns the files into an OPA bundle. The files must not hold a
// .signatures.json (see withoutSignatures): signatures are checked by
// readBundle, and OPA's reader refuses a signed bundle it cannot verify.
func parseBundle(files []File) (bundle.Bundle, error) {
	return readBundle(files, nil)
}

// readBundle reads the files as an OPA bundle; with vc set the reader
// requires a .signatures.json signed by vc's key and checks every file
// against its digest (no file may be missing, added or changed).
func readBundle(files []File, vc *bundle.VerificationConfig) (bundle.Bundle, error) {
	r := bundle.NewCustomReader(NewMemLoader(files)).
		WithSizeLimitBytes(maxFileBytes).
		WithProcessAnnotations(true)
	if vc != nil {
		r = r.WithBundleVerificationConfig(vc)
	}
	b, err := r.Read()
	if err != nil {
		return bundle.Bundle{}, fmt.Errorf("read bundle: %w", err)
	}
	return b, nil
}

// signaturesFile is where OPA keeps a bundle's signature.
const signaturesFile = ".signatures.json"

// withoutSignatures drops the top-level .signatures.json, which is not
// policy and is not covered by its own digest.
func withoutSignatures(files []File) []File {
	out := make([]File, 0, len(files))
	for _, f := range files {
		if f.Path != signaturesFile {
			out = append(out, f)
		}
	}
	return out
}

// signatureOf reads key id and algorithm from the (already verified) JWT
// of a bundle's signature.
func signatureOf(sc bundle.SignaturesConfig) (*Signature, error) {
	if len(sc.Signatures) != 1 {
		return nil, fmt.Errorf("bundle has %d signatures, want exactly 1", len(sc.Signatures))
	}
	return ParseSignature(sc.Signatures[0])
}

// ParseSignature reads the key id and algorithm from a bundle signature JWT
// without verifying it (callers verify separately, or only display it).
func ParseSignature(token string) (*Signature, error) {
	head, _, ok := strings.Cut(token, ".")
	if !ok {
		return nil, errors.New("signature is not a JWT")
	}
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return nil, fmt.Errorf("signature header: %w", err)
	}
	var h struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("signature header: %w", err)
	}
	if h.Kid == "" {
		// OPA may carry the key id in the payload instead of the header.
		_, rest, _ := strings.Cut(token, ".")
		body, _, _ := strings.Cut(rest, ".")
		if pb, err := base64.RawURLEncoding.DecodeString(body); err == nil {
			var p struct {
				KeyID string `json:"keyid"`
			}
			if json.Unmarshal(pb, &p) == nil {
				h.Kid = p.KeyID
			}
		}
	}
	return &Signature{KeyID: h.Kid, Algorithm: h.Alg}, nil
}

// NewMemLoader is a bundle.DirectoryLoader over files already in memory,
// for OPA's bundle reader: the engine's loads, and the bundle tools'
// signing and verification read files the same way.
func NewMemLoader(files []File) bundle.DirectoryLoader { return &memLoader{files: files} }

// memLoader is a bundle.DirectoryLoader over files already in memory.
type memLoader struct {
	mu    sync.Mutex
	files []File
	next  int
}

var _ bundle.DirectoryLoader = (*memLoader)(nil)

// NextFile returns the next file as a bundle descriptor, io.EOF at the end.
func (l *memLoader) NextFile() (*bundle.Descriptor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.next >= len(l.files) {
		return nil, io.EOF
	}
	f := l.files[l.next]
	l.next++
	p := "/" + path.Clean(f.Path)
	return bundle.NewDescriptor(p, p, bytes.NewReader(f.Data)), nil
}

// WithFilter is a no-op: every file of the bundle is part of it.
func (l *memLoader) WithFilter(filter.LoaderFilter) bundle.DirectoryLoader { return l }

// WithPathFormat is a no-op: paths are always slash-rooted, as the reader expects.
func (l *memLoader) WithPathFormat(bundle.PathFormat) bundle.DirectoryLoader { return l }

// WithSizeLimitBytes is a no-op: readBundleFiles already bounded the sizes.
func (l *memLoader) WithSizeLimitBytes(int64) bundle.DirectoryLoader { return l }

// WithFollowSymlinks is a no-op: symlinks were refused when reading.
func (l *memLoader) WithFollowSymlinks(bool) bundle.DirectoryLoader { return l }

// dirFS opens dir as a file system for LoadDir.
func dirFS(dir string) (fs.FS, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("policy bundle directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("policy bundle %s: not a directory", dir)
	}
	return os.DirFS(dir), nil
}
