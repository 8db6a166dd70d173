package identity

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// TLSOptions configures TLSFiles (the tls config section).
type TLSOptions struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, turns on mTLS: client certificates are
	// requested and verified against these CAs.
	ClientCAFile string
	// RequireClientCert refuses, at the handshake, clients without a
	// certificate the CA verifies; otherwise one is optional and callers
	// without it authenticate by bearer credential.
	RequireClientCert bool
	// MinVersion is tls.VersionTLS12 (default) or tls.VersionTLS13.
	MinVersion uint16
	// ReloadInterval is how often the files are checked for change
	// (default 5s).
	ReloadInterval time.Duration
	Logger         *slog.Logger
	Now            func() time.Time
}

// maxPEMBytes bounds one certificate, key or CA file.
const maxPEMBytes = 1 << 20

// TLSFiles serves the gateway's certificate and client CA from their files
// and reloads them when the files change, without a restart: each new
// handshake gets the current pair, connections already open keep theirs. A
// changed file that does not load (half-written, key not matching, expired
// CA) leaves the last good pair serving, and is logged.
type TLSFiles struct {
	opts TLSOptions
	log  *slog.Logger
	cur  atomic.Pointer[tlsGeneration]
	mu   sync.Mutex // serializes reloads
	// lastBad is the digest of the last file set that failed to load,
	// so a broken file is logged once, not every poll.
	lastBad [32]byte
}

// tlsGeneration is one loaded set of files and the tls.Config built from it.
type tlsGeneration struct {
	digest [32]byte
	leaf   *x509.Certificate
	cfg    *tls.Config
	// anchors are the SHA-256 digests of the client CA certificates.
	anchors map[[32]byte]struct{}
}

// NewTLSFiles loads the files once; an error here stops serve.
func NewTLSFiles(opts TLSOptions) (*TLSFiles, error) {
	if opts.CertFile == "" || opts.KeyFile == "" {
		return nil, errors.New("tls: cert_file and key_file are both needed")
	}
	if opts.MinVersion == 0 {
		opts.MinVersion = tls.VersionTLS12
	}
	if opts.MinVersion < tls.VersionTLS12 {
		return nil, errors.New("tls: min_version below 1.2 is not offered")
	}
	if opts.ReloadInterval <= 0 {
		opts.ReloadInterval = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t := &TLSFiles{opts: opts, log: opts.Logger}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	gen, _, err := t.load([32]byte{})
	if err != nil {
		return nil, err
	}
	t.cur.Store(gen)
	return t, nil
}

// Config is the listener's tls.Config: every handshake takes the current
// generation's config (certificate, client CAs, session ticket key).
func (t *TLSFiles) Config() *tls.Config {
	return &tls.Config{
		MinVersion: t.opts.MinVersion,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.cur.Load().cfg, nil
		},
	}
}

// TrustsClientCA reports whether anchor, the last certificate of a chain
// crypto/tls verified at a handshake, is still one of the client CAs now
// loaded. A connection kept alive outlives a reload that removed its CA;
// each request asks again, so removing a CA revokes what it issued on
// open connections too, not only for new handshakes.
func (t *TLSFiles) TrustsClientCA(anchor *x509.Certificate) bool {
	if anchor == nil {
		return false
	}
	_, ok := t.cur.Load().anchors[sha256.Sum256(anchor.Raw)]
	return ok
}

// Leaf is the certificate being served.
func (t *TLSFiles) Leaf() *x509.Certificate { return t.cur.Load().leaf }

// MTLS reports whether client certificates are requested.
func (t *TLSFiles) MTLS() bool { return t.opts.ClientCAFile != "" }

// Run checks the files every ReloadInterval until ctx ends.
func (t *TLSFiles) Run(ctx context.Context) {
	tick := time.NewTicker(t.opts.ReloadInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_, _ = t.Reload()
		}
	}
}

// Reload loads the files if they changed since the serving generation. It
// reports whether a new generation went live; on error the old one serves.
func (t *TLSFiles) Reload() (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.cur.Load()
	gen, digest, err := t.load(old.digest)
	if errors.Is(err, errUnchanged) {
		return false, nil
	}
	if err != nil {
		// Logged once per distinct broken state, not every poll.
		if digest != t.lastBad {
			t.log.Error("tls: the changed certificate files do not load; the previous certificate keeps serving", "err", err)
			t.lastBad = digest
		}
		return false, err
	}
	t.lastBad = [32]byte{}
	t.cur.Store(gen)
	t.log.Info("tls: certificate reloaded", "cert_file", t.opts.CertFile, "subject", gen.leaf.Subject.String(),
		"not_after", gen.leaf.NotAfter.UTC().Format(time.RFC3339), "client_ca_file", t.opts.ClientCAFile)
	return true, nil
}

