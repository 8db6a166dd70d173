package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis/portcullis/gateway/identity"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// expiringJWT accepts the tokens it was given, each as a token of agent
// "alice" whose exp is the time given.
type expiringJWT map[string]time.Time

func (v expiringJWT) Verify(_ context.Context, tok string) (wire.Principal, error) {
	exp, ok := v[tok]
	if !ok {
		return wire.Principal{}, &identity.Failure{Reason: identity.ReasonBadSignature, Message: "the JWT signature does not verify"}
	}
	return wire.Principal{ID: "alice", Roles: []string{wire.RoleAgent}, Attributes: map[string]any{
		identity.AttrAuth: identity.AuthJWT, identity.AttrClaims: map[string]any{"sub": "alice", "exp": float64(exp.Unix())}}}, nil
}

// TestMCPStreamEndsWhenCredentialExpires: a GET stream is one request that
// never ends, so the authentication it passed would otherwise hold for as
// long as the client keeps it open. A stream opened with a JWT ends at the
// token's exp, also one that is past but still inside the verifier's
// leeway.
func TestMCPStreamEndsWhenCredentialExpires(t *testing.T) {
	t.Parallel()
	now := time.Now()
	const soon, past = "eyJhbGciOiJSUzI1NiJ9.e30.c29vbg", "eyJhbGciOiJSUzI1NiJ9.e30.cGFzdA"
	_, ts, _ := mcpTestServer(t, Options{
		JWT: expiringJWT{soon: now.Add(2 * time.Second), past: now.Add(-10 * time.Second)},
	})
	for _, tc := range []struct{ name, tok string }{{"expires during the stream", soon}, {"expired within leeway", past}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sid := mcpInit(t, ts.URL, tc.tok)
			resp := mcpOpenStream(t, ts.URL, tc.tok, sid)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /mcp: %d", resp.StatusCode)
			}
			if _, err := io.ReadAll(resp.Body); err != nil {
				t.Fatalf("the stream outlived its credential: %v", err)
			}
		})
	}
}

// sessionsOf counts the registered MCP sessions of principal id.
func sessionsOf(s *Server, id string) int {
	s.mcp.mu.Lock()
	defer s.mcp.mu.Unlock()
	n := 0
	for _, sess := range s.mcp.sessions {
		if sess.server.p.ID == id {
			n++
		}
	}
	return n
}

// TestMCPSessionCapHolds: the per-principal session cap (each session may
// hold a GET stream open) holds against a burst of concurrent initializes,
// which all pass the check before any registers, and across credentials
// of one principal (each JWT is a different principalKey: its claims
// differ).
func TestMCPSessionCapHolds(t *testing.T) {
	t.Parallel()
	exp := time.Now().Add(time.Hour)
	toks := expiringJWT{}
	for _, tok := range []string{"eyJhbGciOiJSUzI1NiJ9.e30.YQ", "eyJhbGciOiJSUzI1NiJ9.e30.Yg"} {
		toks[tok] = exp
		exp = exp.Add(time.Second) // another exp: another principalKey
	}
	s, ts, _ := mcpTestServer(t, Options{
		JWT: toks,
	})
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
	var wg sync.WaitGroup
	for tok := range toks {
		for range 3 * mcpSessionsPerIdentity {
			wg.Go(func() { mcpDo(t, ts.URL, http.MethodPost, tok, "", init, nil) })
		}
	}
	wg.Wait()
	if n := sessionsOf(s, "alice"); n > mcpSessionsPerIdentity {
		t.Fatalf("alice holds %d MCP sessions, the cap is %d", n, mcpSessionsPerIdentity)
	}
	// The cap still lets the principal in.
	for tok := range toks {
		mcpInit(t, ts.URL, tok)
	}
}

// TestMCPOneStreamPerSession: a session holds at most one GET stream, so
// the session cap bounds the streams too.
func TestMCPOneStreamPerSession(t *testing.T) {
	t.Parallel()
	_, ts, _ := mcpTestServer(t, Options{
		Keys: []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
	})
	sid := mcpInit(t, ts.URL, agentKey)
	get := func() *http.Response { return mcpOpenStream(t, ts.URL, agentKey, sid) }
	first := get()
	if first.StatusCode != http.StatusOK {
		t.Fatalf("first stream: %d", first.StatusCode)
	}
	head := make([]byte, 5)
	if _, err := io.ReadFull(first.Body, head); err != nil {
		t.Fatal(err)
	}
	if second := get(); second.StatusCode != http.StatusConflict {
		t.Fatalf("second stream on one session: %d, want 409", second.StatusCode)
	}
}

