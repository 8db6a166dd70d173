package identity

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
)

// Bounds on what the gateway accepts from an issuer's key set.
const (
	// maxJWKSBytes bounds one JWKS document (an IdP's is a few KiB).
	maxJWKSBytes = 1 << 20
	// maxJWKSKeys bounds the keys in it: each costs a parse.
	maxJWKSKeys = 100
	// maxKeysPerKid bounds how many keys one token may be tried against.
	maxKeysPerKid = 4
)

// publicKey is one usable verification key from the issuer's set.
type publicKey struct {
	kid string
	alg string // the JWK's own "alg", "" when it names none
	key crypto.PublicKey
}

// keySet is one fetched generation of the issuer's keys, indexed by kid.
type keySet struct {
	byKid   map[string][]publicKey
	count   int
	fetched time.Time
}

func (s *keySet) find(kid string) []publicKey {
	if s == nil {
		return nil
	}
	if kid == "" {
		// A token without a kid is accepted only when the issuer
		// publishes exactly one key: nothing to choose between.
		if s.count != 1 {
			return nil
		}
		for _, ks := range s.byKid {
			return ks
		}
	}
	return s.byKid[kid]
}

// jwks keeps the issuer's key set: fetched at start, refreshed in the
// background, and refetched when a token names a kid it does not hold (a
// rotation), at most once per minRefetch, so a caller spraying random kids
// cannot make the gateway hammer the identity provider. A failed fetch keeps
// the keys already held.
type jwks struct {
	url, file  string
	client     *http.Client
	minRefetch time.Duration
	timeout    time.Duration
	now        func() time.Time
	log        *slog.Logger

	cur atomic.Pointer[keySet]
	// sem serializes fetches (capacity 1); lastAttempt, guarded by it,
	// is when the last one started.
	sem         chan struct{}
	lastAttempt time.Time
	lastErr     atomic.Pointer[string]
}

// source names where the keys come from, for messages: the URL without
// its password or query, which may hold credentials.
func (j *jwks) source() string {
	if j.file != "" {
		return j.file
	}
	return ShownURL(j.url)
}

// ShownURL is raw as logs and messages may show it: without the password
// of its userinfo and without its query (either may be a credential).
func ShownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.RawQuery != "" {
		u.RawQuery = "REDACTED"
	}
	u.Fragment, u.RawFragment = "", ""
	return u.Redacted()
}

// lookup returns the keys with kid, refetching the set once (rate limited)
// when none is held. A nil result with a nil error means the kid is unknown.
// ErrKeysUnavailable means no key set has ever been fetched.
func (j *jwks) lookup(ctx context.Context, kid string) ([]publicKey, error) {
	held := j.cur.Load()
	if ks := held.find(kid); len(ks) > 0 {
		return ks, nil
	}
	select {
	case j.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-j.sem }()
	// Another request may have fetched while this one waited.
	if now := j.cur.Load(); now != held {
		if ks := now.find(kid); len(ks) > 0 {
			return ks, nil
		}
	}
	if j.now().Sub(j.lastAttempt) >= j.minRefetch {
		// Detached from the request: a caller that sends an unknown kid
		// and hangs up must not cancel the refetch it triggered and so
		// use up the minute's allowance for everyone.
		if err := j.fetchLocked(context.WithoutCancel(ctx)); err != nil {
			j.log.Warn("auth.jwt: refetching the issuer's keys for an unknown kid failed; keeping the keys held", "source", j.source(), "err", err)
		}
	}
	cur := j.cur.Load()
	if cur == nil {
		return nil, errKeysUnavailable
	}
	return cur.find(kid), nil
}

var errKeysUnavailable = errors.New("no key set has been fetched from the issuer yet")

// refresh fetches the set now (the background refresh and doctor).
func (j *jwks) refresh(ctx context.Context) error {
	select {
	case j.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-j.sem }()
	return j.fetchLocked(ctx)
}

// fetchLocked fetches, parses and swaps in the key set; the caller holds sem.
// On any failure the held set stays.
func (j *jwks) fetchLocked(ctx context.Context) error {
	j.lastAttempt = j.now()
	ctx, cancel := context.WithTimeout(ctx, j.timeout)
	defer cancel()
	b, err := j.read(ctx)
	if err == nil {
		var ks *keySet
		ks, err = parseKeySet(b, j.log)
		if err == nil {
			ks.fetched = j.now()
			j.cur.Store(ks)
			j.lastErr.Store(nil)
			return nil
		}
	}
	msg := err.Error()
	j.lastErr.Store(&msg)
	return err
}

