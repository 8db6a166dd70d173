package identity

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"

	"github.com/portcullis/portcullis/wire"
)

// DefaultAlgorithms are the JWS algorithms accepted when auth.jwt.algorithms
// is empty (CONTRACT section 11).
var DefaultAlgorithms = []string{"RS256", "ES256", "EdDSA"}

// SupportedAlgorithms are those auth.jwt.algorithms may name: asymmetric
// only. An HMAC algorithm would need the verifying secret in the gateway's
// config (anyone who can read it mints tokens) and is the door to the
// key-confusion attack (an HS256 token "signed" with the issuer's public
// key), so HS256/384/512 and none are never accepted.
var SupportedAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// Roles a token may grant: the contract's, nothing else. Unknown role names
// in the roles claim are ignored.
var tokenRoles = []string{wire.RoleAgent, wire.RoleAuditor, wire.RoleAdmin, "approver"}

// Attribute names the gateway sets on every principal it authenticates;
// configured principals may not use them.
const (
	// AttrAuth is how the caller authenticated: AuthAPIKey, AuthJWT or AuthMTLS.
	AttrAuth = "auth"
	// AttrClaims holds a JWT's claims, all of them, as the token carried them.
	AttrClaims = "claims"
)

// Values of the AttrAuth attribute.
const (
	AuthAPIKey = "api_key"
	AuthJWT    = "jwt"
	AuthMTLS   = "mtls"
)

// NoLeeway as JWTConfig.Leeway allows no clock skew at all (zero there
// means the default).
const NoLeeway time.Duration = -1

// JWTConfig configures a JWTVerifier (auth.jwt).
type JWTConfig struct {
	Issuer   string
	Audience string
	// JWKSURL or JWKSFile (exactly one) is where the issuer's keys are.
	JWKSURL  string
	JWKSFile string
	// Algorithms is the allowlist (default DefaultAlgorithms).
	Algorithms []string
	// PrincipalClaim names the claim that is the principal id (default
	// "sub"); RolesClaim the one that holds its roles ("" grants none).
	// A dotted name (realm_access.roles) is followed into objects when no
	// claim has the whole name.
	PrincipalClaim string
	RolesClaim     string
	// PrincipalPrefix is put before the claim's value to make the
	// principal id (e.g. "oidc:"), so token principals are told apart
	// from configured ones in policy and evidence.
	PrincipalPrefix string
	// ReservedIDs are the configured principals' ids: a token whose
	// principal id is one of them is refused, so no token can act as a
	// principal the operator configured with a key or a certificate.
	ReservedIDs []string
	// Leeway is the clock skew allowed on exp, nbf and iat (default 60s
	// when zero; NoLeeway, or any negative value, allows none).
	Leeway time.Duration
	// RefreshInterval is how often the key set is refetched in the
	// background (default 10m).
	RefreshInterval time.Duration
	// MinRefetchInterval bounds refetches for unknown kids (default 1m).
	MinRefetchInterval time.Duration
	// FetchTimeout bounds one fetch of the key set (default 10s).
	FetchTimeout time.Duration
	// HTTPClient fetches JWKSURL (default: bounded, see newJWKSClient).
	HTTPClient *http.Client
	Logger     *slog.Logger
	Now        func() time.Time
}

// JWTVerifier verifies bearer JWTs and turns them into principals.
type JWTVerifier struct {
	cfg      JWTConfig
	algs     map[string]jwa.SignatureAlgorithm
	reserved map[string]bool
	keys     *jwks
	log      *slog.Logger
}

