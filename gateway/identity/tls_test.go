package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/portcullis/portcullis/wire"
)

// testCA issues certificates for the tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a leaf; mod adjusts the template.
func (ca *testCA) issue(t testing.TB, mod func(*x509.Certificate)) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	if mod != nil {
		mod(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalPKCS8PrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})
}

func write(t testing.TB, path string, b []byte, mode os.FileMode) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // atomic, as cert-manager and kubelet do
		t.Fatal(err)
	}
}

// serveTLS serves TLSFiles' config on loopback; the handler answers the
// client certificate's subject.
func serveTLS(t *testing.T, tf *TLSFiles) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tf.Config())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.VerifiedChains) > 0 {
			_, _ = io.WriteString(w, r.TLS.VerifiedChains[0][0].Subject.String())
			return
		}
		_, _ = io.WriteString(w, "anonymous")
	}), ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String()
}

// mtlsFiles serves a certificate of serverCA with client CAs caPEM (the
// file, caFile, is rewritten by tests to rotate them), reloaded on demand.
func mtlsFiles(t *testing.T, serverCA *testCA, caPEM []byte) (*TLSFiles, string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.pem")
	sc, sk := serverCA.issue(t, nil)
	write(t, certFile, sc, 0o644)
	write(t, keyFile, sk, 0o600)
	write(t, caFile, caPEM, 0o644)
	tf, err := NewTLSFiles(TLSOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, ReloadInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return tf, caFile
}

// client presents certs[0], if given, whatever CAs the server asks for (as
// an attacker would: Go's own client withholds a certificate the server's
// CA list does not name).
func client(roots *x509.CertPool, certs ...tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: roots}
	if len(certs) > 0 {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

func get(c *http.Client, u string) (string, *tls.ConnectionState, error) {
	resp, err := c.Get(u)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.TLS, nil
}

// TestTLSReload: a new certificate written over the files serves new
// connections without a restart; an open connection keeps working; a broken
// pair keeps the old one serving.
func TestTLSReload(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "server CA")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c1, k1 := ca.issue(t, func(c *x509.Certificate) { c.Subject.CommonName = "gen-1" })
	write(t, certFile, c1, 0o644)
	write(t, keyFile, k1, 0o600)
	tf, err := NewTLSFiles(TLSOptions{CertFile: certFile, KeyFile: keyFile, ReloadInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	base := serveTLS(t, tf)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	keep := client(roots) // keeps its connection alive across the reload
	_, st, err := get(keep, base)
	if err != nil {
		t.Fatal(err)
	}
	if cn := st.PeerCertificates[0].Subject.CommonName; cn != "gen-1" {
		t.Fatalf("served %s", cn)
	}
	if st.Version < tls.VersionTLS12 {
		t.Fatalf("negotiated version %x", st.Version)
	}

	c2, k2 := ca.issue(t, func(c *x509.Certificate) { c.Subject.CommonName = "gen-2" })
	write(t, certFile, c2, 0o644)
	write(t, keyFile, k2, 0o600)
	if changed, err := tf.Reload(); err != nil || !changed {
		t.Fatalf("reload: changed=%v err=%v", changed, err)
	}
	_, st, err = get(client(roots), base)
	if err != nil {
		t.Fatal(err)
	}
	if cn := st.PeerCertificates[0].Subject.CommonName; cn != "gen-2" {
		t.Errorf("new connection after reload served %s, want gen-2", cn)
	}
	_, st, err = get(keep, base)
	if err != nil {
		t.Fatalf("the connection open across the reload failed: %v", err)
	}
	if cn := st.PeerCertificates[0].Subject.CommonName; cn != "gen-1" {
		t.Errorf("the open connection was renegotiated to %s", cn)
	}

	// Broken states: half-written pair (new cert, old key), garbage, an
	// expired certificate, a key file others can read. Each keeps gen-2.
	c3, _ := ca.issue(t, func(c *x509.Certificate) { c.Subject.CommonName = "gen-3" })
	expired, expiredKey := ca.issue(t, func(c *x509.Certificate) {
		c.Subject.CommonName = "expired"
		c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	})
	for name, breakIt := range map[string]func(){
		"cert without its key": func() { write(t, certFile, c3, 0o644) },
		"garbage":              func() { write(t, certFile, []byte("-----BEGIN CERTIFICATE-----\nnope\n"), 0o644) },
		"expired":              func() { write(t, certFile, expired, 0o644); write(t, keyFile, expiredKey, 0o600) },
		"key readable by all":  func() { write(t, certFile, c2, 0o644); write(t, keyFile, k2, 0o644) },
		"key missing":          func() { _ = os.Remove(keyFile) },
	} {
		breakIt()
		if changed, err := tf.Reload(); err == nil || changed {
			t.Errorf("%s: reload accepted it (changed=%v)", name, changed)
		}
		_, st, err := get(client(roots), base)
		if err != nil {
			t.Fatalf("%s: serving broke: %v", name, err)
		}
		if cn := st.PeerCertificates[0].Subject.CommonName; cn != "gen-2" {
			t.Errorf("%s: served %s, want gen-2 kept", name, cn)
		}
		write(t, certFile, c2, 0o644)
		write(t, keyFile, k2, 0o600)
	}
	// TLS 1.1 is refused.
	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MaxVersion: tls.VersionTLS11}}}
	if _, _, err := get(old, base); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
}