func (j *jwks) read(ctx context.Context) ([]byte, error) {
	if j.file != "" {
		f, err := os.Open(j.file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return readBounded(f, j.file)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := j.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// url.Error shows the whole URL, query included.
			return nil, fmt.Errorf("GET %s: %w", j.source(), ue.Err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", j.source(), resp.StatusCode)
	}
	return readBounded(resp.Body, j.source())
}

func readBounded(r io.Reader, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(b) > maxJWKSBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes; not a key set", name, maxJWKSBytes)
	}
	return b, nil
}

// parseKeySet keeps the set's public signature keys of a supported type:
// RSA (at least 2048 bits, jwx's floor), EC P-256/384/521, Ed25519. Keys for
// encryption, symmetric keys, and entries jwx cannot parse are skipped; a set
// with no usable key is an error (the held set stays).
func parseKeySet(b []byte, log *slog.Logger) (*keySet, error) {
	set, err := jwk.Parse(b,
		jwk.WithIgnoreParseError(true),
		jwk.WithMaxKeys(maxJWKSKeys),
		jwk.WithRejectDuplicateKID(false))
	if err != nil {
		return nil, fmt.Errorf("not a JWK set: %w", err)
	}
	ks := &keySet{byKid: map[string][]publicKey{}}
	skipped := 0
	for i := range set.Len() {
		k, _ := set.Key(i)
		pk, ok := usableKey(k)
		if !ok || len(ks.byKid[pk.kid]) >= maxKeysPerKid {
			skipped++
			continue
		}
		ks.byKid[pk.kid] = append(ks.byKid[pk.kid], pk)
		ks.count++
	}
	if skipped > 0 && log != nil {
		log.Info("auth.jwt: skipped keys of the issuer's set that cannot verify signatures here (encryption, symmetric, unsupported or weak)", "skipped", skipped, "kept", ks.count)
	}
	if ks.count == 0 {
		return nil, errors.New("the key set holds no usable signature key (RSA >= 2048 bits, EC P-256/P-384/P-521, Ed25519)")
	}
	return ks, nil
}

func usableKey(k jwk.Key) (publicKey, bool) {
	if k == nil {
		return publicKey{}, false
	}
	if use, ok := k.KeyUsage(); ok && use != "" && use != jwk.ForSignature.String() {
		return publicKey{}, false
	}
	pub, err := jwk.PublicRawKeyOf(k)
	if err != nil {
		return publicKey{}, false
	}
	switch p := pub.(type) {
	case *rsa.PublicKey:
		if p.N.BitLen() < 2048 {
			return publicKey{}, false
		}
	case *ecdsa.PublicKey:
		switch p.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return publicKey{}, false
		}
	case ed25519.PublicKey:
	default:
		return publicKey{}, false
	}
	pk := publicKey{key: pub}
	pk.kid, _ = k.KeyID()
	if a, ok := k.Algorithm(); ok {
		pk.alg = a.String()
	}
	return pk, true
}

// newJWKSClient is the HTTP client for the key set: bounded in time, at most
// three redirects, never from https down to http, each to a URL CheckJWKSURL
// accepts and not to a link-local or unspecified address.
func newJWKSClient(timeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 2, 2
	t.ResponseHeaderTimeout = timeout
	return &http.Client{
		Timeout:   timeout,
		Transport: t,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 3 {
				return errors.New("more than 3 redirects")
			}
			if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
				return errors.New("redirect from https to http refused")
			}
			// The target must be a jwks_url the gateway would accept
			// (http only to loopback), and not link-local (cloud
			// metadata services live there).
			if err := CheckJWKSURL(req.URL.String()); err != nil {
				return fmt.Errorf("redirect to %s refused: %w", ShownURL(req.URL.String()), err)
			}
			if ip := net.ParseIP(req.URL.Hostname()); ip != nil && (ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified()) {
				return fmt.Errorf("redirect to %s refused: a link-local or unspecified address", ShownURL(req.URL.String()))
			}
			return nil
		},
	}
}

// CheckJWKSURL accepts https URLs, and http only to a loopback host (an
// identity provider on the same machine, or a test): keys fetched in the
// clear from elsewhere could be anyone's.
func CheckJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("want an https:// URL, got %q", ShownURL(raw))
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		host := u.Hostname()
		if host == "localhost" {
			return nil
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			return nil
		}
		return fmt.Errorf("http:// is accepted only for a loopback host; the issuer's keys must come over https, got %q", ShownURL(raw))
	}
	return fmt.Errorf("want an https:// URL, got %q", ShownURL(raw))
}
