package tests

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
)

// The identity suite (CONTRACT section 11, docs/authentication.md): a real
// local issuer (a JWKS served by httptest, with rotating keys) and
// certificates the tests make, against the real gateway binary.

// authPolicy replaces the e2e policy in these deployments: it allows every
// call and says, in its reason, what the policy saw of the principal, so
// the tests can check what reached input.principal.
const authPolicy = `package portcullis

default decision := {"allow": false, "reasons": ["auth-e2e: denied"], "rule_ids": ["auth.deny"]}

claims := object.get(input.principal.attributes, "claims", {})

decision := {
	"allow": true,
	"reasons": [sprintf("auth=%s id=%s team=%s roles=%v", [input.principal.attributes.auth, input.principal.id, object.get(claims, "team", "-"), input.principal.roles])],
	"rule_ids": ["auth.allow"],
	"fs_grants": [{"path": data.authe2e.scratch, "mode": "r"}],
	"network": {"posture": "off", "allow": []},
	"env": {"pass": [], "set": {}},
	"limits": {},
} if {
	object.get(claims, "team", "") != "blocked"
}
`

// authDeployment is a deployment with authPolicy and extra config appended
// (after the principals list: more principals first, then top-level keys).
func authDeployment(t *testing.T, morePrincipals, extra string) *deployment {
	t.Helper()
	d := newDeployment(t, storeSQLite)
	writeFile(t, filepath.Join(d.bundleDir, "e2e.rego"), []byte(authPolicy))
	writeJSON(t, filepath.Join(d.bundleDir, "data.json"), map[string]any{"authe2e": map[string]any{"scratch": d.scratch}})
	f, err := os.OpenFile(d.configPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(morePrincipals + extra); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return d
}

// --- a local issuer ---

type e2eSigner struct {
	kid  string
	alg  jwa.SignatureAlgorithm
	priv crypto.Signer
}

func newE2ESigner(t *testing.T, kid string, rsaKey bool) *e2eSigner {
	t.Helper()
	if rsaKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		return &e2eSigner{kid: kid, alg: jwa.RS256(), priv: k}
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &e2eSigner{kid: kid, alg: jwa.ES256(), priv: k}
}

func (s *e2eSigner) token(t *testing.T, claims map[string]any) string {
	t.Helper()
	payload, _ := json.Marshal(claims)
	h := jws.NewHeaders()
	_ = h.Set(jws.KeyIDKey, s.kid)
	_ = h.Set(jws.TypeKey, "JWT")
	b, err := jws.Sign(payload, jws.WithKey(s.alg, s.priv, jws.WithProtectedHeaders(h)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// e2eIssuer serves a JWKS the test can rotate, and counts fetches.
type e2eIssuer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	keys    []*e2eSigner
	fetches atomic.Int64
}

func newE2EIssuer(t *testing.T, keys ...*e2eSigner) *e2eIssuer {
	t.Helper()
	is := &e2eIssuer{keys: keys}
	is.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		is.fetches.Add(1)
		is.mu.Lock()
		keys := is.keys
		is.mu.Unlock()
		set := jwk.NewSet()
		for _, s := range keys {
			k, err := jwk.PublicKeyOf(s.priv.Public())
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			_ = k.Set(jwk.KeyIDKey, s.kid)
			_ = set.AddKey(k)
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(is.srv.Close)
	return is
}

func (is *e2eIssuer) publish(keys ...*e2eSigner) {
	is.mu.Lock()
	is.keys = keys
	is.mu.Unlock()
}

const e2eIss, e2eAud = "https://idp.e2e.test/realms/agents", "portcullis-e2e"

func e2eClaims(sub string, mod func(map[string]any)) map[string]any {
	now := time.Now()
	c := map[string]any{
		"iss": e2eIss, "aud": []string{e2eAud, "account"}, "sub": sub,
		"iat": now.Unix(), "exp": now.Add(10 * time.Minute).Unix(),
		"realm_access": map[string]any{"roles": []string{"agent", "offline_access", "superadmin"}},
		"team":         "payments",
	}
	if mod != nil {
		mod(c)
	}
	return c
}

func b64(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

// authedDo sends a request with an Authorization header through client.
func authedDo(t *testing.T, client *http.Client, method, u, authz string, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// decisionReason dry-runs fs.list and returns the policy's reason, which
// says what the policy saw of the principal.
func decisionReason(t *testing.T, client *http.Client, base, authz, scratch string) (int, string, response) {
	t.Helper()
	r := authedDo(t, client, http.MethodPost, base+"/v1/decisions", authz, fmt.Sprintf(`{"tool":"fs.list","input":{"path":%q}}`, scratch))
	var out struct {
		Decision struct {
			Reasons []string `json:"reasons"`
		} `json:"decision"`
	}
	_ = json.Unmarshal(r.body, &out)
	return r.status, strings.Join(out.Decision.Reasons, ";"), r
}

// errorOf decodes an error answer of either shape.
func errorOf(r response) (code, reason, message string) {
	var out struct {
		Error *struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
		Output struct {
			Error *struct {
				Code    string         `json:"code"`
				Message string         `json:"message"`
				Details map[string]any `json:"details"`
			} `json:"error"`
		} `json:"output"`
	}
	_ = json.Unmarshal(r.body, &out)
	e := out.Error
	if e == nil {
		e = out.Output.Error
	}
	if e == nil {
		return "", "", ""
	}
	reason, _ = e.Details["reason"].(string)
	return e.Code, reason, e.Message
}

// TestAuthJWT is issue #16's token list against the real binary: a valid
// token is accepted with its claims in the policy input and its principal in
// the receipt; expired, wrong audience, wrong issuer, alg none, the HS256
// key-confusion forgery, an unknown kid and a tampered payload are each 401
// with a clear error and no receipt; API keys keep working; a key the issuer
// rotates in is picked up without a restart; /mcp takes the same tokens.
func TestAuthJWT(t *testing.T) {
	t.Parallel()
	ec := newE2ESigner(t, "ec-2026-11", false)
	rs := newE2ESigner(t, "rsa-2026-11", true)
	is := newE2EIssuer(t, ec, rs)
	d := authDeployment(t, "", fmt.Sprintf(`auth:
  jwt:
    issuer: %q
    audience: %q
    jwks_url: %q
    roles_claim: realm_access.roles
    principal_prefix: "oidc:"
    jwks_min_refetch_interval: 1s
`, e2eIss, e2eAud, is.srv.URL))
	g := d.start(t)
	base := g.baseURL
	bearer := func(tok string) string { return "Bearer " + tok }

	// Valid tokens (both key types): claims and auth method reach the
	// policy; roles are the contract's only.
	for _, s := range []*e2eSigner{ec, rs} {
		st, reason, r := decisionReason(t, httpClient, base, bearer(s.token(t, e2eClaims("alice", nil))), d.scratch)
		if st != 200 || reason != "auth=jwt id=oidc:alice team=payments roles=[\"agent\"]" {
			t.Fatalf("valid %s token: %d %q\n%s", s.alg, st, reason, r)
		}
	}
	// A real call: the receipt names the token's principal.
	good := ec.token(t, e2eClaims("alice", nil))
	res := decodeToolCall(t, authedDo(t, httpClient, http.MethodPost, base+"/v1/tool-calls", bearer(good), fmt.Sprintf(`{"tool":"fs.list","input":{"path":%q}}`, d.scratch)))
	if res.status != 200 || !res.Output.Success || res.ReceiptID == "" {
		t.Fatalf("tool call with a valid JWT: %s", res.response)
	}
	if rc, ok := g.getReceipt(t, res.ReceiptID); !ok || rc.PrincipalID != "oidc:alice" {
		t.Errorf("receipt principal = %q, want oidc:alice", rc.PrincipalID)
	}
	// API keys keep working beside JWTs (and are marked api_key).
	if st, reason, r := decisionReason(t, httpClient, base, bearer(d.keys[agentFull]), d.scratch); st != 200 || !strings.HasPrefix(reason, "auth=api_key id=agent-full") {
		t.Fatalf("API key beside auth.jwt: %d %q\n%s", st, reason, r)
	}

	// The attacker's tokens.
	parts := strings.Split(good, ".")
	der, _ := x509.MarshalPKIXPublicKey(rs.priv.Public())
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	hsIn := b64(map[string]any{"alg": "HS256", "typ": "JWT", "kid": rs.kid}) + "." + b64(e2eClaims("alice", nil))
	mac := hmac.New(sha256.New, pubPEM)
	mac.Write([]byte(hsIn))
	confusion := hsIn + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
	stranger := newE2ESigner(t, "not-published", false)
	cases := []struct{ name, tok, reason string }{
		{"expired", ec.token(t, e2eClaims("alice", func(c map[string]any) { c["exp"] = time.Now().Add(-5 * time.Minute).Unix() })), "expired"},
		{"wrong audience", ec.token(t, e2eClaims("alice", func(c map[string]any) { c["aud"] = "another-app" })), "wrong_audience"},
		{"wrong issuer", ec.token(t, e2eClaims("alice", func(c map[string]any) { c["iss"] = "https://evil.example/" })), "wrong_issuer"},
		{"alg none", b64(map[string]any{"alg": "none", "typ": "JWT", "kid": ec.kid}) + "." + parts[1] + ".", "alg_not_allowed"},
		{"HS256 signed with the RSA public key", confusion, "alg_not_allowed"},
		{"unknown kid", stranger.token(t, e2eClaims("alice", nil)), "unknown_key"},
		{"tampered payload", parts[0] + "." + b64(e2eClaims("admin-1", func(c map[string]any) {
			c["realm_access"] = map[string]any{"roles": []string{"admin", "auditor"}}
		})) + "." + parts[2], "bad_signature"},
	}
	before := len(g.listReceipts(t, url.Values{"limit": {"1000"}}))
	for _, c := range cases {
		r := authedDo(t, httpClient, http.MethodPost, base+"/v1/tool-calls", bearer(c.tok), fmt.Sprintf(`{"tool":"fs.list","input":{"path":%q}}`, d.scratch))
		code, reason, msg := errorOf(r)
		if r.status != 401 || code != "unauthenticated" || reason != c.reason {
			t.Errorf("%s: %d %s %s (%s), want 401 unauthenticated %s", c.name, r.status, code, reason, msg, c.reason)
		}
		if strings.Contains(string(r.body), `"receipt_id":"`) && !strings.Contains(string(r.body), `"receipt_id":""`) {
			t.Errorf("%s: the refusal carries a receipt id: %s", c.name, r.body)
		}
		if msg == "" || strings.Contains(msg, c.tok) {
			t.Errorf("%s: message %q is empty or echoes the token", c.name, msg)
		}
		if !strings.Contains(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: no WWW-Authenticate challenge", c.name)
		}
	}
	if after := len(g.listReceipts(t, url.Values{"limit": {"1000"}})); after != before {
		t.Errorf("receipts %d -> %d: refused tokens must write none", before, after)
	}
	// A token whose subject is a configured principal's id is another
	// principal: the prefix keeps it apart, and it gets none of the
	// configured one's grants or roles.
	if st, reason, r := decisionReason(t, httpClient, base, bearer(ec.token(t, e2eClaims("agent-full", nil))), d.scratch); st != 200 || !strings.HasPrefix(reason, "auth=jwt id=oidc:agent-full ") {
		t.Errorf("token with sub agent-full: %d %q\n%s", st, reason, r)
	}
	// A tampered token never falls back to the API keys: the logs say jwt.
	if !waitLogLine(g, 10*time.Second, `"status":401`, `"auth":"jwt"`, `"auth_failure":"bad_signature"`) {
		t.Errorf("the access log does not record the JWT refusal and its reason")
	}

	// Key rotation without restart: the issuer publishes a new key and
	// retires the old; the first token under the new kid makes the
	// gateway refetch the set (at most once per jwks_min_refetch_interval).
	next := newE2ESigner(t, "ec-2026-12", false)
	is.publish(next, rs)
	fetches := is.fetches.Load()
	rotated := next.token(t, e2eClaims("alice", nil))
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, reason, r := decisionReason(t, httpClient, base, bearer(rotated), d.scratch)
		if st == 200 && strings.HasPrefix(reason, "auth=jwt id=oidc:alice") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("token under the rotated-in key still refused: %s", r)
		}
		time.Sleep(300 * time.Millisecond) // the 1s refetch floor since start
	}
	if got := is.fetches.Load() - fetches; got < 1 || got > 3 {
		t.Errorf("JWKS fetched %d times for one rotation", got)
	}
	// Spraying unknown kids does not hammer the issuer.
	fetches = is.fetches.Load()
	for i := range 30 {
		tok := newE2ESigner(t, "spray-"+strconv.Itoa(i), false).token(t, e2eClaims("alice", nil))
		if r := authedDo(t, httpClient, http.MethodGet, base+"/v1/tools", bearer(tok), ""); r.status != 401 {
			t.Fatalf("sprayed kid: %s", r)
		}
	}
	if got := is.fetches.Load() - fetches; got > 3 {
		t.Errorf("30 unknown kids in well under 3s caused %d JWKS fetches (at most one per second allowed)", got)
	}

	// /mcp takes the same credentials: a session with a JWT; a forged
	// token is 401.
	st, sid, body := mcpPost(t, g, rotated, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`, nil)
	if st != 200 || sid == "" {
		t.Fatalf("MCP initialize with a JWT: %d %s", st, body)
	}
	if st, _, _ := mcpPost(t, g, confusion, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`, nil); st != 401 {
		t.Errorf("MCP initialize with a forged JWT: %d", st)
	}
}

// --- a local PKI ---

type e2eCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newE2ECA(t *testing.T, name string) *e2eCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &e2eCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *e2eCA) issue(t *testing.T, subject pkix.Name, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: subject,
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalPKCS8PrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})
}

func (ca *e2eCA) pair(t *testing.T, subject pkix.Name, notAfter time.Time) tls.Certificate {
	t.Helper()
	c, k := ca.issue(t, subject, notAfter)
	p, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// replaceFile writes b to path atomically (as cert-manager and the kubelet do).
func replaceFile(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tlsClient trusts roots and presents cert (if any) whatever CAs the server
// names, as an attacker's client would.
func tlsClient(roots *x509.CertPool, cert *tls.Certificate, maxVersion uint16) *http.Client {
	cfg := &tls.Config{RootCAs: roots, MaxVersion: maxVersion}
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// TestAuthTLS: the gateway serves HTTPS itself (TLS >= 1.2) with a
// certificate it reloads when the files change, without a restart and
// without breaking open connections; with client_ca_file, a client
// certificate mapped by principals[].client_cert_subject authenticates;
// unmapped ones are 401; expired and untrusted ones fail the handshake;
// trusted_proxies still decides the logged client address.
func TestAuthTLS(t *testing.T) {
	t.Parallel()
	serverCA, clientCA, otherCA := newE2ECA(t, "e2e server CA"), newE2ECA(t, "e2e client CA"), newE2ECA(t, "e2e rogue CA")
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "clients.pem")
	c1, k1 := serverCA.issue(t, pkix.Name{CommonName: "gateway gen-1"}, time.Now().Add(24*time.Hour))
	replaceFile(t, certFile, c1, 0o644)
	replaceFile(t, keyFile, k1, 0o600)
	replaceFile(t, caFile, clientCA.pem, 0o644)
	d := authDeployment(t, `  - id: agent-cert
    roles: [agent]
    attributes: {team: certs}
    client_cert_subject: "CN=agent-7,O=Example Corp"
  - id: agent-spiffe
    roles: [agent]
    client_cert_subject: "uri:spiffe://e2e.test/agent/8"
`, fmt.Sprintf(`tls:
  cert_file: %q
  key_file: %q
  client_ca_file: %q
  reload_interval: 1s
trusted_proxies: ["127.0.0.1"]
`, certFile, keyFile, caFile))
	g := d.start(t)
	base := strings.Replace(g.baseURL, "http://", "https://", 1)
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.cert)
	anon := tlsClient(roots, nil, 0)

	// Plain HTTP to the TLS port is not served.
	if r, err := httpClient.Get(g.baseURL + "/healthz"); err == nil {
		r.Body.Close()
		if r.StatusCode == 200 {
			t.Fatal("plain HTTP served on the TLS listener")
		}
	}
	// TLS below 1.2 is refused at the handshake.
	if _, err := tlsClient(roots, nil, tls.VersionTLS11).Get(base + "/healthz"); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
	// API keys over TLS; the logged client is X-Forwarded-For from the
	// trusted proxy (127.0.0.1), the peer logged beside it.
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/tools", nil)
	req.Header.Set("Authorization", "Bearer "+d.keys[agentFull])
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	resp, err := anon.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("API key over TLS: %d %+v", resp.StatusCode, resp.TLS)
	}
	if !waitLogLine(g, 10*time.Second, `"route":"/v1/tools"`, `"remote":"203.0.113.9"`, `"peer":"127.0.0.1"`, `"auth":"api_key"`) {
		t.Errorf("the access log does not name the forwarded client and the proxy peer")
	}

	// mTLS: the mapped certificate authenticates as its principal, with
	// the configured attributes and auth=mtls.
	goodCert := clientCA.pair(t, pkix.Name{CommonName: "agent-7", Organization: []string{"Example Corp"}}, time.Now().Add(time.Hour))
	st, reason, r := decisionReason(t, tlsClient(roots, &goodCert, 0), base, "", d.scratch)
	if st != 200 || reason != `auth=mtls id=agent-cert team=- roles=["agent"]` {
		t.Fatalf("mapped client certificate: %d %q\n%s", st, reason, r)
	}
	res := decodeToolCall(t, authedDo(t, tlsClient(roots, &goodCert, 0), http.MethodPost, base+"/v1/tool-calls", "", fmt.Sprintf(`{"tool":"fs.list","input":{"path":%q}}`, d.scratch)))
	if res.status != 200 || res.ReceiptID == "" {
		t.Fatalf("tool call by client certificate: %s", res.response)
	}
	auditorClient := func(path string) response {
		return authedDo(t, anon, http.MethodGet, base+path, "Bearer "+d.keys[auditor], "")
	}
	var rc receipt
	if r := auditorClient("/v1/receipts/" + res.ReceiptID); r.status != 200 || json.Unmarshal(r.body, &rc) != nil || rc.PrincipalID != "agent-cert" {
		t.Errorf("receipt of the mTLS call: %s", r)
	}
	// A SAN binding.
	spiffe, _ := url.Parse("spiffe://e2e.test/agent/8")
	sanKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sanTmpl := &x509.Certificate{SerialNumber: big.NewInt(77), Subject: pkix.Name{CommonName: "whatever"}, URIs: []*url.URL{spiffe},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	sanDER, _ := x509.CreateCertificate(rand.Reader, sanTmpl, clientCA.cert, &sanKey.PublicKey, clientCA.key)
	sanCert := tls.Certificate{Certificate: [][]byte{sanDER}, PrivateKey: sanKey}
	if st, reason, r := decisionReason(t, tlsClient(roots, &sanCert, 0), base, "", d.scratch); st != 200 || !strings.HasPrefix(reason, "auth=mtls id=agent-spiffe") {
		t.Errorf("URI SAN certificate: %d %q\n%s", st, reason, r)
	}
	// Trusted but bound to no principal: 401, no receipt.
	unmapped := clientCA.pair(t, pkix.Name{CommonName: "agent-7", Organization: []string{"Example Corp"}, OrganizationalUnit: []string{"x"}}, time.Now().Add(time.Hour))
	r = authedDo(t, tlsClient(roots, &unmapped, 0), http.MethodPost, base+"/v1/tool-calls", "", fmt.Sprintf(`{"tool":"fs.list","input":{"path":%q}}`, d.scratch))
	if code, reason, _ := errorOf(r); r.status != 401 || code != "unauthenticated" || reason != "cert_unmapped" || bytes.Contains(r.body, []byte(`"receipt_id":"0`)) {
		t.Errorf("unmapped client certificate: %s", r)
	}
	// Expired and untrusted certificates never get past the handshake.
	expired := clientCA.pair(t, pkix.Name{CommonName: "agent-7", Organization: []string{"Example Corp"}}, time.Now().Add(-time.Minute))
	rogue := otherCA.pair(t, pkix.Name{CommonName: "agent-7", Organization: []string{"Example Corp"}}, time.Now().Add(time.Hour))
	for name, cert := range map[string]*tls.Certificate{"expired": &expired, "untrusted CA": &rogue} {
		if resp, err := tlsClient(roots, cert, 0).Get(base + "/v1/tools"); err == nil {
			resp.Body.Close()
			t.Errorf("%s client certificate: got HTTP %d, want a failed handshake", name, resp.StatusCode)
		}
	}
	// No credentials at all.
	if r := authedDo(t, anon, http.MethodGet, base+"/v1/tools", "", ""); r.status != 401 {
		t.Errorf("no credentials over TLS: %s", r)
	}

	// Hot reload: keep a connection open, write a new certificate over
	// the files; new connections get it, the open one keeps working.
	keep := tlsClient(roots, nil, 0)
	if resp, err := keep.Get(base + "/healthz"); err != nil || resp.TLS.PeerCertificates[0].Subject.CommonName != "gateway gen-1" {
		t.Fatalf("before reload: %v", err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	c2, k2 := serverCA.issue(t, pkix.Name{CommonName: "gateway gen-2"}, time.Now().Add(48*time.Hour))
	replaceFile(t, keyFile, k2, 0o600)
	replaceFile(t, certFile, c2, 0o644)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := tlsClient(roots, nil, 0).Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.TLS.PeerCertificates[0].Subject.CommonName == "gateway gen-2" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new certificate was not served within 30s (last err %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	resp, err = keep.Get(base + "/healthz")
	if err != nil {
		t.Fatalf("the connection open across the reload broke: %v", err)
	}
	resp.Body.Close()
	if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != "gateway gen-1" {
		t.Errorf("the open connection reports %s; it should have kept its handshake", cn)
	}
	// A broken pair (new certificate, key not matching) keeps gen-2.
	c3, _ := serverCA.issue(t, pkix.Name{CommonName: "gateway gen-3"}, time.Now().Add(48*time.Hour))
	replaceFile(t, certFile, c3, 0o644)
	time.Sleep(2500 * time.Millisecond) // > reload_interval
	resp, err = tlsClient(roots, nil, 0).Get(base + "/healthz")
	if err != nil {
		t.Fatalf("a broken pair broke serving: %v", err)
	}
	resp.Body.Close()
	if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != "gateway gen-2" {
		t.Errorf("after a broken pair, served %s; want gen-2 kept", cn)
	}
	if !waitLogLine(g, 10*time.Second, "the previous certificate keeps serving") {
		t.Error("the broken pair was not logged")
	}

	// Removing a client CA revokes what it issued on connections already
	// open too, not only at new handshakes: a kept-alive connection made
	// with goodCert is refused (401 cert_untrusted) on its next request
	// once clients.pem no longer holds clientCA, and works while it does.
	replaceFile(t, certFile, c2, 0o644) // the pair loads again, so CA changes are taken
	keepM := tlsClient(roots, &goodCert, 0)
	onKept := func() (int, string, bool) {
		t.Helper()
		var reused bool
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/tools", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}))
		resp, err := keepM.Do(req)
		if err != nil {
			t.Fatalf("request on the kept mTLS connection: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		_, reason, _ := errorOf(response{status: resp.StatusCode, body: body})
		return resp.StatusCode, reason, reused
	}
	if st, _, _ := onKept(); st != 200 {
		t.Fatalf("mTLS before the CA change: %d", st)
	}
	waitHandshake := func(cert *tls.Certificate, want bool, what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := tlsClient(roots, cert, 0).Get(base + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			if (err == nil) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen within 30s (last err %v)", what, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	replaceFile(t, caFile, append(append([]byte{}, clientCA.pem...), otherCA.pem...), 0o644)
	waitHandshake(&rogue, true, "a second client CA added")
	if st, reason, reused := onKept(); st != 200 || !reused {
		t.Errorf("with its CA still in the file, the kept connection: %d %q (reused %v)", st, reason, reused)
	}
	replaceFile(t, caFile, otherCA.pem, 0o644)
	waitHandshake(&goodCert, false, "the first client CA removed")
	if st, reason, reused := onKept(); st != 401 || reason != "cert_untrusted" || !reused {
		t.Errorf("after its CA was removed, the kept connection: %d %q (reused %v); want 401 cert_untrusted on the same connection", st, reason, reused)
	}
}

// TestAuthDoctor: doctor says what is wrong with the TLS files and the JWKS.
func TestAuthDoctor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newE2ECA(t, "doctor CA")
	c, _ := ca.issue(t, pkix.Name{CommonName: "gw"}, time.Now().Add(time.Hour))
	_, otherKey := ca.issue(t, pkix.Name{CommonName: "other"}, time.Now().Add(time.Hour))
	replaceFile(t, filepath.Join(dir, "tls.crt"), c, 0o644)
	replaceFile(t, filepath.Join(dir, "tls.key"), otherKey, 0o600)
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) }))
	t.Cleanup(dead.Close)
	d := authDeployment(t, "", fmt.Sprintf(`tls:
  cert_file: %q
  key_file: %q
auth:
  jwt:
    issuer: https://idp.example/
    audience: portcullis
    jwks_url: %q
    jwks_fetch_timeout: 2s
`, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), dead.URL+"/jwks"))
	out, ok := runCLI(t, d, "doctor", "--config", d.configPath)
	if ok {
		t.Errorf("doctor passed a key that does not match its certificate and an unreachable JWKS:\n%s", out)
	}
	for _, want := range []string{"[FAIL] tls", "private key does not match public key", "[FAIL] jwt keys", "HTTP 503"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
	// And serve refuses to start on the bad pair.
	if _, err := tryStartProcess(t, d, startOptions{}); err == nil || !strings.Contains(err.Error(), "tls") {
		t.Errorf("serve started with a mismatched key: %v", err)
	}
}

// waitLogLine waits for a line of the gateway's log holding every part (the
// access log is written after the answer).
func waitLogLine(g *gateway, within time.Duration, parts ...string) bool {
	deadline := time.Now().Add(within)
	for {
		for _, line := range strings.Split(g.stderr.String(), "\n") {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
