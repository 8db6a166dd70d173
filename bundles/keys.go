package bundles

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/keys"
)

// VerificationConfig builds the verification OPA's bundle reader enforces
// from a PEM public key file. The algorithm follows from the key (RSA:
// RS256, P-256: ES256, P-384: ES384, P-521: ES512, Ed25519: EdDSA), so a
// signature made with another algorithm or key is refused. keyID is the key
// id the bundle's signature must name; empty accepts the signature's own
// key id as long as this key verifies it.
func VerificationConfig(pemFile, keyID string) (*bundle.VerificationConfig, error) {
	raw, err := os.ReadFile(pemFile)
	if err != nil {
		return nil, fmt.Errorf("verification key: %w", err)
	}
	alg, err := publicKeyAlgorithm(raw)
	if err != nil {
		return nil, fmt.Errorf("verification key %s: %w", pemFile, err)
	}
	id := keyID
	if id == "" {
		id = "default"
	}
	kc := &keys.Config{Key: string(raw), Algorithm: alg}
	// OPA looks the key up by the signature's key id, falling back to the
	// configured id; with no configured id we register it as "default".
	return bundle.NewVerificationConfig(map[string]*bundle.KeyConfig{id: kc}, id, "", nil), nil
}

// publicKeyAlgorithm names the JWS algorithm for a PEM public key (or
// certificate).
func publicKeyAlgorithm(raw []byte) (string, error) {
	block, _ := pem.Decode(raw)
	if block == nil {
		return "", errors.New("no PEM block")
	}
	var pub any
	switch block.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return "", fmt.Errorf("parse public key: %w", err)
		}
		pub = k
	case "RSA PUBLIC KEY":
		k, err := x509.ParsePKCS1PublicKey(block.Bytes)
		if err != nil {
			return "", fmt.Errorf("parse public key: %w", err)
		}
		pub = k
	case "CERTIFICATE":
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return "", fmt.Errorf("parse certificate: %w", err)
		}
		pub = c.PublicKey
	default:
		return "", fmt.Errorf("PEM block %q is not a public key (a private key here would be a mistake)", block.Type)
	}
	return algorithmFor(pub)
}

// privateKeyAlgorithm names the JWS algorithm for a PEM private key.
func privateKeyAlgorithm(raw []byte) (string, error) {
	block, _ := pem.Decode(raw)
	if block == nil {
		return "", errors.New("no PEM block")
	}
	var priv any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		priv, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		priv, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		priv, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return "", fmt.Errorf("PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		return "", fmt.Errorf("parse private key: %w", err)
	}
	switch k := priv.(type) {
	case *rsa.PrivateKey:
		return algorithmFor(&k.PublicKey)
	case *ecdsa.PrivateKey:
		return algorithmFor(&k.PublicKey)
	case ed25519.PrivateKey:
		return algorithmFor(k.Public())
	}
	return "", fmt.Errorf("unsupported private key type %T", priv)
}

func algorithmFor(pub any) (string, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return "", fmt.Errorf("RSA key of %d bits is too small (want at least 2048)", k.N.BitLen())
		}
		return "RS256", nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return "ES256", nil
		case elliptic.P384():
			return "ES384", nil
		case elliptic.P521():
			return "ES512", nil
		}
		return "", fmt.Errorf("unsupported curve %s", k.Curve.Params().Name)
	case ed25519.PublicKey:
		return "EdDSA", nil
	}
	return "", fmt.Errorf("unsupported key type %T", pub)
}
