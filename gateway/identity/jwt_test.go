package identity

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
)

const (
	testIssuer   = "https://idp.example.test/"
	testAudience = "portcullis"
)

// signer is one issuer key: its private half signs, its public half is
// published in the JWKS under kid.
type signer struct {
	kid  string
	alg  jwa.SignatureAlgorithm
	priv crypto.Signer
}

func newSigner(t testing.TB, kid, alg string) *signer {
	t.Helper()
	var priv crypto.Signer
	var err error
	switch alg {
	case "RS256", "PS256":
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ES256":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ES384":
		priv, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "EdDSA":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		t.Fatalf("no key for %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	a, _ := jwa.LookupSignatureAlgorithm(alg)
	return &signer{kid: kid, alg: a, priv: priv}
}

// jwk is the signer's public key as a JWK.
func (s *signer) jwk(t testing.TB) jwk.Key {
	t.Helper()
	k, err := jwk.PublicKeyOf(s.priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	if s.kid != "" {
		_ = k.Set(jwk.KeyIDKey, s.kid)
	}
	return k
}

// sign makes a token with the given claims and extra header fields.
func (s *signer) sign(t testing.TB, claims map[string]any, hdr map[string]any) string {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	h := jws.NewHeaders()
	if s.kid != "" {
		_ = h.Set(jws.KeyIDKey, s.kid)
	}
	_ = h.Set(jws.TypeKey, "JWT")
	for k, v := range hdr {
		_ = h.Set(k, v)
	}
	b, err := jws.Sign(payload, jws.WithKey(s.alg, s.priv, jws.WithProtectedHeaders(h)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func jwksJSON(t testing.TB, signers ...*signer) []byte {
	t.Helper()
	set := jwk.NewSet()
	for _, s := range signers {
		if err := set.AddKey(s.jwk(t)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// issuer is a JWKS endpoint whose key set the test can swap and break, and
// which counts its fetches.
type issuer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	body    []byte
	status  int
	delay   time.Duration
	fetches atomic.Int64
}

func newIssuer(t testing.TB, signers ...*signer) *issuer {
	t.Helper()
	is := &issuer{status: http.StatusOK}
	is.set(t, signers...)
	is.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		is.fetches.Add(1)
		is.mu.Lock()
		body, status, delay := is.body, is.status, is.delay
		is.mu.Unlock()
		time.Sleep(delay)
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(is.srv.Close)
	return is
}

func (is *issuer) set(t testing.TB, signers ...*signer) {
	b := jwksJSON(t, signers...)
	is.mu.Lock()
	is.body, is.status = b, http.StatusOK
	is.mu.Unlock()
}

func (is *issuer) fail(status int) {
	is.mu.Lock()
	is.status = status
	is.mu.Unlock()
}

// clock is a settable test clock.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}
func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func claimsFor(now time.Time, sub string) map[string]any {
	return map[string]any{
		"iss": testIssuer, "aud": testAudience, "sub": sub,
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
		"roles": []any{"agent", "superuser", "auditor"},
		"team":  "payments",
	}
}

func newVerifier(t testing.TB, is *issuer, clk *clock, mod func(*JWTConfig)) *JWTVerifier {
	t.Helper()
	cfg := JWTConfig{
		Issuer: testIssuer, Audience: testAudience, JWKSURL: is.srv.URL,
		Algorithms: []string{"RS256", "PS256", "ES256", "ES384", "EdDSA"},
		RolesClaim: "roles", ReservedIDs: []string{"agent-alpha"}, Now: clk.now,
	}
	if mod != nil {
		mod(&cfg)
	}
	v, err := NewJWTVerifier(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func reasonOf(err error) string {
	var f *Failure
	if errors.As(err, &f) {
		return f.Reason
	}
	if err == nil {
		return ""
	}
	return "untyped: " + err.Error()
}

func TestJWTAcceptsValidTokens(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"RS256", "PS256", "ES256", "ES384", "EdDSA"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			s := newSigner(t, "k-"+alg, alg)
			clk := newClock()
			v := newVerifier(t, newIssuer(t, s), clk, nil)
			tok := s.sign(t, claimsFor(clk.now(), "alice@example.com"), nil)
			p, err := v.Verify(context.Background(), tok)
			if err != nil {
				t.Fatalf("valid %s token refused: %v", alg, err)
			}
			if p.ID != "alice@example.com" {
				t.Errorf("id = %q", p.ID)
			}
			// Only the contract's roles; "superuser" is dropped.
			if !slices.Equal(p.Roles, []string{"agent", "auditor"}) {
				t.Errorf("roles = %v", p.Roles)
			}
			if p.Attributes[AttrAuth] != AuthJWT {
				t.Errorf("auth attribute = %v", p.Attributes[AttrAuth])
			}
			claims, _ := p.Attributes[AttrClaims].(map[string]any)
			if claims["team"] != "payments" || claims["iss"] != testIssuer {
				t.Errorf("claims = %v", claims)
			}
		})
	}
}

// TestJWTRefusals is the attacker's list: every token here must be refused,
// with the reason that names what was wrong.
func TestJWTRefusals(t *testing.T) {
	t.Parallel()
	rs := newSigner(t, "rsa-1", "RS256")
	es := newSigner(t, "ec-1", "ES256")
	clk := newClock()
	is := newIssuer(t, rs, es)
	v := newVerifier(t, is, clk, func(c *JWTConfig) { c.MinRefetchInterval = time.Hour })
	now := clk.now()
	with := func(mod func(map[string]any)) map[string]any {
		c := claimsFor(now, "alice")
		mod(c)
		return c
	}
	good := rs.sign(t, claimsFor(now, "alice"), nil)
	parts := strings.Split(good, ".")

	// alg none: header {"alg":"none"}, empty signature.
	none := b64json(t, map[string]any{"alg": "none", "kid": "rsa-1", "typ": "JWT"}) + "." + parts[1] + "."
	// HS256 "signed" with the issuer's public key, in each form an
	// attacker could get it: the classic key-confusion forgery.
	der, _ := x509.MarshalPKIXPublicKey(rs.priv.Public())
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	jwkJSON, _ := json.Marshal(rs.jwk(t))
	var confusion []string
	for _, secret := range [][]byte{pemKey, der, jwkJSON, rs.priv.Public().(*rsa.PublicKey).N.Bytes()} {
		confusion = append(confusion, hmacToken(t, secret, map[string]any{"alg": "HS256", "kid": "rsa-1", "typ": "JWT"}, parts[1]))
	}
	// Tampered payload: the signature of the real claims over other claims.
	tampered := parts[0] + "." + b64json(t, with(func(c map[string]any) { c["sub"] = "admin-1"; c["roles"] = []any{"admin"} })) + "." + parts[2]
	// Another key that claims the real kid.
	impostor := newSigner(t, "rsa-1", "RS256")
	// ES256 header over the RSA key's kid.
	esOverRSA := es.sign(t, claimsFor(now, "alice"), map[string]any{jws.KeyIDKey: "rsa-1"})

	cases := []struct {
		name, tok, reason string
	}{
		{"expired", rs.sign(t, with(func(c map[string]any) { c["exp"] = now.Add(-2 * time.Minute).Unix() }), nil), ReasonExpired},
		{"not yet valid", rs.sign(t, with(func(c map[string]any) { c["nbf"] = now.Add(5 * time.Minute).Unix() }), nil), ReasonNotYetValid},
		{"issued in the future", rs.sign(t, with(func(c map[string]any) { c["iat"] = now.Add(5 * time.Minute).Unix() }), nil), ReasonNotYetValid},
		{"wrong audience", rs.sign(t, with(func(c map[string]any) { c["aud"] = "another-app" }), nil), ReasonWrongAudience},
		{"no audience", rs.sign(t, with(func(c map[string]any) { delete(c, "aud") }), nil), ReasonWrongAudience},
		{"wrong issuer", rs.sign(t, with(func(c map[string]any) { c["iss"] = "https://evil.example/" }), nil), ReasonWrongIssuer},
		{"no issuer", rs.sign(t, with(func(c map[string]any) { delete(c, "iss") }), nil), ReasonWrongIssuer},
		{"no exp", rs.sign(t, with(func(c map[string]any) { delete(c, "exp") }), nil), ReasonMissingClaim},
		{"no sub", rs.sign(t, with(func(c map[string]any) { delete(c, "sub") }), nil), ReasonMissingClaim},
		{"sub not a string", rs.sign(t, with(func(c map[string]any) { c["sub"] = 42 }), nil), ReasonBadClaim},
		{"sub with a newline", rs.sign(t, with(func(c map[string]any) { c["sub"] = "alice\nadmin" }), nil), ReasonBadClaim},
		{"names a configured principal", rs.sign(t, with(func(c map[string]any) { c["sub"] = "agent-alpha" }), nil), ReasonReservedID},
		// Ids a person reading a receipt or the approvals page cannot tell
		// from a configured principal's are that principal's too.
		{"a configured principal in another case", rs.sign(t, with(func(c map[string]any) { c["sub"] = "Agent-Alpha" }), nil), ReasonReservedID},
		{"a configured principal in fullwidth letters", rs.sign(t, with(func(c map[string]any) { c["sub"] = "ａｇｅｎｔ-alpha" }), nil), ReasonReservedID},
		{"a configured principal with a zero-width space", rs.sign(t, with(func(c map[string]any) { c["sub"] = "agent-alpha\u200b" }), nil), ReasonBadClaim},
		{"sub with a right-to-left override", rs.sign(t, with(func(c map[string]any) { c["sub"] = "\u202eahpla-tnega" }), nil), ReasonBadClaim},
		{"a configured principal with a trailing space", rs.sign(t, with(func(c map[string]any) { c["sub"] = "agent-alpha " }), nil), ReasonBadClaim},
		{"sub with a no-break space", rs.sign(t, with(func(c map[string]any) { c["sub"] = "agent\u00a0alpha" }), nil), ReasonBadClaim},
		{"alg none", none, ReasonAlgNotAllowed},
		{"alg none, no signature dot", strings.TrimSuffix(none, "."), ""},
		{"HS256 with the public key as PEM", confusion[0], ReasonAlgNotAllowed},
		{"HS256 with the public key as DER", confusion[1], ReasonAlgNotAllowed},
		{"HS256 with the public key as JWK", confusion[2], ReasonAlgNotAllowed},
		{"HS256 with the modulus", confusion[3], ReasonAlgNotAllowed},
		{"alg not in the allowlist", b64json(t, map[string]any{"alg": "RS512", "kid": "rsa-1"}) + "." + parts[1] + "." + parts[2], ReasonAlgNotAllowed},
		{"unknown kid", newSigner(t, "nobody", "RS256").sign(t, claimsFor(now, "alice"), nil), ReasonUnknownKey},
		{"no kid, several keys", newSigner(t, "", "RS256").sign(t, claimsFor(now, "alice"), nil), ReasonUnknownKey},
		{"tampered payload", tampered, ReasonBadSignature},
		{"signed by another key with the real kid", impostor.sign(t, claimsFor(now, "alice"), nil), ReasonBadSignature},
		{"ES256 over an RSA kid", esOverRSA, ReasonKeyMismatch},
		{"logout token", rs.sign(t, claimsFor(now, "alice"), map[string]any{jws.TypeKey: "logout+jwt"}), ReasonTypNotAllowed},
		{"crit header", rs.sign(t, claimsFor(now, "alice"), map[string]any{"crit": []string{"exp"}, "exp": 1}), ReasonBadSignature},
		{"duplicate iss", signRaw(t, rs, `{"iss":"https://evil.example/","aud":"portcullis","sub":"alice","exp":`+itoa(now.Add(time.Minute).Unix())+`,"iss":"`+testIssuer+`"}`), ""},
		{"signature stripped", parts[0] + "." + parts[1] + ".", ""},
		{"garbage", "a.b.c", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := v.Verify(context.Background(), c.tok)
			if err == nil {
				t.Fatalf("accepted as %+v", p)
			}
			var f *Failure
			if !errors.As(err, &f) {
				t.Fatalf("refusal is not a *Failure: %v", err)
			}
			if f.Unavailable {
				t.Errorf("a bad token must be 401, not 503: %v", f)
			}
			if c.reason != "" && f.Reason != c.reason {
				t.Errorf("reason = %s (%s), want %s", f.Reason, f.Message, c.reason)
			}
			if strings.Contains(f.Message, c.tok) || (len(c.tok) > 20 && strings.Contains(f.Message, strings.Split(c.tok, ".")[0])) {
				t.Errorf("message echoes the token: %s", f.Message)
			}
		})
	}
	// Inside the leeway, expiry is forgiven (clock skew), not beyond it.
	inLeeway := rs.sign(t, with(func(c map[string]any) { c["exp"] = now.Add(-30 * time.Second).Unix() }), nil)
	if _, err := v.Verify(context.Background(), inLeeway); err != nil {
		t.Errorf("token expired 30s ago refused with 60s leeway: %v", err)
	}
	if _, err := v.Verify(context.Background(), good); err != nil {
		t.Errorf("the good token itself is refused: %v", err)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func b64json(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func hmacToken(t testing.TB, secret []byte, hdr map[string]any, payloadB64 string) string {
	t.Helper()
	in := b64json(t, hdr) + "." + payloadB64
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// signRaw signs an exact payload (for duplicate claims, which a map cannot hold).
func signRaw(t testing.TB, s *signer, payload string) string {
	t.Helper()
	h := jws.NewHeaders()
	_ = h.Set(jws.KeyIDKey, s.kid)
	b, err := jws.Sign([]byte(payload), jws.WithKey(s.alg, s.priv, jws.WithProtectedHeaders(h)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestJWKSRotation: a token signed by a key the gateway has not seen yet
// makes it refetch the set once and accept the token, without a restart;
// a second unknown kid within the minute does not refetch (a kid-spraying
// caller cannot make the gateway hammer the identity provider).
func TestJWKSRotation(t *testing.T) {
	t.Parallel()
	old := newSigner(t, "2026-01", "ES256")
	is := newIssuer(t, old)
	clk := newClock()
	v := newVerifier(t, is, clk, nil)
	if got := is.fetches.Load(); got != 1 {
		t.Fatalf("fetches at start = %d, want 1", got)
	}
	clk.advance(2 * time.Minute)
	next := newSigner(t, "2026-02", "ES256")
	is.set(t, old, next) // the issuer rotates: publishes the new key
	if _, err := v.Verify(context.Background(), next.sign(t, claimsFor(clk.now(), "alice"), nil)); err != nil {
		t.Fatalf("token under the rotated-in key refused: %v", err)
	}
	if got := is.fetches.Load(); got != 2 {
		t.Fatalf("fetches after rotation = %d, want 2", got)
	}
	// Spray: many unknown kids within the minute, concurrently.
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := newSigner(t, "spray-"+itoa(int64(i)), "EdDSA").sign(t, claimsFor(clk.now(), "alice"), nil)
			if _, err := v.Verify(context.Background(), tok); reasonOf(err) != ReasonUnknownKey {
				t.Errorf("sprayed kid: %v", err)
			}
		}()
	}
	wg.Wait()
	if got := is.fetches.Load(); got != 2 {
		t.Errorf("fetches after 50 unknown kids within a minute = %d, want still 2", got)
	}
	// A minute later one more refetch is allowed.
	clk.advance(61 * time.Second)
	_, _ = v.Verify(context.Background(), newSigner(t, "later", "EdDSA").sign(t, claimsFor(clk.now(), "alice"), nil))
	if got := is.fetches.Load(); got != 3 {
		t.Errorf("fetches a minute later = %d, want 3", got)
	}
	// The retired key leaves the set: its tokens stop verifying on the
	// next refresh.
	is.set(t, next)
	if err := v.keys.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), old.sign(t, claimsFor(clk.now(), "alice"), nil)); reasonOf(err) != ReasonUnknownKey {
		t.Errorf("token under the retired key: %v", err)
	}
}

// TestJWKSRefetchOutlivesItsCaller: a caller that sends an unknown kid and
// hangs up at once does not cancel the refetch (which would use up the
// minute's allowance with nothing fetched).
func TestJWKSRefetchOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	old, next := newSigner(t, "old", "ES256"), newSigner(t, "next", "ES256")
	is := newIssuer(t, old)
	clk := newClock()
	v := newVerifier(t, is, clk, nil)
	clk.advance(2 * time.Minute)
	is.set(t, old, next)
	is.mu.Lock()
	is.delay = 300 * time.Millisecond
	is.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond) // hangs up mid-fetch
	defer cancel()
	_, _ = v.Verify(ctx, next.sign(t, claimsFor(clk.now(), "alice"), nil))
	if _, err := v.Verify(context.Background(), next.sign(t, claimsFor(clk.now(), "alice"), nil)); err != nil {
		t.Fatalf("the refetch was cancelled with its caller: %v", err)
	}
}

// TestJWKSOutageKeepsKeys: the identity provider going down (500, garbage,
// oversized answers) never drops the keys already held.
func TestJWKSOutageKeepsKeys(t *testing.T) {
	t.Parallel()
	s := newSigner(t, "k1", "RS256")
	is := newIssuer(t, s)
	clk := newClock()
	v := newVerifier(t, is, clk, nil)
	tok := s.sign(t, claimsFor(clk.now(), "alice"), nil)
	for _, breakIt := range []func(){
		func() { is.fail(http.StatusInternalServerError) },
		func() { is.mu.Lock(); is.body, is.status = []byte("<html>maintenance</html>"), 200; is.mu.Unlock() },
		func() { is.mu.Lock(); is.body, is.status = []byte(`{"keys":[]}`), 200; is.mu.Unlock() },
		func() {
			is.mu.Lock()
			is.body, is.status = append([]byte(`{"keys":[],"pad":"`), append([]byte(strings.Repeat("x", maxJWKSBytes)), '"', '}')...), 200
			is.mu.Unlock()
		},
	} {
		breakIt()
		if err := v.keys.refresh(context.Background()); err == nil {
			t.Fatal("a broken key set was accepted")
		}
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Fatalf("held key dropped after a failed refresh: %v", err)
		}
		if v.Status().LastErr == "" {
			t.Error("status does not report the failed refresh")
		}
	}
}

// TestJWKSUnavailableAtStart: with no key set ever fetched, tokens are
// refused 503 (the gateway's problem, retry), and accepted once it arrives.
func TestJWKSUnavailableAtStart(t *testing.T) {
	t.Parallel()
	s := newSigner(t, "k1", "EdDSA")
	is := newIssuer(t, s)
	is.fail(http.StatusServiceUnavailable)
	clk := newClock()
	v := newVerifier(t, is, clk, nil)
	tok := s.sign(t, claimsFor(clk.now(), "alice"), nil)
	_, err := v.Verify(context.Background(), tok)
	var f *Failure
	if !errors.As(err, &f) || !f.Unavailable || f.Reason != ReasonKeysUnavailable {
		t.Fatalf("err = %v, want keys_unavailable (503)", err)
	}
	is.set(t, s)
	clk.advance(time.Minute)
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatalf("after the issuer came back: %v", err)
	}
}

func TestJWKSFile(t *testing.T) {
	t.Parallel()
	a, b := newSigner(t, "a", "ES256"), newSigner(t, "b", "ES256")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwksJSON(t, a), 0o644); err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	v, err := NewJWTVerifier(context.Background(), JWTConfig{Issuer: testIssuer, Audience: testAudience, JWKSFile: path, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), a.sign(t, claimsFor(clk.now(), "x"), nil)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, jwksJSON(t, a, b), 0o644); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Minute)
	p, err := v.Verify(context.Background(), b.sign(t, claimsFor(clk.now(), "x"), nil))
	if err != nil {
		t.Fatalf("key added to jwks_file not picked up: %v", err)
	}
	if len(p.Roles) != 0 {
		t.Errorf("no roles_claim configured, yet roles %v", p.Roles)
	}
	// A jwks_file that does not load stops start-up.
	bad := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(bad, []byte("{}"), 0o644)
	if _, err := NewJWTVerifier(context.Background(), JWTConfig{Issuer: testIssuer, Audience: testAudience, JWKSFile: bad}); err == nil {
		t.Error("a jwks_file with no keys was accepted at start")
	}
}

func TestJWTConfigRefusals(t *testing.T) {
	t.Parallel()
	base := JWTConfig{Issuer: testIssuer, Audience: testAudience, JWKSFile: "/nonexistent"}
	for name, mod := range map[string]func(*JWTConfig){
		"no issuer":       func(c *JWTConfig) { c.Issuer = "" },
		"no audience":     func(c *JWTConfig) { c.Audience = "" },
		"HS256":           func(c *JWTConfig) { c.Algorithms = []string{"RS256", "HS256"} },
		"none":            func(c *JWTConfig) { c.Algorithms = []string{"none"} },
		"both sources":    func(c *JWTConfig) { c.JWKSURL = "https://idp.example/jwks" },
		"plain http":      func(c *JWTConfig) { c.JWKSFile, c.JWKSURL = "", "http://idp.example/jwks" },
		"missing file":    func(c *JWTConfig) {},
		"ftp":             func(c *JWTConfig) { c.JWKSFile, c.JWKSURL = "", "ftp://idp.example/jwks" },
		"no source at al": func(c *JWTConfig) { c.JWKSFile = "" },
	} {
		c := base
		mod(&c)
		if _, err := NewJWTVerifier(context.Background(), c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLooksLikeJWT(t *testing.T) {
	t.Parallel()
	s := newSigner(t, "k", "EdDSA")
	for tok, want := range map[string]bool{
		s.sign(t, map[string]any{"sub": "x"}, nil): true,
		"pcl_" + strings.Repeat("A", 43):           false,
		"my.api.key":                               false, // segments, but no JSON header
		"eyJhbGciOiJub25lIn0.e30.":                 true,  // {"alg":"none"}: judged (and refused) as a JWT
		"eyJhbGciOiJub25lIn0.e30":                  false,
		"":                                         false,
	} {
		if got := LooksLikeJWT(tok); got != want {
			t.Errorf("LooksLikeJWT(%.30q) = %v, want %v", tok, got, want)
		}
	}
}

func TestRolesAndClaimPaths(t *testing.T) {
	t.Parallel()
	v := &JWTVerifier{cfg: JWTConfig{RolesClaim: "realm_access.roles"}}
	claims := map[string]any{"realm_access": map[string]any{"roles": []any{"admin", "offline_access", 7, "admin"}}}
	if got := v.roles(claims); !slices.Equal(got, []string{"admin"}) {
		t.Errorf("nested roles = %v", got)
	}
	v.cfg.RolesClaim = "https://example.com/roles"
	claims = map[string]any{"https://example.com/roles": "agent approver root"}
	if got := v.roles(claims); !slices.Equal(got, []string{"agent", "approver"}) {
		t.Errorf("dotted whole-name roles = %v", got)
	}
}

// TestJWKSURLCredentialsNotShown: a jwks_url may carry basic-auth
// credentials (https://user:password@idp/...), which the fetch uses. The
// password never appears where the URL is shown: the key status (serve's
// listening line, doctor), the last error, or the verifier's log.
func TestJWKSURLCredentialsNotShown(t *testing.T) {
	t.Parallel()
	const password = "s3cr3t-jwks-password"
	rs := newSigner(t, "rsa-1", "RS256")
	is := newIssuer(t, rs)
	u := strings.Replace(is.srv.URL, "http://", "http://reader:"+password+"@", 1)
	var logs bytes.Buffer
	v := newVerifier(t, is, newClock(), func(c *JWTConfig) {
		c.JWKSURL = u
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	if st := v.Status(); st.Keys != 1 || strings.Contains(st.Source, password) {
		t.Errorf("status %+v: want 1 key and no password in the source", st)
	}
	is.fail(http.StatusInternalServerError)
	if err := v.keys.refresh(context.Background()); err == nil || strings.Contains(err.Error(), password) {
		t.Errorf("refresh error %v: want an error without the password", err)
	}
	v.log.Warn("probe", "source", v.keys.source())
	if st := v.Status(); st.LastErr == "" || strings.Contains(st.LastErr, password) || strings.Contains(st.Source, password) {
		t.Errorf("status %+v shows the password", st)
	}
	if strings.Contains(logs.String(), password) {
		t.Errorf("the log shows the password: %s", logs.String())
	}
}

// TestJWKSURLQueryNotShown: a token in the jwks_url's query is not shown
// either, including in the error of a fetch that could not connect.
func TestJWKSURLQueryNotShown(t *testing.T) {
	t.Parallel()
	const token = "q-s3cr3t-jwks-token"
	dead := httptest.NewServer(http.NotFoundHandler())
	u := dead.URL + "/jwks?access_token=" + token
	dead.Close()
	var logs bytes.Buffer
	v, err := NewJWTVerifier(context.Background(), JWTConfig{Issuer: testIssuer, Audience: testAudience, JWKSURL: u,
		FetchTimeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	st := v.Status()
	if st.LastErr == "" {
		t.Fatal("fetching from a closed server did not fail")
	}
	if strings.Contains(st.LastErr, token) || strings.Contains(st.Source, token) || strings.Contains(logs.String(), token) {
		t.Errorf("the query token is shown: status %+v, log %s", st, logs.String())
	}
}

// TestJWKSRedirectHeldToTheURLRules: a redirect target must be a jwks_url
// the gateway would accept itself: an http:// issuer on loopback (allowed)
// cannot send the fetch to http:// elsewhere (keys in the clear from
// anyone), nor to a link-local address (cloud metadata services).
func TestJWKSRedirectHeldToTheURLRules(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"http://192.0.2.1/jwks", "http://169.254.169.254/latest/meta-data/", "https://169.254.169.254/jwks", "https://[fe80::1]/jwks"} {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			redir := httptest.NewServer(http.RedirectHandler(target, http.StatusFound))
			t.Cleanup(redir.Close)
			v, err := NewJWTVerifier(context.Background(), JWTConfig{Issuer: testIssuer, Audience: testAudience,
				JWKSURL: redir.URL + "/jwks", FetchTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if st := v.Status(); !strings.Contains(st.LastErr, "redirect to") || !strings.Contains(st.LastErr, "refused") {
				t.Errorf("fetch through a redirect to %s: last error %q, want the redirect refused", target, st.LastErr)
			}
		})
	}
}
