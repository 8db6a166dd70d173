package sdk_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/sdk"
)

// TestTokenProviderAndTLS: the token provider is asked for a fresh token on
// every attempt (a retried request may outlive a token); the CA file and the
// client certificate reach the TLS handshake.
func TestTokenProviderAndTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sdk CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	caCert, _ := x509.ParseCertificate(caDER)
	issue := func(name string, server bool) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		}
		der, _ := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		kd, _ := x509.MarshalPKCS8PrivateKey(key)
		cf, kf := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		_ = os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
		_ = os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600)
		return cf, kf
	}
	caFile := filepath.Join(dir, "ca.pem")
	_ = os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644)
	scf, skf := issue("127.0.0.1", true)
	ccf, ckf := issue("agent-7", false)

	var attempts atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := attempts.Add(1)
		if len(r.TLS.VerifiedChains) == 0 || r.TLS.VerifiedChains[0][0].Subject.CommonName != "agent-7" {
			http.Error(w, `{"error":{"code":"unauthenticated","message":"no client cert","details":{}}}`, http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Authorization") != "Bearer token-"+string(rune('0'+n)) {
			http.Error(w, `{"error":{"code":"unauthenticated","message":"stale token","details":{}}}`, http.StatusUnauthorized)
			return
		}
		if n == 1 { // first attempt: retryable
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"code":"backend_unavailable","message":"later","details":{}}}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"tools":[],"names":{}}`))
	}))
	pair, err := tls.LoadX509KeyPair(scf, skf)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	var issued atomic.Int32
	tokens := func(context.Context) (string, error) {
		return "token-" + string(rune('0'+issued.Add(1))), nil
	}
	c := sdk.New(srv.URL, "", sdk.WithTokenProvider(tokens), sdk.WithCAFile(caFile), sdk.WithClientCertificate(ccf, ckf),
		sdk.WithBackoff(time.Millisecond, time.Millisecond))
	if _, err := c.Tools(context.Background()); err != nil {
		t.Fatalf("tools over mTLS with a token provider: %v", err)
	}
	if issued.Load() != 2 {
		t.Errorf("token provider called %d times for 2 attempts", issued.Load())
	}
	// Without the CA the server is not trusted; without the certificate
	// the server refuses.
	if _, err := sdk.New(srv.URL, "k").Tools(context.Background()); err == nil {
		t.Error("an untrusted server certificate was accepted")
	}
	var se *sdk.Error
	if _, err := sdk.New(srv.URL, "", sdk.WithCAFile(caFile), sdk.WithTokenProvider(tokens)).Tools(context.Background()); !errors.As(err, &se) || se.Status != 401 {
		t.Errorf("no client certificate: %v", err)
	}
	// A failing provider fails the call, and says so.
	bad := sdk.New(srv.URL, "", sdk.WithCAFile(caFile), sdk.WithTokenProvider(func(context.Context) (string, error) { return "", errors.New("idp down") }))
	if _, err := bad.Tools(context.Background()); err == nil || !strings.Contains(err.Error(), "idp down") {
		t.Errorf("failing provider: %v", err)
	}
	if _, err := sdk.New(srv.URL, "", sdk.WithCAFile(filepath.Join(dir, "missing.pem"))).Tools(context.Background()); err == nil {
		t.Error("a missing CA file did not fail the call")
	}
}
