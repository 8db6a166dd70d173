package identity

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/portcullis/portcullis/wire"
)

// CertPrincipal binds a client certificate to a configured principal
// (principals[].client_cert_subject). Match is one of:
//
//	CN=agent-7,O=Example Corp     the subject DN, exactly as RFC 2253 renders
//	                              it (Go's pkix.Name.String, and
//	                              openssl x509 -noout -subject -nameopt RFC2253)
//	subject:CN=agent-7,O=Example  the same, explicitly
//	dns:agent-7.internal          a DNS SAN (case-insensitive)
//	uri:spiffe://example.org/a/7  a URI SAN (exact)
//	email:agent-7@example.com     an email SAN (exact)
type CertPrincipal struct {
	Match     string
	Principal wire.Principal
}

// CertMapper maps a verified client certificate to its principal.
type CertMapper struct {
	byKey map[string]wire.Principal
}

// NewCertMapper indexes the bindings; a malformed or duplicate match is an
// error naming it.
func NewCertMapper(entries []CertPrincipal) (*CertMapper, error) {
	m := &CertMapper{byKey: map[string]wire.Principal{}}
	for _, e := range entries {
		k, err := MatchKey(e.Match)
		if err != nil {
			return nil, fmt.Errorf("principal %s: client_cert_subject: %w", e.Principal.ID, err)
		}
		if other, dup := m.byKey[k]; dup {
			return nil, fmt.Errorf("principal %s: client_cert_subject %q is also principal %s's", e.Principal.ID, e.Match, other.ID)
		}
		m.byKey[k] = e.Principal
	}
	return m, nil
}

// MatchKey normalizes a client_cert_subject to the key the mapper indexes.
func MatchKey(match string) (string, error) {
	m := strings.TrimSpace(match)
	kind, val, found := strings.Cut(m, ":")
	if found && !strings.Contains(kind, "=") {
		switch strings.ToLower(kind) {
		case "dns":
			if val == "" || strings.ContainsAny(val, "*/ ") {
				return "", fmt.Errorf("dns: wants one host name without wildcards, got %q", val)
			}
			return "dns:" + strings.ToLower(val), nil
		case "uri":
			if u, err := url.Parse(val); err != nil || u.Scheme == "" {
				return "", fmt.Errorf("uri: wants an absolute URI such as spiffe://example.org/agent, got %q", val)
			}
			return "uri:" + val, nil
		case "email":
			if !strings.Contains(val, "@") {
				return "", fmt.Errorf("email: wants an address, got %q", val)
			}
			return "email:" + val, nil
		case "subject":
			m = val
		default:
			return "", fmt.Errorf("want a subject DN (CN=...,O=...) or dns:, uri:, email: a SAN, got %q", match)
		}
	}
	if !strings.Contains(m, "=") {
		return "", fmt.Errorf("want a subject DN (CN=...,O=...) or dns:, uri:, email: a SAN, got %q", match)
	}
	return "subject:" + m, nil
}

// certKeys lists the match keys a certificate answers to.
func certKeys(c *x509.Certificate) []string {
	keys := []string{"subject:" + c.Subject.String()}
	for _, d := range c.DNSNames {
		keys = append(keys, "dns:"+strings.ToLower(d))
	}
	for _, u := range c.URIs {
		keys = append(keys, "uri:"+u.String())
	}
	for _, e := range c.EmailAddresses {
		keys = append(keys, "email:"+e)
	}
	return keys
}

// Map returns the principal bound to the certificate, which crypto/tls has
// already verified against the client CA. A certificate bound to no
// principal, or to two, is refused: it authenticates no one.
func (m *CertMapper) Map(c *x509.Certificate) (wire.Principal, error) {
	if c == nil {
		return wire.Principal{}, errors.New("no client certificate")
	}
	var found *wire.Principal
	for _, k := range certKeys(c) {
		p, ok := m.byKey[k]
		if !ok {
			continue
		}
		if found != nil && found.ID != p.ID {
			return wire.Principal{}, fail(ReasonCertAmbiguous, "the client certificate (subject %s) matches principals %s and %s; it must name exactly one", quote(c.Subject.String()), quote(found.ID), quote(p.ID))
		}
		found = &p
	}
	if found == nil {
		return wire.Principal{}, fail(ReasonCertUnmapped, "the client certificate (subject %s) is trusted but bound to no principal (principals[].client_cert_subject)", quote(c.Subject.String()))
	}
	return *found, nil
}
