package bundles

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/portcullis/portcullis/policies"
)

// SignaturesFile is where an OPA bundle keeps its signature.
const SignaturesFile = ".signatures.json"

// File is one file of a bundle, as read.
type File = policies.File

// Open reads a bundle from a directory or a .tar.gz file into an fs.FS.
func Open(p string) (fs.FS, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if st.IsDir() {
		return os.DirFS(p), nil
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	defer f.Close()
	return ReadArchive(f)
}

// Files reads every regular file of fsys, sorted by path, exactly as the
// engine reads a bundle (policies.ReadFiles), so what is built, signed and
// inspected is what activates.
func Files(fsys fs.FS) ([]File, error) {
	files, err := policies.ReadFiles(fsys)
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	return files, nil
}

// BuildOptions tune Build.
type BuildOptions struct {
	// Revision, when set, is written into the .manifest (created if absent).
	Revision string
	// SigningKey is a PEM private key; when set the bundle is signed.
	SigningKey []byte
	// KeyID is the key id named in the signature (the verifier's key_id).
	KeyID string
}

// Build packs the files of fsys as a .tar.gz OPA bundle, byte for byte
// except for the .manifest revision, and signs it when a key is given. Any
// .signatures.json already present is replaced. The archive is
// deterministic: sorted entries, zero times, fixed modes.
func Build(fsys fs.FS, opts BuildOptions) ([]byte, error) {
	files, err := Files(fsys)
	if err != nil {
		return nil, err
	}
	files = dropSignatures(files)
	if opts.Revision != "" {
		if files, err = setRevision(files, opts.Revision); err != nil {
			return nil, err
		}
	}
	if len(opts.SigningKey) > 0 {
		sig, err := SignFiles(files, opts.SigningKey, opts.KeyID)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Path: SignaturesFile, Data: sig})
		sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	}
	return writeArchive(files)
}