// TestMTLS: client certificates are verified against client_ca_file (also
// reloaded); expired and untrusted ones fail the handshake.
func TestMTLS(t *testing.T) {
	t.Parallel()
	serverCA, clientCA, otherCA := newTestCA(t, "server CA"), newTestCA(t, "client CA"), newTestCA(t, "other CA")
	tf, caFile := mtlsFiles(t, serverCA, clientCA.pem)
	base := serveTLS(t, tf)
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.cert)
	pair := func(ca *testCA, mod func(*x509.Certificate)) tls.Certificate {
		c, k := ca.issue(t, mod)
		p, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := pair(clientCA, func(c *x509.Certificate) {
		c.Subject = pkix.Name{CommonName: "agent-7", Organization: []string{"Example"}}
	})
	if body, _, err := get(client(roots, good), base); err != nil || body != "CN=agent-7,O=Example" {
		t.Fatalf("trusted client cert: %q %v", body, err)
	}
	if body, _, err := get(client(roots), base); err != nil || body != "anonymous" {
		t.Fatalf("no client cert (optional): %q %v", body, err)
	}
	expired := pair(clientCA, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Minute)
	})
	if _, _, err := get(client(roots, expired), base); err == nil {
		t.Error("an expired client certificate was accepted")
	}
	if _, _, err := get(client(roots, pair(otherCA, nil)), base); err == nil {
		t.Error("a client certificate from an untrusted CA was accepted")
	}
	serverOnly := pair(clientCA, func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth} })
	if _, _, err := get(client(roots, serverOnly), base); err == nil {
		t.Error("a certificate for server auth only was accepted as a client's")
	}
	// The client CA rotates to otherCA: its certificates are trusted on
	// new connections, the old CA's no longer.
	write(t, caFile, otherCA.pem, 0o644)
	if changed, err := tf.Reload(); err != nil || !changed {
		t.Fatalf("CA reload: %v %v", changed, err)
	}
	if _, _, err := get(client(roots, pair(otherCA, nil)), base); err != nil {
		t.Errorf("cert of the new client CA refused: %v", err)
	}
	if _, _, err := get(client(roots, good), base); err == nil {
		t.Error("cert of the replaced client CA still accepted on a new connection")
	}
}

func TestCertMapper(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "client CA")
	parse := func(mod func(*x509.Certificate)) *x509.Certificate {
		c, _ := ca.issue(t, mod)
		b, _ := pem.Decode(c)
		x, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	p := func(id string) wire.Principal { return wire.Principal{ID: id} }
	m, err := NewCertMapper([]CertPrincipal{
		{"CN=agent-7,O=Example", p("by-subject")},
		{"dns:Agent-8.internal", p("by-dns")},
		{"uri:spiffe://example.org/agent/9", p("by-uri")},
		{"email:ops@example.com", p("by-email")},
	})
	if err != nil {
		t.Fatal(err)
	}
	spiffe, _ := url.Parse("spiffe://example.org/agent/9")
	for _, c := range []struct {
		name   string
		mod    func(*x509.Certificate)
		want   string
		reason string
	}{
		{"subject", func(c *x509.Certificate) {
			c.Subject = pkix.Name{CommonName: "agent-7", Organization: []string{"Example"}}
		}, "by-subject", ""},
		{"subject, other order of attributes is another DN", func(c *x509.Certificate) {
			c.Subject = pkix.Name{CommonName: "agent-7", Organization: []string{"Example"}, OrganizationalUnit: []string{"x"}}
		}, "", ReasonCertUnmapped},
		{"dns, case-insensitive", func(c *x509.Certificate) { c.DNSNames = []string{"agent-8.INTERNAL"} }, "by-dns", ""},
		{"uri", func(c *x509.Certificate) { c.URIs = []*url.URL{spiffe} }, "by-uri", ""},
		{"email", func(c *x509.Certificate) { c.EmailAddresses = []string{"ops@example.com"} }, "by-email", ""},
		{"common name that looks like a SAN", func(c *x509.Certificate) { c.Subject = pkix.Name{CommonName: "agent-8.internal"} }, "", ReasonCertUnmapped},
		{"two principals", func(c *x509.Certificate) {
			c.Subject = pkix.Name{CommonName: "agent-7", Organization: []string{"Example"}}
			c.DNSNames = []string{"agent-8.internal"}
		}, "", ReasonCertAmbiguous},
		{"nothing", nil, "", ReasonCertUnmapped},
	} {
		got, err := m.Map(parse(c.mod))
		if c.want != "" {
			if err != nil || got.ID != c.want {
				t.Errorf("%s: got %q, %v; want %s", c.name, got.ID, err, c.want)
			}
			continue
		}
		var f *Failure
		if !errors.As(err, &f) || f.Reason != c.reason {
			t.Errorf("%s: err = %v, want %s", c.name, err, c.reason)
		}
	}
	for _, bad := range []string{"dns:*.internal", "agent-7", "ldap:x", "uri:nope", ""} {
		if _, err := NewCertMapper([]CertPrincipal{{bad, p("x")}}); err == nil {
			t.Errorf("match %q accepted", bad)
		}
	}
	if _, err := NewCertMapper([]CertPrincipal{{"dns:a.b", p("x")}, {"DNS:A.B", p("y")}}); err == nil {
		t.Error("the same SAN bound to two principals was accepted")
	}
}