// NewJWTVerifier checks cfg and loads the key set once: a jwks_file that does
// not load is an error; an unreachable jwks_url is logged and retried by Run
// (tokens are answered 503 until a set arrives), like a policy bundle service.
func NewJWTVerifier(ctx context.Context, cfg JWTConfig) (*JWTVerifier, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("auth.jwt.issuer: must be set")
	}
	if cfg.Audience == "" {
		return nil, errors.New("auth.jwt.audience: must be set (without it, a token the issuer made for any other application would be accepted)")
	}
	if (cfg.JWKSURL == "") == (cfg.JWKSFile == "") {
		return nil, errors.New("auth.jwt: set exactly one of jwks_url and jwks_file")
	}
	if cfg.JWKSURL != "" {
		if err := CheckJWKSURL(cfg.JWKSURL); err != nil {
			return nil, fmt.Errorf("auth.jwt.jwks_url: %w", err)
		}
	}
	if len(cfg.Algorithms) == 0 {
		cfg.Algorithms = DefaultAlgorithms
	}
	v := &JWTVerifier{cfg: cfg, algs: map[string]jwa.SignatureAlgorithm{}, reserved: map[string]bool{}}
	for _, a := range cfg.Algorithms {
		if !slices.Contains(SupportedAlgorithms, a) {
			return nil, fmt.Errorf("auth.jwt.algorithms: %q is not accepted; want any of %s (HMAC and none never are)", a, strings.Join(SupportedAlgorithms, ", "))
		}
		sa, ok := jwa.LookupSignatureAlgorithm(a)
		if !ok {
			return nil, fmt.Errorf("auth.jwt.algorithms: %q unknown to the JOSE library", a)
		}
		v.algs[a] = sa
	}
	for _, id := range cfg.ReservedIDs {
		v.reserved[IDKey(id)] = true
	}
	if v.cfg.PrincipalClaim == "" {
		v.cfg.PrincipalClaim = "sub"
	}
	switch {
	case v.cfg.Leeway == 0:
		v.cfg.Leeway = 60 * time.Second
	case v.cfg.Leeway < 0:
		v.cfg.Leeway = 0
	}
	if v.cfg.RefreshInterval <= 0 {
		v.cfg.RefreshInterval = 10 * time.Minute
	}
	if v.cfg.MinRefetchInterval <= 0 {
		v.cfg.MinRefetchInterval = time.Minute
	}
	if v.cfg.FetchTimeout <= 0 {
		v.cfg.FetchTimeout = 10 * time.Second
	}
	if v.cfg.Now == nil {
		v.cfg.Now = time.Now
	}
	v.log = cfg.Logger
	if v.log == nil {
		v.log = slog.New(slog.DiscardHandler)
	}
	client := cfg.HTTPClient
	if client == nil {
		client = newJWKSClient(v.cfg.FetchTimeout)
	}
	v.keys = &jwks{url: cfg.JWKSURL, file: cfg.JWKSFile, client: client, minRefetch: v.cfg.MinRefetchInterval,
		timeout: v.cfg.FetchTimeout, now: v.cfg.Now, log: v.log, sem: make(chan struct{}, 1)}
	if err := v.keys.refresh(ctx); err != nil {
		if cfg.JWKSFile != "" {
			return nil, fmt.Errorf("auth.jwt.jwks_file: %w", err)
		}
		v.log.Error("auth.jwt: the issuer's key set could not be fetched; JWTs are refused 503 until it is (retrying)", "jwks_url", ShownURL(cfg.JWKSURL), "err", err)
	}
	return v, nil
}

// Run refreshes the key set every RefreshInterval until ctx ends; after a
// failure it retries sooner (MinRefetchInterval, doubling), keeping the keys
// it holds meanwhile. A jwks_file is reread the same way, so a new key
// written to it is picked up without a restart.
func (v *JWTVerifier) Run(ctx context.Context) {
	wait := v.cfg.RefreshInterval
	if v.keys.cur.Load() == nil {
		wait = v.cfg.MinRefetchInterval
	}
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := v.keys.refresh(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			v.log.Warn("auth.jwt: refreshing the issuer's key set failed; keeping the keys held", "source", v.keys.source(), "err", err)
			wait = min(max(wait*2, v.cfg.MinRefetchInterval), v.cfg.RefreshInterval)
			if v.keys.cur.Load() == nil {
				wait = v.cfg.MinRefetchInterval
			}
			continue
		}
		wait = v.cfg.RefreshInterval
	}
}

// KeyStatus says what the verifier holds, for doctor and logs.
type KeyStatus struct {
	Source  string
	Keys    int
	Fetched time.Time
	LastErr string
}

// Status reports the held key set.
func (v *JWTVerifier) Status() KeyStatus {
	st := KeyStatus{Source: v.keys.source()}
	if ks := v.keys.cur.Load(); ks != nil {
		st.Keys, st.Fetched = ks.count, ks.fetched
	}
	if e := v.keys.lastErr.Load(); e != nil {
		st.LastErr = *e
	}
	return st
}

// LooksLikeJWT reports whether a bearer credential is a compact JWS: three
// base64url segments whose first decodes to a JSON object. Only such a token
// is judged as a JWT; an API key (no dots, or not a JSON header) never is,
// whatever it contains.
func LooksLikeJWT(tok string) bool {
	h, _, ok := strings.Cut(tok, ".")
	if !ok || strings.Count(tok, ".") != 2 || len(h) == 0 || len(h) > maxHeaderB64 {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		return false
	}
	b = bytes.TrimSpace(b)
	return len(b) > 1 && b[0] == '{' && json.Valid(b)
}

const maxHeaderB64 = 8 << 10

// joseHeader is the part of the protected header that picks the key.
type joseHeader struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ"`
}