// TestAuthClientCertificateExpiredOnOpenConnection: crypto/tls checks a
// client certificate's validity and its CA at the handshake only; a
// connection kept alive past the certificate's notAfter (or its issuer's),
// or past a reload that removed its CA, must not keep authenticating
// requests.
func TestAuthClientCertificateExpiredOnOpenConnection(t *testing.T) {
	t.Parallel()
	ev := &memEvidence{}
	s := New(Options{
		ClientCerts:     stubCerts{"agent-7": {ID: "agent-7", Roles: []string{wire.RoleAgent}}},
		ClientCATrusted: func(anchor *x509.Certificate) bool { return anchor.Subject.CommonName != "removed CA" },
		Policy:          fakePolicy{allow: true}, Evidence: ev, Receipts: ev, Tools: []tools.Tool{&countingTool{}},
		InstanceID: "test", MaxBodyBytes: 4096, OpenAPI: OpenAPIDocument,
	})
	now := time.Now()
	valid := func(c *x509.Certificate) *x509.Certificate {
		c.NotBefore, c.NotAfter = now.Add(-time.Hour), now.Add(time.Hour)
		return c
	}
	leaf := func() *x509.Certificate { return valid(&x509.Certificate{Subject: pkix.Name{CommonName: "agent-7"}}) }
	removed := func() *x509.Certificate {
		return valid(&x509.Certificate{Subject: pkix.Name{CommonName: "removed CA"}})
	}
	for _, tc := range []struct {
		name   string
		chains [][]*x509.Certificate
		want   int
		reason string
	}{
		{"valid", [][]*x509.Certificate{{leaf(), valid(&x509.Certificate{})}}, http.StatusOK, ""},
		{"leaf expired", [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: "agent-7"}, NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(-time.Minute)}, valid(&x509.Certificate{})}}, http.StatusUnauthorized, identity.ReasonExpired},
		{"leaf not yet valid", [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: "agent-7"}, NotBefore: now.Add(time.Hour), NotAfter: now.Add(2 * time.Hour)}, valid(&x509.Certificate{})}}, http.StatusUnauthorized, identity.ReasonExpired},
		{"issuer expired", [][]*x509.Certificate{{leaf(), {NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(-time.Minute)}}}, http.StatusUnauthorized, identity.ReasonExpired},
		{"CA removed since the handshake", [][]*x509.Certificate{{leaf(), removed()}}, http.StatusUnauthorized, identity.ReasonCertUntrusted},
		{"one chain through a removed CA, one through a kept one", [][]*x509.Certificate{{leaf(), removed()}, {leaf(), valid(&x509.Certificate{})}}, http.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest(http.MethodPost, "/v1/tool-calls", strings.NewReader(`{"tool":"Count","input":{}}`))
			req.Header.Set("Content-Type", "application/json")
			req.TLS = &tls.ConnectionState{PeerCertificates: tc.chains[0][:1], VerifiedChains: tc.chains}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("%d %s, want %d", rec.Code, rec.Body, tc.want)
			}
			var out wire.ToolCallResponse
			_ = json.Unmarshal(rec.Body.Bytes(), &out)
			if tc.want == http.StatusUnauthorized && (out.ReceiptID != "" || out.Output.Error == nil || out.Output.Error.Details["reason"] != tc.reason) {
				t.Errorf("refusal %s: want reason %q and no receipt", rec.Body, tc.reason)
			}
		})
	}
}

// TestMCPStreamEndsWhenClientCARemoved: a GET stream opened with a client
// certificate ends once the certificate's CA is no longer trusted
// (ClientCATrusted turns false, as after a reload of tls.client_ca_file
// that dropped it), as the connection's next request would be refused.
func TestMCPStreamEndsWhenClientCARemoved(t *testing.T) {
	t.Parallel()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stream CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "agent-7"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	var trusted atomic.Bool
	trusted.Store(true)
	ev := &memEvidence{}
	s := New(Options{
		ClientCerts:     stubCerts{"agent-7": {ID: "agent-7", Roles: []string{wire.RoleAgent}}},
		ClientCATrusted: func(anchor *x509.Certificate) bool { return trusted.Load() && anchor.Equal(ca) },
		Policy:          fakePolicy{allow: true}, Evidence: ev, Receipts: ev, Tools: []tools.Tool{&countingTool{}},
		InstanceID: "test", MaxBodyBytes: 4096, OpenAPI: OpenAPIDocument,
	})
	ts := httptest.NewUnstartedServer(s.Handler())
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	ts.TLS = &tls.Config{ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	client := ts.Client()
	client.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}

	do := func(ctx context.Context, method, sid, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, ts.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Accept", "application/json, text/event-stream")
		if method == http.MethodGet {
			req.Header.Set("Accept", "text/event-stream")
		} else {
			req.Header.Set("Content-Type", "application/json")
		}
		if sid != "" {
			req.Header.Set(headerMCPSession, sid)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := do(t.Context(), http.MethodPost, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get(headerMCPSession)
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize over mTLS: %d, session %q", resp.StatusCode, sid)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a bound, not an assertion
	defer cancel()
	stream := do(ctx, http.MethodGet, sid, "")
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("GET /mcp over mTLS: %d", stream.StatusCode)
	}
	ended := make(chan error, 1)
	go func() { _, err := io.ReadAll(stream.Body); ended <- err }()
	select {
	case err := <-ended:
		t.Fatalf("the stream ended while its CA was trusted: %v", err)
	case <-time.After(1500 * time.Millisecond): // more than one check
	}
	trusted.Store(false)
	if err := <-ended; err != nil {
		t.Fatalf("the stream outlived its CA's removal: %v", err)
	}
}
