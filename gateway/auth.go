package gateway

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/gateway/identity"
	"github.com/portcullis/portcullis/wire"
)

// TokenVerifier verifies bearer JWTs (identity.JWTVerifier): a principal, or
// an *identity.Failure saying what was wrong with the token.
type TokenVerifier interface {
	Verify(ctx context.Context, token string) (wire.Principal, error)
}

// CertMapper maps a client certificate crypto/tls has verified against the
// client CA to its principal (identity.CertMapper), or an *identity.Failure.
type CertMapper interface {
	Map(cert *x509.Certificate) (wire.Principal, error)
}

// Context keys the access log reads: how the caller authenticated, or why
// it was refused.
const (
	ctxAuthMethod  = "auth_method"
	ctxAuthFailure = "auth_failure"
)

// initAuth marks every configured key's principal as authenticated by API
// key (input.principal.attributes.auth), once, so no request allocates for it.
func (s *Server) initAuth() {
	keys := make([]Key, len(s.opts.Keys))
	for i, k := range s.opts.Keys {
		attrs := make(map[string]any, len(k.Principal.Attributes)+1)
		maps.Copy(attrs, k.Principal.Attributes)
		attrs[identity.AttrAuth] = identity.AuthAPIKey
		k.Principal.Attributes = attrs
		keys[i] = k
	}
	s.opts.Keys = keys
}

// identify resolves a request's caller. The Authorization header, when
// present, is the credential and the only one (several are refused): a token that is a JWT is
// judged as a JWT (with auth.jwt configured) and never falls back to the
// API keys, whatever its signature says; anything else is an API key.
// Without the header, a client certificate verified at the TLS handshake
// names the caller through principals[].client_cert_subject. Nothing in the
// request body or other headers ever does.
func (s *Server) identify(c echo.Context) (wire.Principal, string, error) {
	r := c.Request()
	if n := len(r.Header.Values(echo.HeaderAuthorization)); n > 1 {
		// Not a list header: with several, a proxy in front may have
		// judged another one than the gateway would read.
		return wire.Principal{}, "", &identity.Failure{Reason: identity.ReasonMultipleCredentials,
			Message: fmt.Sprintf("the request has %d Authorization headers; send exactly one", n)}
	}
	h := r.Header.Get(echo.HeaderAuthorization)
	if h != "" {
		const prefix = "Bearer "
		if len(h) > len(prefix) && equalFoldASCII(h[:len(prefix)], prefix) {
			tok := h[len(prefix):]
			if s.opts.JWT != nil && identity.LooksLikeJWT(tok) {
				p, err := s.opts.JWT.Verify(r.Context(), tok)
				return p, identity.AuthJWT, err
			}
		}
		if p, ok := s.lookup(h); ok {
			return p, identity.AuthAPIKey, nil
		}
		msg := "unknown API key: send Authorization: Bearer <api-key>"
		if s.opts.JWT != nil {
			msg = "unknown API key: send Authorization: Bearer <api-key or JWT>"
		}
		return wire.Principal{}, identity.AuthAPIKey, &identity.Failure{Reason: "unknown_key", Message: msg}
	}
	if s.opts.ClientCerts != nil && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		if f := s.recheckChain(r.TLS.VerifiedChains); f != nil {
			return wire.Principal{}, identity.AuthMTLS, f
		}
		p, err := s.opts.ClientCerts.Map(r.TLS.VerifiedChains[0][0])
		return p, identity.AuthMTLS, err
	}
	msg := "missing credentials: send Authorization: Bearer <api-key>"
	switch {
	case s.opts.JWT != nil && s.opts.ClientCerts != nil:
		msg = "missing credentials: send Authorization: Bearer <api-key or JWT>, or a client certificate"
	case s.opts.JWT != nil:
		msg = "missing credentials: send Authorization: Bearer <api-key or JWT>"
	case s.opts.ClientCerts != nil:
		msg = "missing credentials: send Authorization: Bearer <api-key>, or a client certificate"
	}
	return wire.Principal{}, "", &identity.Failure{Reason: "missing", Message: msg}
}

// recheckChain checks again, for this request, what crypto/tls verified at
// the handshake: a connection kept alive outlives that moment, so a chain
// must still be within its validity period and (with ClientCATrusted) still
// end at a configured client CA. One chain that holds is enough; nil then.
func (s *Server) recheckChain(chains [][]*x509.Certificate) *identity.Failure {
	now := s.opts.Now()
	var expired *x509.Certificate
	for _, chain := range chains {
		if len(chain) == 0 {
			continue
		}
		if s.opts.ClientCATrusted != nil && !s.opts.ClientCATrusted(chain[len(chain)-1]) {
			continue
		}
		valid := true
		for _, c := range chain {
			if now.After(c.NotAfter) || now.Before(c.NotBefore) {
				expired, valid = c, false
				break
			}
		}
		if valid {
			return nil
		}
	}
	if expired != nil {
		return &identity.Failure{Reason: identity.ReasonExpired,
			Message: "the client certificate (or its issuer) is outside its validity period (notBefore " + expired.NotBefore.UTC().Format(time.RFC3339) +
				", notAfter " + expired.NotAfter.UTC().Format(time.RFC3339) + "); reconnect with a valid one"}
	}
	return &identity.Failure{Reason: identity.ReasonCertUntrusted,
		Message: "the client certificate's CA is no longer in tls.client_ca_file (it was replaced after this connection was made); reconnect with a certificate from a trusted CA"}
}

// refuseAuth answers a request whose credentials did not authenticate: 401
// unauthenticated (503 backend_unavailable when the issuer's keys could not
// be fetched), with details.reason, and no receipt: nobody was
// authenticated to record a call for.
func (s *Server) refuseAuth(c echo.Context, method string, err error) error {
	s.metrics.authFailures.Inc()
	f := &identity.Failure{Reason: "invalid", Message: "the credentials were not accepted"}
	if !errors.As(err, &f) {
		s.log.ErrorContext(c.Request().Context(), "authentication failed unexpectedly", "err", err)
	}
	c.Set(ctxAuthFailure, f.Reason)
	if method != "" {
		c.Set(ctxAuthMethod, method)
	}
	we := &wire.Error{Code: wire.CodeUnauthenticated, Message: f.Message, Details: map[string]any{"reason": f.Reason}}
	if f.Unavailable {
		we.Code = wire.CodeBackendUnavailable
		c.Response().Header().Set("Retry-After", "5")
	} else {
		challenge := `Bearer realm="portcullis"`
		if method == identity.AuthJWT {
			challenge += `, error="invalid_token"`
		}
		if u := resourceMetadataURL(c.Request()); s.opts.ProtectedResource != nil && u != "" {
			// RFC 9728 §5.1: where the client finds the authorization
			// server to get a token from (the MCP authorization spec).
			challenge += `, resource_metadata="` + u + `"`
		}
		c.Response().Header().Set("WWW-Authenticate", challenge)
	}
	return we // errorHandler answers it in the route's shape
}
