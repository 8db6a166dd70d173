package bundles

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/portcullis/portcullis/policies"
)

// testKey is a generated key pair written as PEM files.
type testKey struct {
	priv    []byte
	pubFile string
}

func rsaKey(t testing.TB) testKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return writeKey(t, k, &k.PublicKey)
}

func ecKey(t testing.TB) testKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return writeKey(t, k, &k.PublicKey)
}

func writeKey(t testing.TB, priv, pub any) testKey {
	t.Helper()
	pk, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "pub.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return testKey{priv: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}), pubFile: f}
}

// tinyBundle is a small valid policy with a test, as a file system.
func tinyBundle(allow string) fstest.MapFS {
	return fstest.MapFS{
		".manifest":                     {Data: []byte(`{"roots":["portcullis"]}`)},
		"portcullis/decision.rego":      {Data: []byte("package portcullis\n\ndecision := {\"allow\": " + allow + ", \"reasons\": [\"r\"]}\n")},
		"portcullis/decision_test.rego": {Data: []byte("package portcullis\n\ntest_reasons if decision.reasons == [\"r\"]\n")},
		"data.json":                     {Data: []byte(`{"portcullis":{"config":{"n":1}}}`)},
	}
}

func TestBuildSignVerify(t *testing.T) {
	t.Parallel()
	rk, ek, other := rsaKey(t), ecKey(t), rsaKey(t)
	signed := func(k testKey, kid string) []byte {
		b, err := Build(tinyBundle("true"), BuildOptions{SigningKey: k.priv, KeyID: kid, Revision: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	unsigned, err := Build(tinyBundle("true"), BuildOptions{Revision: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	tampered := retar(t, signed(rk, "k1"), "portcullis/decision.rego", []byte("package portcullis\n\ndecision := {\"allow\": true}\n"))
	added := retar(t, signed(rk, "k1"), "portcullis/extra.rego", []byte("package portcullis.extra\n\nx := 1\n"))
	tests := []struct {
		name    string
		archive []byte
		pub     string
		kid     string
		wantErr string
		wantKID string
		wantAlg string
	}{
		{"rsa signed", signed(rk, "k1"), rk.pubFile, "k1", "", "k1", "RS256"},
		{"ec signed", signed(ek, "ops"), ek.pubFile, "ops", "", "ops", "ES256"},
		{"no key id configured", signed(rk, "k1"), rk.pubFile, "", "", "k1", "RS256"},
		{"unsigned", unsigned, rk.pubFile, "k1", "missing .signatures.json", "", ""},
		{"tampered", tampered, rk.pubFile, "k1", "digest mismatch", "", ""},
		{"file added", added, rk.pubFile, "k1", "not included in bundle signature", "", ""},
		{"other key", signed(other, "k1"), rk.pubFile, "k1", "verif", "", ""},
		{"wrong key id", signed(rk, "k2"), rk.pubFile, "k1", "k2", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fsys, err := ReadArchive(bytes.NewReader(tc.archive))
			if err != nil {
				t.Fatal(err)
			}
			vc, err := VerificationConfig(tc.pub, tc.kid)
			if err != nil {
				t.Fatal(err)
			}
			e := policies.NewEngine(policies.Options{})
			info, err := e.LoadWith(context.Background(), fsys, "test.tar.gz", policies.LoadOptions{Verification: vc, KeyID: tc.kid, RunTests: true})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				if got := policies.StageOf(err); got != policies.StageSignature {
					t.Errorf("stage = %q, want signature", got)
				}
				if e.Ready() {
					t.Error("a refused bundle went live")
				}
				return
			}
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if info.Revision != "r1" || info.Signature == nil || info.Signature.KeyID != tc.wantKID || info.Signature.Algorithm != tc.wantAlg {
				t.Errorf("info = %+v sig %+v", info, info.Signature)
			}
			rep, err := Inspect(fsys, vc)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Signature == nil || !rep.Signature.Verified || rep.Revision != "r1" || len(rep.Roots) != 1 {
				t.Errorf("inspect = %+v", rep)
			}
		})
	}
}