var errUnchanged = errors.New("tls: files unchanged")

// load reads the files and, when their digest differs from prev, builds a
// generation from them. The digest is of the contents, or of the error when
// a file cannot be read.
func (t *TLSFiles) load(prev [32]byte) (*tlsGeneration, [32]byte, error) {
	certPEM, keyPEM, caPEM, err := t.read()
	if err != nil {
		return nil, sha256.Sum256([]byte(err.Error())), err
	}
	h := sha256.New()
	for _, b := range [][]byte{certPEM, keyPEM, caPEM} {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var digest [32]byte
	copy(digest[:], h.Sum(nil))
	if digest == prev {
		return nil, digest, errUnchanged
	}
	gen, err := t.build(certPEM, keyPEM, caPEM)
	if err != nil {
		return nil, digest, err
	}
	gen.digest = digest
	return gen, digest, nil
}

func (t *TLSFiles) read() (certPEM, keyPEM, caPEM []byte, err error) {
	if certPEM, err = readPEM(t.opts.CertFile); err != nil {
		return nil, nil, nil, fmt.Errorf("tls.cert_file: %w", err)
	}
	if err = CheckKeyFile(t.opts.KeyFile); err != nil {
		return nil, nil, nil, fmt.Errorf("tls.key_file: %w", err)
	}
	if keyPEM, err = readPEM(t.opts.KeyFile); err != nil {
		return nil, nil, nil, fmt.Errorf("tls.key_file: %w", err)
	}
	if t.opts.ClientCAFile != "" {
		if caPEM, err = readPEM(t.opts.ClientCAFile); err != nil {
			return nil, nil, nil, fmt.Errorf("tls.client_ca_file: %w", err)
		}
	}
	return certPEM, keyPEM, caPEM, nil
}

func (t *TLSFiles) build(certPEM, keyPEM, caPEM []byte) (*tlsGeneration, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.cert_file/key_file: %w", err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls.cert_file: %w", err)
		}
	}
	if now := t.opts.Now(); now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("tls.cert_file: the certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	cfg := &tls.Config{
		MinVersion:   t.opts.MinVersion,
		NextProtos:   []string{"h2", "http/1.1"},
		Certificates: []tls.Certificate{pair},
	}
	var anchors map[[32]byte]struct{}
	if len(caPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("tls.client_ca_file: no PEM certificate in it")
		}
		cfg.ClientCAs = pool
		if anchors, err = certDigests(caPEM); err != nil {
			return nil, fmt.Errorf("tls.client_ca_file: %w", err)
		}
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		if t.opts.RequireClientCert {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	// A fresh session ticket key per generation: a session resumed from
	// a ticket skips certificate verification, so tickets issued under a
	// client CA that has since been replaced must not resume.
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return nil, err
	}
	cfg.SetSessionTicketKeys([][32]byte{key})
	return &tlsGeneration{leaf: leaf, cfg: cfg, anchors: anchors}, nil
}

// certDigests are the SHA-256 digests of the DER of each certificate in
// pemBytes, as x509.CertPool.AppendCertsFromPEM takes them (other blocks
// and certificates that do not parse are skipped there, and here).
func certDigests(pemBytes []byte) (map[[32]byte]struct{}, error) {
	out := map[[32]byte]struct{}{}
	for len(pemBytes) > 0 {
		var block *pem.Block
		block, pemBytes = pem.Decode(pemBytes)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" || len(block.Headers) != 0 {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			continue
		}
		out[sha256.Sum256(c.Raw)] = struct{}{}
	}
	if len(out) == 0 {
		return nil, errors.New("no certificate in it")
	}
	return out, nil
}

// readPEM reads a PEM file of at most maxPEMBytes. The key file must be
// private (no group or other access), like every key file the gateway reads.
func readPEM(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPEMBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxPEMBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxPEMBytes)
	}
	if !bytes.Contains(b, []byte("-----BEGIN ")) {
		return nil, fmt.Errorf("%s holds no PEM block", path)
	}
	return b, nil
}

// CheckKeyFile refuses a private key file that group or others may read.
func CheckKeyFile(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is accessible to group or others (mode %04o); chmod 600 it", path, st.Mode().Perm())
	}
	return nil
}