// TestMTLSNoResumptionAcrossCARotation: a TLS session made with a client
// certificate of the old client CA is not resumed (skipping verification)
// after the CA file is replaced.
func TestMTLSNoResumptionAcrossCARotation(t *testing.T) {
	t.Parallel()
	serverCA, oldCA, newCA := newTestCA(t, "server CA"), newTestCA(t, "old client CA"), newTestCA(t, "new client CA")
	tf, caFile := mtlsFiles(t, serverCA, oldCA.pem)
	base := serveTLS(t, tf)
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.cert)
	c, k := oldCA.issue(t, func(c *x509.Certificate) { c.Subject.CommonName = "agent-old" })
	pair, _ := tls.X509KeyPair(c, k)
	cache := tls.NewLRUClientSessionCache(8)
	fresh := func() *http.Client { // a new connection each time, one session cache
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{
			RootCAs: roots, ClientSessionCache: cache,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil },
		}}}
	}
	for i := range 2 { // the second connection resumes: the cache works
		body, st, err := get(fresh(), base)
		if err != nil || body != "CN=agent-old" {
			t.Fatalf("before rotation: %q %v", body, err)
		}
		if i == 1 && !st.DidResume {
			t.Skip("the session was not resumed even before rotation; nothing to test here")
		}
	}
	write(t, caFile, newCA.pem, 0o644)
	if _, err := tf.Reload(); err != nil {
		t.Fatal(err)
	}
	body, st, err := get(fresh(), base)
	if err == nil && (st.DidResume || body == "CN=agent-old") {
		t.Errorf("after the client CA was replaced, the old CA's session resumed (resumed=%v, body %q)", st.DidResume, body)
	}
}

// TestTrustsClientCA: the per-request trust check follows the loaded
// client CA file: a CA stays trusted while the file holds it (beside
// others) and stops being trusted when a reload drops it.
func TestTrustsClientCA(t *testing.T) {
	t.Parallel()
	serverCA, oldCA, newCA := newTestCA(t, "server CA"), newTestCA(t, "old client CA"), newTestCA(t, "new client CA")
	tf, caFile := mtlsFiles(t, serverCA, oldCA.pem)
	steps := []struct {
		file     []byte
		old, new bool
	}{
		{oldCA.pem, true, false},
		{append(append([]byte{}, oldCA.pem...), newCA.pem...), true, true},
		{newCA.pem, false, true},
	}
	for i, st := range steps {
		if i > 0 {
			write(t, caFile, st.file, 0o644)
			if _, err := tf.Reload(); err != nil {
				t.Fatal(err)
			}
		}
		if got := tf.TrustsClientCA(oldCA.cert); got != st.old {
			t.Errorf("step %d: old CA trusted %v, want %v", i, got, st.old)
		}
		if got := tf.TrustsClientCA(newCA.cert); got != st.new {
			t.Errorf("step %d: new CA trusted %v, want %v", i, got, st.new)
		}
	}
	if tf.TrustsClientCA(nil) || tf.TrustsClientCA(serverCA.cert) {
		t.Error("nil or a CA never in the file is trusted")
	}
}