// Verify checks a bearer JWT and returns its principal, or a *Failure.
func (v *JWTVerifier) Verify(ctx context.Context, tok string) (wire.Principal, error) {
	hb64, _, _ := strings.Cut(tok, ".")
	if !LooksLikeJWT(tok) {
		return wire.Principal{}, fail(ReasonMalformed, "the bearer token is not a compact JWT")
	}
	hb, _ := base64.RawURLEncoding.DecodeString(hb64)
	var h joseHeader
	if err := json.Unmarshal(hb, &h); err != nil {
		return wire.Principal{}, fail(ReasonMalformed, "the JWT header is not valid: %v", err)
	}
	alg, ok := v.algs[h.Alg]
	if !ok {
		return wire.Principal{}, fail(ReasonAlgNotAllowed, "JWT alg %s is not accepted (accepted: %s)", quote(h.Alg), strings.Join(v.cfg.Algorithms, ", "))
	}
	if !typAccepted(h.Typ) {
		return wire.Principal{}, fail(ReasonTypNotAllowed, "JWT typ %s is not an access or ID token", quote(h.Typ))
	}
	keys, err := v.keys.lookup(ctx, h.Kid)
	switch {
	case errors.Is(err, errKeysUnavailable):
		f := fail(ReasonKeysUnavailable, "the issuer's signing keys could not be fetched yet; retry later")
		f.Unavailable = true
		return wire.Principal{}, f
	case err != nil:
		return wire.Principal{}, fail(ReasonUnknownKey, "looking up the JWT's signing key: %v", err)
	case len(keys) == 0 && h.Kid == "":
		return wire.Principal{}, fail(ReasonUnknownKey, "the JWT names no kid and the issuer publishes more than one key")
	case len(keys) == 0:
		return wire.Principal{}, fail(ReasonUnknownKey, "no signing key with kid %s is published by the issuer", quote(h.Kid))
	}
	var payload []byte
	tried := 0
	for _, k := range keys {
		if !keyFits(k, h.Alg) {
			continue
		}
		tried++
		// The algorithm is the allowlisted one from the header, held to
		// the key's type; jwx verifies, checks the header says that alg,
		// and refuses crit and b64 headers it would not act on.
		p, err := jws.VerifyCompactFast(k.key, []byte(tok), alg)
		if err == nil {
			payload = p
			break
		}
	}
	if tried == 0 {
		return wire.Principal{}, fail(ReasonKeyMismatch, "the key with kid %s cannot verify alg %s", quote(h.Kid), h.Alg)
	}
	if payload == nil {
		return wire.Principal{}, fail(ReasonBadSignature, "the JWT signature does not verify")
	}
	return v.principal(payload)
}

// typAccepted admits tokens without typ, "JWT", and access-token types
// (at+jwt, application/at+jwt). Other JWT kinds an issuer signs with the same
// keys (logout+jwt, secevent+jwt) are not credentials.
func typAccepted(typ string) bool {
	t := strings.ToLower(typ)
	t = strings.TrimPrefix(t, "application/")
	return t == "" || t == "jwt" || strings.HasSuffix(t, "at+jwt")
}

// keyFits holds a token's alg to the key's type (RSA for RS/PS, the matching
// curve for ES, Ed25519 for EdDSA) and to the JWK's own alg when it names one.
func keyFits(k publicKey, alg string) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch p := k.key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		switch alg {
		case "ES256":
			return p.Curve == elliptic.P256()
		case "ES384":
			return p.Curve == elliptic.P384()
		case "ES512":
			return p.Curve == elliptic.P521()
		}
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// principal validates the verified payload's claims and builds the principal.
func (v *JWTVerifier) principal(payload []byte) (wire.Principal, error) {
	_, err := jwt.Parse(payload,
		jwt.WithVerify(false), // verified above, by jws
		jwt.WithValidate(true),
		jwt.WithAcceptableSkew(v.cfg.Leeway),
		jwt.WithClock(jwt.ClockFunc(v.cfg.Now)),
		jwt.WithIssuer(v.cfg.Issuer),
		jwt.WithAudience(v.cfg.Audience),
		jwt.WithRequiredClaim(jwt.ExpirationKey),
	)
	if err != nil {
		return wire.Principal{}, claimFailure(err, v.cfg)
	}
	claims, err := decodeClaims(payload)
	if err != nil {
		return wire.Principal{}, fail(ReasonBadClaim, "the JWT claims are not a JSON object with unique names: %v", err)
	}
	raw, ok := claimAt(claims, v.cfg.PrincipalClaim)
	if !ok {
		return wire.Principal{}, fail(ReasonMissingClaim, "the JWT has no %s claim (auth.jwt.principal_claim) to name the principal", quote(v.cfg.PrincipalClaim))
	}
	sub, ok := raw.(string)
	if !ok || !validID(sub) {
		return wire.Principal{}, fail(ReasonBadClaim, "the JWT's %s claim must be a non-empty string of at most 256 printable characters", quote(v.cfg.PrincipalClaim))
	}
	id := v.cfg.PrincipalPrefix + sub
	if v.reserved[IDKey(id)] {
		return wire.Principal{}, fail(ReasonReservedID, "the JWT names principal %s, which is configured for API key or certificate authentication; a token cannot act as it (set auth.jwt.principal_prefix)", quote(id))
	}
	return wire.Principal{
		ID:         id,
		Roles:      v.roles(claims),
		Attributes: map[string]any{AttrAuth: AuthJWT, AttrClaims: claims},
	}, nil
}

