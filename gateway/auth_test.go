package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/gateway/identity"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// recordingPolicy allows everything and keeps the principals it saw.
type recordingPolicy struct {
	mu   sync.Mutex
	seen []wire.Principal
}

func (p *recordingPolicy) Decide(_ context.Context, in wire.PolicyInput) (wire.Decision, error) {
	p.mu.Lock()
	p.seen = append(p.seen, in.Principal)
	p.mu.Unlock()
	return wire.Decision{Allow: true, PolicyRevision: "rev-1"}, nil
}
func (*recordingPolicy) Ready() bool { return true }

func (p *recordingPolicy) last() wire.Principal {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[len(p.seen)-1]
}

// stubJWT accepts exactly one token and refuses every other with a reason.
type stubJWT struct{ good string }

func (s stubJWT) Verify(_ context.Context, tok string) (wire.Principal, error) {
	if tok == s.good {
		return wire.Principal{ID: "alice", Roles: []string{wire.RoleAgent},
			Attributes: map[string]any{identity.AttrAuth: identity.AuthJWT, identity.AttrClaims: map[string]any{"team": "payments"}}}, nil
	}
	return wire.Principal{}, &identity.Failure{Reason: identity.ReasonBadSignature, Message: "the JWT signature does not verify"}
}

// jwtShaped is a token LooksLikeJWT accepts: {"alg":"RS256"}.{}.sig
const jwtShaped = "eyJhbGciOiJSUzI1NiJ9.e30.c2ln"

// TestAuthJWTNeverFallsBackToKeys: a bearer token that is a JWT is judged as
// one only. Even when the very same string is also a configured API key, a
// JWT that does not verify is refused 401 with no receipt.
func TestAuthJWTNeverFallsBackToKeys(t *testing.T) {
	t.Parallel()
	pol := &recordingPolicy{}
	ev := &memEvidence{}
	keyed := func(jwt TokenVerifier) *httptest.Server {
		s := New(Options{
			Keys: []Key{{SHA256: sha256.Sum256([]byte(jwtShaped)), Principal: wire.Principal{ID: "agent-key",
				Roles: []string{wire.RoleAgent}, Attributes: map[string]any{"team": "e2e"}}}},
			JWT:    jwt,
			Policy: pol, Evidence: ev, Receipts: ev, Tools: []tools.Tool{&countingTool{}},
			InstanceID: "test", MaxBodyBytes: 4096, OpenAPI: OpenAPIDocument,
		})
		ts := httptest.NewServer(s.Handler())
		t.Cleanup(ts.Close)
		return ts
	}
	// Without auth.jwt, the string is an API key like any other.
	off := keyed(nil)
	if st, out := post(t, off.URL, jwtShaped, `{"tool":"Count","input":{}}`); st != 200 {
		t.Fatalf("API key refused without auth.jwt: %d %+v", st, out.Output.Error)
	}
	if p := pol.last(); p.ID != "agent-key" || p.Attributes[identity.AttrAuth] != identity.AuthAPIKey || p.Attributes["team"] != "e2e" {
		t.Errorf("policy saw %+v", p)
	}
	events := len(ev.events)
	// With auth.jwt, the same string is a JWT whose signature fails.
	on := keyed(stubJWT{good: "x.y.z"})
	st, out := post(t, on.URL, jwtShaped, `{"tool":"Count","input":{}}`)
	if st != 401 || out.Output.Error == nil || out.Output.Error.Code != wire.CodeUnauthenticated {
		t.Fatalf("bad JWT: %d %+v", st, out.Output.Error)
	}
	if out.ReceiptID != "" || len(ev.events) != events {
		t.Errorf("a refused credential got a receipt (%q) or evidence", out.ReceiptID)
	}
	if r := out.Output.Error.Details["reason"]; r != identity.ReasonBadSignature {
		t.Errorf("details.reason = %v", r)
	}
}

// TestAuthJWTClaimsReachPolicy: a verified token's principal, with its claims
// and auth method, is what the policy sees; a token role the route lacks is
// 403, and nothing in the body can name another principal.
func TestAuthJWTClaimsReachPolicy(t *testing.T) {
	t.Parallel()
	pol := &recordingPolicy{}
	ev := &memEvidence{}
	good := "eyJhbGciOiJFUzI1NiJ9.e30.Z29vZA"
	s := New(Options{JWT: stubJWT{good: good}, Policy: pol, Evidence: ev, Receipts: ev,
		Tools: []tools.Tool{&countingTool{}}, InstanceID: "test", MaxBodyBytes: 4096, OpenAPI: OpenAPIDocument})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	st, out := post(t, ts.URL, good, `{"tool":"Count","input":{},"principal":{"id":"admin-1"}}`)
	if st != 400 {
		t.Fatalf("a body naming a principal: %d %+v", st, out.Output.Error)
	}
	st, out = post(t, ts.URL, good, `{"tool":"Count","input":{}}`)
	if st != 200 {
		t.Fatalf("good JWT: %d %+v", st, out.Output.Error)
	}
	p := pol.last()
	claims, _ := p.Attributes[identity.AttrClaims].(map[string]any)
	if p.ID != "alice" || p.Attributes[identity.AttrAuth] != identity.AuthJWT || claims["team"] != "payments" {
		t.Errorf("policy saw %+v", p)
	}
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/receipts", nil)
	req.Header.Set("Authorization", "Bearer "+good)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("agent token on an auditor route: %d", resp.StatusCode)
	}
}

