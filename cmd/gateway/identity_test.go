package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"

	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
	"github.com/portcullis/portcullis/gateway/identity"
)

// TestJWTLeewayAsConfigured: auth.jwt.leeway is the clock skew allowed,
// 0 included (the config accepts 0..5m). An explicit "leeway: 0s" must not
// become the verifier's 60 s default: a token expired 30 s ago is refused
// with 0s, and accepted with 60s.
func TestJWTLeewayAsConfigured(t *testing.T) {
	t.Parallel()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := jwk.Import(pub)
	if err != nil {
		t.Fatal(err)
	}
	_ = k.Set(jwk.KeyIDKey, "k1")
	set := jwk.NewSet()
	_ = set.AddKey(k)
	b, _ := json.Marshal(set)
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims, _ := json.Marshal(map[string]any{"iss": "https://issuer.example/", "aud": "portcullis", "sub": "alice",
		"iat": now.Add(-10 * time.Minute).Unix(), "exp": now.Add(-30 * time.Second).Unix()})
	h := jws.NewHeaders()
	_ = h.Set(jws.KeyIDKey, "k1")
	tok, err := jws.Sign(claims, jws.WithKey(jwa.EdDSA(), priv, jws.WithProtectedHeaders(h)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		leeway time.Duration
		accept bool
	}{{0, false}, {time.Minute, true}} {
		j := config.JWT{Issuer: "https://issuer.example/", Audience: "portcullis", JWKSFile: file,
			Leeway: config.Duration(c.leeway), JWKSRefreshInterval: config.Duration(10 * time.Minute),
			JWKSMinRefetchInterval: config.Duration(time.Minute), JWKSFetchTimeout: config.Duration(10 * time.Second)}
		v, err := identity.NewJWTVerifier(context.Background(), jwtConfig(j, nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.Verify(context.Background(), string(tok))
		if (err == nil) != c.accept {
			t.Errorf("leeway %s: token expired 30s ago: err = %v, want accepted %v", c.leeway, err, c.accept)
		}
	}
}