func claimFailure(err error, cfg JWTConfig) *Failure {
	switch {
	case errors.Is(err, jwt.TokenExpiredError()):
		return fail(ReasonExpired, "the JWT has expired (exp is past, beyond %s of leeway)", cfg.Leeway)
	case errors.Is(err, jwt.TokenNotYetValidError()):
		return fail(ReasonNotYetValid, "the JWT is not valid yet (nbf is in the future, beyond %s of leeway)", cfg.Leeway)
	case errors.Is(err, jwt.InvalidIssuedAtError()):
		return fail(ReasonNotYetValid, "the JWT was issued in the future (iat, beyond %s of leeway)", cfg.Leeway)
	case errors.Is(err, jwt.InvalidIssuerError()):
		return fail(ReasonWrongIssuer, "the JWT's iss is not the configured issuer %s", quote(cfg.Issuer))
	case errors.Is(err, jwt.InvalidAudienceError()):
		return fail(ReasonWrongAudience, "the JWT's aud does not include %s", quote(cfg.Audience))
	case errors.Is(err, jwt.MissingRequiredClaimError()):
		return fail(ReasonMissingClaim, "the JWT has no exp claim; tokens without an expiry are not accepted")
	}
	return fail(ReasonBadClaim, "the JWT claims are not valid: %v", err)
}

// decodeClaims decodes the payload into a map, refusing duplicate top-level
// names: the claims the policy sees must be the ones jwx validated, and two
// parsers may keep different copies of a duplicated iss or aud.
func decodeClaims(payload []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not an object")
	}
	out := map[string]any{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name := t.(string)
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("claim %s appears twice", quote(name))
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out[name] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	return out, nil
}

// claimAt finds a claim by its whole name, or else by following a dotted path
// into objects (Keycloak's realm_access.roles). Names with dots that exist
// as such (Auth0's https://example.com/roles) win.
func claimAt(claims map[string]any, name string) (any, bool) {
	if v, ok := claims[name]; ok {
		return v, true
	}
	if !strings.Contains(name, ".") {
		return nil, false
	}
	var cur any = claims
	for part := range strings.SplitSeq(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// roles reads the roles claim: a list of strings, or one string of
// space-separated names (the OAuth scope form). Only the contract's roles are
// kept; anything else the identity provider says is ignored.
func (v *JWTVerifier) roles(claims map[string]any) []string {
	out := []string{}
	if v.cfg.RolesClaim == "" {
		return out
	}
	raw, ok := claimAt(claims, v.cfg.RolesClaim)
	if !ok {
		return out
	}
	var names []string
	switch r := raw.(type) {
	case string:
		names = strings.Fields(r)
	case []any:
		for _, x := range r {
			if s, ok := x.(string); ok {
				names = append(names, s)
			}
		}
	}
	for _, n := range names {
		if slices.Contains(tokenRoles, n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// validID accepts a principal id a token may carry: 1..256 bytes of valid
// UTF-8 without control characters, so an id cannot forge log lines or
// evidence columns.
func validID(s string) bool {
	if s == "" || len(s) > 256 || !utf8.ValidString(s) || strings.TrimSpace(s) != s {
		return false // nor leading or trailing spaces, which nobody sees
	}
	for _, r := range s {
		// Printable only (letters, marks, numbers, punctuation, symbols,
		// ASCII space): no controls, and no format or odd space
		// characters (zero-width, bidi overrides, no-break spaces) that
		// would show an id as another one in receipts and the explorer.
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// IDKey is an id as compared where two ids must not pass for one another
// (a token's with the configured principals', an approver's with the
// caller's, configured ids with each other): NFKC normalised and case
// folded, so "Agent-1" or fullwidth letters are the id "agent-1".
func IDKey(s string) string {
	return cases.Fold().String(norm.NFKC.String(s))
}