// stubCerts maps a certificate by its common name.
type stubCerts map[string]wire.Principal

func (m stubCerts) Map(c *x509.Certificate) (wire.Principal, error) {
	if p, ok := m[c.Subject.CommonName]; ok {
		return p, nil
	}
	return wire.Principal{}, &identity.Failure{Reason: identity.ReasonCertUnmapped, Message: "bound to no principal"}
}

// TestAuthClientCertificate: a verified client certificate authenticates
// only when no Authorization header is sent; one bound to no principal is
// 401; an Authorization header, when sent, is the credential.
func TestAuthClientCertificate(t *testing.T) {
	t.Parallel()
	pol := &recordingPolicy{}
	ev := &memEvidence{}
	s := New(Options{
		Keys:        []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		ClientCerts: stubCerts{"agent-7": {ID: "agent-7", Roles: []string{wire.RoleAgent}, Attributes: map[string]any{identity.AttrAuth: identity.AuthMTLS}}},
		Policy:      pol, Evidence: ev, Receipts: ev, Tools: []tools.Tool{&countingTool{}},
		InstanceID: "test", MaxBodyBytes: 4096, OpenAPI: OpenAPIDocument,
	})
	call := func(cn, authz string) (int, wire.ToolCallResponse) {
		req := httptest.NewRequest(http.MethodPost, "/v1/tool-calls", strings.NewReader(`{"tool":"Count","input":{}}`))
		req.Header.Set("Content-Type", "application/json")
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		if cn != "" {
			leaf := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
			req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		var out wire.ToolCallResponse
		_ = json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	if st, out := call("agent-7", ""); st != 200 || pol.last().ID != "agent-7" {
		t.Errorf("mapped certificate: %d %+v", st, out.Output.Error)
	}
	if st, out := call("stranger", ""); st != 401 || out.Output.Error.Details["reason"] != identity.ReasonCertUnmapped || out.ReceiptID != "" {
		t.Errorf("unmapped certificate: %d %+v", st, out.Output.Error)
	}
	if st, _ := call("agent-7", "Bearer wrong-key"); st != 401 {
		t.Errorf("a bad key beside a good certificate: %d (the header is the credential)", st)
	}
	if st, _ := call("agent-7", "Bearer "+agentKey); st != 200 || pol.last().ID != "agent-1" {
		t.Errorf("a good key beside a certificate: %d, principal %s", st, pol.last().ID)
	}
	if st, _ := call("", ""); st != 401 {
		t.Errorf("nothing at all: %d", st)
	}
}

// TestAuthOneAuthorizationHeader: Authorization is not a list header, and
// a request carrying several is ambiguous: a proxy in front may judge one
// while the gateway reads another (the first). Such a request is refused
// 401 (details.reason multiple_credentials), in either order, whatever each
// one holds.
func TestAuthOneAuthorizationHeader(t *testing.T) {
	t.Parallel()
	ev := &memEvidence{}
	s := New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte("one-good-key")), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		Policy: fakePolicy{allow: true}, Evidence: ev, Receipts: ev, Tools: []tools.Tool{&countingTool{}},
		InstanceID: "test", MaxBodyBytes: 4096, OpenAPI: OpenAPIDocument,
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	for _, hs := range [][]string{
		{"Bearer one-good-key", "Bearer some-other-key"},
		{"Bearer some-other-key", "Bearer one-good-key"},
		{"Bearer one-good-key", "Bearer one-good-key"},
	} {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/tool-calls", strings.NewReader(`{"tool":"Count","input":{}}`))
		for _, h := range hs {
			req.Header.Add("Authorization", h)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out wire.ToolCallResponse
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || out.Output.Error == nil || out.Output.Error.Details["reason"] != identity.ReasonMultipleCredentials {
			t.Errorf("headers %q: got %d %+v, want 401 multiple_credentials", hs, resp.StatusCode, out.Output.Error)
		}
	}
	// One header still works.
	if st, out := post(t, ts.URL, "one-good-key", `{"tool":"Count","input":{}}`); st != http.StatusOK {
		t.Errorf("one Authorization header: %d %+v", st, out.Output.Error)
	}
}
