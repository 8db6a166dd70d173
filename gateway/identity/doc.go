// Package identity authenticates callers by the credentials an identity
// provider or a PKI issues, beside the gateway's own API keys (CONTRACT
// section 11):
//
//   - JWT bearer tokens, verified against an issuer's JWKS (JWTVerifier):
//     signature by a key the issuer publishes, under an algorithm from an
//     asymmetric allowlist, then iss, aud, exp and nbf with leeway. The
//     signature and claim checks are lestrrat-go/jwx's; this package picks
//     the key and decides what the token may claim to be.
//   - client certificates (mTLS), verified by crypto/tls against a CA the
//     operator names and mapped to a configured principal by subject DN or
//     SAN (CertMapper).
//   - the TLS server certificate and client CA, reloaded from their files
//     when they change, without a restart (TLSFiles).
//
// A credential is never half-believed: a token that looks like a JWT is
// judged as one and nothing else, and every refusal is a *Failure that says
// what was wrong without echoing secrets.
package identity