// SignFiles returns the .signatures.json content for files: one JWT, signed
// with the PEM private key, whose payload lists every file's SHA-256 (JSON
// data and the manifest hashed in OPA's canonical form, as OPA verifies
// them). The algorithm follows from the key.
func SignFiles(files []File, keyPEM []byte, keyID string) ([]byte, error) {
	alg, err := privateKeyAlgorithm(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	h, err := bundle.NewSignatureHasher(bundle.SHA256)
	if err != nil {
		return nil, err
	}
	var infos []bundle.FileInfo
	for _, f := range files {
		if f.Path == SignaturesFile {
			continue
		}
		var v any = f.Data
		if bundle.IsStructuredDoc(f.Path) {
			var parsed any
			if err := util.Unmarshal(f.Data, &parsed); err != nil {
				return nil, fmt.Errorf("sign %s: %w", f.Path, err)
			}
			v = parsed
		}
		sum, err := h.HashFile(v)
		if err != nil {
			return nil, fmt.Errorf("sign %s: %w", f.Path, err)
		}
		infos = append(infos, bundle.NewFile(f.Path, hex.EncodeToString(sum), string(bundle.SHA256)))
	}
	token, err := bundle.GenerateSignedToken(infos, bundle.NewSigningConfig(string(keyPEM), alg, ""), keyID)
	if err != nil {
		return nil, fmt.Errorf("sign bundle: %w", err)
	}
	return json.MarshalIndent(bundle.SignaturesConfig{Signatures: []string{token}}, "", "  ")
}

func dropSignatures(files []File) []File {
	out := files[:0:0]
	for _, f := range files {
		if f.Path != SignaturesFile {
			out = append(out, f)
		}
	}
	return out
}

// setRevision writes revision into the .manifest, keeping its other keys.
func setRevision(files []File, revision string) ([]File, error) {
	for i, f := range files {
		if f.Path != ".manifest" {
			continue
		}
		m := map[string]any{}
		if err := json.Unmarshal(f.Data, &m); err != nil {
			return nil, fmt.Errorf(".manifest: %w", err)
		}
		m["revision"] = revision
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return nil, err
		}
		files[i].Data = b
		return files, nil
	}
	b, err := json.Marshal(map[string]any{"revision": revision})
	if err != nil {
		return nil, err
	}
	files = append(files, File{Path: ".manifest", Data: b})
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

func writeArchive(files []File) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		h := &tar.Header{Name: "/" + f.Path, Mode: 0o644, Size: int64(len(f.Data)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("write bundle: %w", err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("write bundle: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("write bundle: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("write bundle: %w", err)
	}
	return buf.Bytes(), nil
}

// Report describes a bundle for `gateway bundle inspect`.
type Report struct {
	Revision  string           `json:"revision"`
	Roots     []string         `json:"roots"`
	Files     []FileReport     `json:"files"`
	Signature *SignatureReport `json:"signature,omitempty"`
	Manifest  map[string]any   `json:"manifest,omitempty"`
}

// FileReport is one file and its SHA-256.
type FileReport struct {
	Path   string `json:"path"`
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
}

// SignatureReport says who signed the bundle and whether that was checked.
type SignatureReport struct {
	KeyID     string `json:"key_id"`
	Algorithm string `json:"algorithm"`
	// Verified is true only when a verification key was given and the
	// signature and every file digest check out.
	Verified bool   `json:"verified"`
	Error    string `json:"error,omitempty"`
}

// Inspect describes the bundle in fsys. With vc set the signature is
// verified (Signature.Verified, or Signature.Error saying why not).
func Inspect(fsys fs.FS, vc *bundle.VerificationConfig) (Report, error) {
	files, err := Files(fsys)
	if err != nil {
		return Report{}, err
	}
	var rep Report
	var sigData []byte
	for _, f := range files {
		sum := sha256.Sum256(f.Data)
		rep.Files = append(rep.Files, FileReport{Path: f.Path, Size: len(f.Data), SHA256: hex.EncodeToString(sum[:])})
		switch f.Path {
		case ".manifest":
			if err := json.Unmarshal(f.Data, &rep.Manifest); err != nil {
				return Report{}, fmt.Errorf(".manifest: %w", err)
			}
			if r, ok := rep.Manifest["revision"].(string); ok {
				rep.Revision = r
			}
			if roots, ok := rep.Manifest["roots"].([]any); ok {
				for _, r := range roots {
					if s, ok := r.(string); ok {
						rep.Roots = append(rep.Roots, s)
					}
				}
			}
		case SignaturesFile:
			sigData = f.Data
		}
	}
	if rep.Roots == nil {
		rep.Roots = []string{""} // OPA's default: the bundle owns all of data
	}
	if sigData != nil {
		var sc bundle.SignaturesConfig
		if err := json.Unmarshal(sigData, &sc); err != nil || len(sc.Signatures) == 0 {
			rep.Signature = &SignatureReport{Error: "unreadable .signatures.json"}
		} else {
			rep.Signature = &SignatureReport{Error: "unreadable signature"}
			if s, err := policies.ParseSignature(sc.Signatures[0]); err == nil {
				rep.Signature = &SignatureReport{KeyID: s.KeyID, Algorithm: s.Algorithm}
			}
		}
	}
	if vc != nil {
		if rep.Signature == nil {
			rep.Signature = &SignatureReport{}
		}
		if err := Verify(files, vc); err != nil {
			rep.Signature.Error = err.Error()
		} else {
			rep.Signature.Verified = true
		}
	}
	return rep, nil
}

// Verify checks the files' signature with OPA's bundle reader, exactly as
// activation does.
func Verify(files []File, vc *bundle.VerificationConfig) error {
	loader := policies.NewMemLoader(files)
	_, err := bundle.NewCustomReader(loader).WithBundleVerificationConfig(vc).Read()
	if err != nil {
		return fmt.Errorf("verify bundle: %w", err)
	}
	return nil
}
