package bundles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/portcullis/portcullis/policies"
)

// ErrNotModified is returned by a Source whose bundle has not changed since
// the last fetch (an HTTP 304): nothing to activate.
var ErrNotModified = errors.New("bundle not modified")

// Source fetches the current bundle. Fetch returns ErrNotModified when the
// source can tell nothing changed.
type Source interface {
	Fetch(ctx context.Context) (fs.FS, error)
	// String names the source in logs, evidence and GET /v1/policy.
	String() string
}

// NewSource picks the source for policy.bundle: "shipped", an http(s) URL,
// a .tar.gz file or a directory.
func NewSource(location string, httpOpts HTTPOptions) (Source, error) {
	switch {
	case location == "shipped":
		return shippedSource{}, nil
	case strings.HasPrefix(location, "http://"), strings.HasPrefix(location, "https://"):
		return NewHTTPSource(location, httpOpts)
	case strings.HasSuffix(location, ".tar.gz"), strings.HasSuffix(location, ".tgz"):
		return fileSource(location), nil
	default:
		return dirSource(location), nil
	}
}

type shippedSource struct{}

func (shippedSource) Fetch(context.Context) (fs.FS, error) { return policies.Shipped(), nil }
func (shippedSource) String() string                       { return "shipped" }

// dirSource is a bundle directory, re-read on every fetch.
type dirSource string

func (d dirSource) Fetch(context.Context) (fs.FS, error) {
	st, err := os.Stat(string(d))
	if err != nil {
		return nil, fmt.Errorf("policy bundle directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("policy bundle %s: not a directory (a bundle archive must end in .tar.gz)", string(d))
	}
	return os.DirFS(string(d)), nil
}
func (d dirSource) String() string { return string(d) }

// fileSource is a .tar.gz bundle on disk, re-read on every fetch.
type fileSource string

func (f fileSource) Fetch(context.Context) (fs.FS, error) {
	fh, err := os.Open(string(f))
	if err != nil {
		return nil, fmt.Errorf("policy bundle: %w", err)
	}
	defer fh.Close()
	return ReadArchive(fh)
}
func (f fileSource) String() string { return string(f) }

// HTTPOptions configure an HTTP bundle source.
type HTTPOptions struct {
	// BearerTokenFile holds a token sent as Authorization: Bearer; it is
	// re-read on every fetch so a rotated token is picked up.
	BearerTokenFile string
	// Client is the HTTP client; nil means one with Timeout.
	Client *http.Client
	// Timeout bounds one fetch when Client is nil; 0 means 60 s.
	Timeout time.Duration
}

// HTTPSource fetches a .tar.gz bundle from a bundle service (an OPA bundle
// server, S3, nginx ...), sending the last ETag as If-None-Match so an
// unchanged bundle costs a 304.
type HTTPSource struct {
	url   string
	shown string // url without its query (String)
	opts  HTTPOptions
	mu    sync.Mutex
	etag  string
	cands string // the ETag of the last fetched body, kept until Commit
}

// NewHTTPSource checks the URL. A bearer token is refused over plain HTTP
// to anything but loopback: it would cross the network in clear.
func NewHTTPSource(raw string, opts HTTPOptions) (*HTTPSource, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("policy bundle URL %q: not an absolute http(s) URL", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("policy bundle URL: credentials in the URL are not allowed; use policy.bearer_token_file")
	}
	if opts.BearerTokenFile != "" && u.Scheme == "http" && !isLoopback(u.Hostname()) {
		return nil, fmt.Errorf("policy bundle URL %s://%s%s: a bearer token is only sent over https (or to loopback)", u.Scheme, u.Host, u.Path)
	}
	if opts.Client == nil {
		timeout := opts.Timeout
		if timeout <= 0 {
			timeout = 60 * time.Second
		}
		opts.Client = &http.Client{Timeout: timeout}
	}
	// A copy, so the caller's client keeps its own redirect rule.
	c := *opts.Client
	c.CheckRedirect = checkRedirect(opts.Client.CheckRedirect)
	opts.Client = &c
	shown := *u
	if shown.RawQuery != "" {
		shown.RawQuery = "REDACTED"
	}
	shown.Fragment, shown.RawFragment = "", ""
	return &HTTPSource{url: raw, shown: shown.String(), opts: opts}, nil
}

// maxRedirects bounds the redirects one fetch follows.
const maxRedirects = 5

// checkRedirect is the bundle fetch's redirect rule, before next (the
// client's own rule, if any). A redirect may not leave https for plain
// http: Go resends the Authorization header to the same host whatever the
// scheme, so the bearer token (and, without a verification key, the
// bundle itself) would cross the network in clear, around the check
// NewHTTPSource makes on the configured URL. Nor may it go to a link-local
// or unspecified address (cloud metadata services live there), nor leave
// http(s), nor chain more than maxRedirects times.
func checkRedirect(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return fmt.Errorf("bundle fetch: stopped after %d redirects", len(via))
		}
		u := req.URL
		if u.Scheme != "https" && u.Scheme != "http" {
			return fmt.Errorf("bundle fetch: redirect to %s: not http(s)", u.Redacted())
		}
		for _, prev := range via {
			if prev.URL.Scheme == "https" && u.Scheme != "https" {
				return fmt.Errorf("bundle fetch: redirect from https to http (%s) refused: it would send the bundle and its token in clear", u.Redacted())
			}
		}
		if ip := net.ParseIP(u.Hostname()); ip != nil && (ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified()) {
			return fmt.Errorf("bundle fetch: redirect to link-local or unspecified address %s refused", u.Hostname())
		}
		if next != nil {
			return next(req, via)
		}
		return nil
	}
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// String names the source for logs, the policy status and the evidence's
// activation events: the URL without its query, which may be a credential
// (a presigned object-store URL).
func (h *HTTPSource) String() string { return h.shown }

// Fetch GETs the bundle. The ETag of a 200 is remembered only once the
// bundle is committed (see Commit), so a bundle refused at activation is
// fetched again next time rather than skipped as "not modified".
func (h *HTTPSource) Fetch(ctx context.Context) (fs.FS, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch bundle: %w", err)
	}
	req.Header.Set("Accept", "application/gzip, application/octet-stream")
	h.mu.Lock()
	etag := h.etag
	h.mu.Unlock()
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	if h.opts.BearerTokenFile != "" {
		tok, err := os.ReadFile(h.opts.BearerTokenFile)
		if err != nil {
			return nil, fmt.Errorf("fetch bundle: bearer token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := h.opts.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// url.Error shows the whole URL, query included.
			return nil, fmt.Errorf("fetch bundle %s: %w", h.shown, ue.Err)
		}
		return nil, fmt.Errorf("fetch bundle: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		return nil, ErrNotModified
	case http.StatusOK:
	default:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("fetch bundle %s: HTTP %d", h.shown, resp.StatusCode)
	}
	if resp.ContentLength > MaxArchiveBytes {
		return nil, fmt.Errorf("fetch bundle: %d bytes exceeds %d", resp.ContentLength, MaxArchiveBytes)
	}
	fsys, err := ReadArchive(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("fetch bundle %s: %w", h.shown, err)
	}
	h.mu.Lock()
	h.cands = resp.Header.Get("ETag")
	h.mu.Unlock()
	return fsys, nil
}

// Commit remembers the ETag of the last fetched bundle: called once that
// bundle is live (or was identical to the live one).
func (h *HTTPSource) Commit() {
	h.mu.Lock()
	h.etag = h.cands
	h.mu.Unlock()
}

// committer is a Source that wants to know when its bundle went live.
type committer interface{ Commit() }
