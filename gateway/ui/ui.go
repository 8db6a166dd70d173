// Package ui serves the evidence explorer: a static single-page application
// (hand-written HTML, CSS and JavaScript, embedded in the binary, no build
// step and nothing fetched from elsewhere) under /ui/.
//
// Serving the page needs no credentials: it holds no data. Everything it
// shows comes from the authenticated JSON API (GET /v1/receipts,
// /v1/receipts/{id}, /v1/receipts/{id}/proof, /v1/evidence/stats), which the
// page calls with the auditor key the user types in. The key is kept in the
// tab's sessionStorage only, never in a URL or a cookie.
//
// Every answer carries a strict Content-Security-Policy (no inline script or
// style, no framing, Trusted Types enforced so no string can reach an HTML
// sink), nosniff and no-referrer. Assets are immutable under their content
// hash (?v=<hash>, which index.html names) and revalidated otherwise.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is where the explorer is mounted. GET Prefix redirects to Prefix+"/".
const Prefix = "/ui"

//go:embed static
var static embed.FS

// CSP is the Content-Security-Policy of every /ui answer. Scripts, styles,
// images and API calls come from this origin only; inline script and style
// are refused, as are plugins, <base>, form submissions (the login form is
// handled by script, so a key can never end up in a URL) and framing.
// Trusted Types with no policy make every HTML-parsing sink (innerHTML,
// outerHTML, insertAdjacentHTML, document.write) throw, so server data can
// only reach the page as text.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; font-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'; " +
	"frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'"

// Cache-Control values: the page and un-versioned asset URLs are revalidated
// on every use (ETag), assets requested under their current content hash
// are cached for a year.
const (
	cacheRevalidate = "no-cache"
	cacheImmutable  = "public, max-age=31536000, immutable"
	cacheNone       = "no-store"
)

// asset is one embedded file, ready to serve.
type asset struct {
	name    string
	body    []byte
	ctype   string
	etag    string
	version string // first 16 hex digits of the SHA-256 of body
}

// Handler serves the explorer's files. It is an http.Handler so it can be
// mounted on any router; it expects request paths under Prefix.
type Handler struct {
	assets  map[string]*asset // by name relative to static/, e.g. "app.js"
	modTime time.Time
}

// New loads the embedded files. It panics if they are missing or the page
// names an asset that is not embedded: both are build errors.
func New() *Handler {
	h, err := newHandler(static)
	if err != nil {
		panic(err)
	}
	return h
}

func newHandler(fsys fs.FS) (*Handler, error) {
	sub, err := fs.Sub(fsys, "static")
	if err != nil {
		return nil, err
	}
	h := &Handler{assets: map[string]*asset{}}
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		ctype := mime.TypeByExtension(path.Ext(p))
		if ctype == "" {
			return fmt.Errorf("ui: no content type for %s", p)
		}
		h.assets[p] = newAsset(p, b, ctype)
		return nil
	})
	if err != nil {
		return nil, err
	}
	index, ok := h.assets["index.html"]
	if !ok {
		return nil, fmt.Errorf("ui: static/index.html is not embedded")
	}
	// The page names its assets with their content hash, so browsers may
	// cache them for good and still never run a stale script after an
	// upgrade.
	page := index.body
	for name, a := range h.assets {
		if name == "index.html" {
			continue
		}
		for _, attr := range []string{`src="`, `href="`} {
			page = bytes.ReplaceAll(page, []byte(attr+name+`"`), []byte(attr+name+"?v="+a.version+`"`))
		}
	}
	for _, name := range []string{"app.js", "app.css"} {
		a, ok := h.assets[name]
		if !ok {
			return nil, fmt.Errorf("ui: static/%s is not embedded", name)
		}
		if !bytes.Contains(page, []byte(name+"?v="+a.version)) {
			return nil, fmt.Errorf("ui: index.html does not reference %s", name)
		}
	}
	h.assets["index.html"] = newAsset("index.html", page, index.ctype)
	return h, nil
}

func newAsset(name string, b []byte, ctype string) *asset {
	sum := sha256.Sum256(b)
	v := hex.EncodeToString(sum[:])[:16]
	return &asset{name: name, body: b, ctype: ctype, etag: `"` + v + `"`, version: v}
}

// Names lists the embedded asset names (for tests).
func (h *Handler) Names() []string {
	out := make([]string, 0, len(h.assets))
	for n := range h.assets {
		out = append(out, n)
	}
	return out
}

// SetSecurityHeaders sets the headers every /ui answer carries.
func SetSecurityHeaders(hdr http.Header) {
	hdr.Set("Content-Security-Policy", CSP)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Cross-Origin-Opener-Policy", "same-origin")
	hdr.Set("Cross-Origin-Resource-Policy", "same-origin")
	hdr.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=(), usb=(), clipboard-read=()")
}

// ServeHTTP answers GET and HEAD for Prefix, Prefix+"/" (the page) and
// Prefix+"/<asset>". Anything else under Prefix is 404: there are no
// directories to list and no fallback to the page.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	SetSecurityHeaders(hdr)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		hdr.Set("Cache-Control", cacheNone)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	if p == Prefix {
		hdr.Set("Cache-Control", cacheNone)
		http.Redirect(w, r, Prefix+"/", http.StatusMovedPermanently)
		return
	}
	name, ok := strings.CutPrefix(p, Prefix+"/")
	if !ok {
		h.notFound(w)
		return
	}
	if name == "" {
		name = "index.html"
	}
	a, ok := h.assets[name]
	if !ok {
		h.notFound(w)
		return
	}
	hdr.Set("Content-Type", a.ctype)
	hdr.Set("ETag", a.etag)
	if name != "index.html" && r.URL.Query().Get("v") == a.version {
		hdr.Set("Cache-Control", cacheImmutable)
	} else {
		hdr.Set("Cache-Control", cacheRevalidate)
	}
	// ServeContent answers If-None-Match with 304 and handles HEAD and
	// ranges; the zero modTime leaves Last-Modified out.
	http.ServeContent(w, r, a.name, h.modTime, bytes.NewReader(a.body))
}

func (h *Handler) notFound(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", cacheNone)
	http.Error(w, "not found", http.StatusNotFound)
}

// Routes are the router patterns the explorer is mounted at (echo syntax).
var Routes = []string{Prefix, Prefix + "/*"}

// IsRoute reports whether pattern (a matched route, never a raw request
// path) is one of the explorer's. The gateway serves those without a key:
// they hold only the static page, and deciding by the matched route means
// no crafted request path can reach an API handler unauthenticated.
func IsRoute(pattern string) bool {
	return pattern == Prefix || pattern == Prefix+"/*"
}
