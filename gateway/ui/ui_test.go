package ui

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

func get(t *testing.T, h http.Handler, method, target string, hdr map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkSecurityHeaders holds every answer, 200 or not, to the same headers.
func checkSecurityHeaders(t *testing.T, target string, resp *http.Response) {
	t.Helper()
	want := map[string]string{
		"Content-Security-Policy": CSP,
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
		"X-Frame-Options":         "DENY",
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", target, k, got, v)
		}
	}
}

func TestCSPIsStrict(t *testing.T) {
	t.Parallel()
	for _, d := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'",
		"object-src 'none'", "base-uri 'none'", "form-action 'none'", "require-trusted-types-for 'script'"} {
		if !strings.Contains(CSP, d) {
			t.Errorf("CSP lacks %q: %s", d, CSP)
		}
	}
	for _, bad := range []string{"'unsafe-inline'", "'unsafe-eval'", "data:", "http:", "https:", "*"} {
		if strings.Contains(CSP, bad) {
			t.Errorf("CSP allows %s: %s", bad, CSP)
		}
	}
}

func TestEmbeddedAssets(t *testing.T) {
	t.Parallel()
	h := New()
	names := h.Names()
	slices.Sort(names)
	if want := []string{"app.css", "app.js", "approvals.html", "approvals.js", "common.js", "icon.svg", "index.html", "upstreams.html", "upstreams.js"}; !slices.Equal(names, want) {
		t.Fatalf("embedded assets = %v, want %v", names, want)
	}
	wantType := map[string]string{"index.html": "text/html", "app.js": "text/javascript", "app.css": "text/css", "icon.svg": "image/svg+xml",
		"approvals.html": "text/html", "approvals.js": "text/javascript", "upstreams.html": "text/html", "upstreams.js": "text/javascript", "common.js": "text/javascript"}
	for _, n := range names {
		target := Prefix + "/" + n
		resp := get(t, h, http.MethodGet, target, nil)
		b := body(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", target, resp.StatusCode)
			continue
		}
		checkSecurityHeaders(t, target, resp)
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, wantType[n]) {
			t.Errorf("GET %s: Content-Type %q, want %s", target, ct, wantType[n])
		}
		if len(b) < 100 {
			t.Errorf("GET %s: %d bytes, want the embedded file", target, len(b))
		}
		// No CDN, no external font or script: nothing but this origin.
		rest := strings.ReplaceAll(b, "http://www.w3.org/2000/svg", "")
		if m := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`).FindString(rest); m != "" {
			t.Errorf("%s references another origin: %q", n, m)
		}
	}
}

func TestPageAndCaching(t *testing.T) {
	t.Parallel()
	h := New()
	resp := get(t, h, http.MethodGet, Prefix+"/", nil)
	page := body(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ui/: %d", resp.StatusCode)
	}
	checkSecurityHeaders(t, "/ui/", resp)
	if cc := resp.Header.Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("page Cache-Control = %q, want no-cache (revalidate, so upgrades show at once)", cc)
	}
	etag := resp.Header.Get("ETag")
	if etag == "" {
		t.Fatal("page has no ETag")
	}
	if r := get(t, h, http.MethodGet, Prefix+"/", map[string]string{"If-None-Match": etag}); r.StatusCode != http.StatusNotModified {
		t.Errorf("conditional GET of the page: %d, want 304", r.StatusCode)
	}
	if r := get(t, h, http.MethodGet, Prefix+"/index.html", nil); r.StatusCode != http.StatusOK || body(t, r) != page {
		t.Errorf("GET /ui/index.html: %d, want the page", r.StatusCode)
	}

	// The page names each asset under its content hash; that URL is
	// immutable, any other revalidates.
	js := h.assets["app.js"]
	versioned := Prefix + "/app.js?v=" + js.version
	if !strings.Contains(page, `src="app.js?v=`+js.version+`"`) {
		t.Fatalf("page does not load %s", versioned)
	}
	if !strings.Contains(page, `href="app.css?v=`+h.assets["app.css"].version+`"`) {
		t.Fatal("page does not load the versioned stylesheet")
	}
	for target, want := range map[string]string{
		versioned:                  "public, max-age=31536000, immutable",
		Prefix + "/app.js":         "no-cache",
		Prefix + "/app.js?v=stale": "no-cache",
	} {
		r := get(t, h, http.MethodGet, target, nil)
		if r.StatusCode != http.StatusOK || r.Header.Get("Cache-Control") != want {
			t.Errorf("GET %s: %d Cache-Control %q, want 200 %q", target, r.StatusCode, r.Header.Get("Cache-Control"), want)
		}
	}
	if r := get(t, h, http.MethodHead, versioned, nil); r.StatusCode != http.StatusOK || body(t, r) != "" {
		t.Errorf("HEAD %s: %d", versioned, r.StatusCode)
	}

	r := get(t, h, http.MethodGet, Prefix, nil)
	if r.StatusCode != http.StatusMovedPermanently || r.Header.Get("Location") != Prefix+"/" {
		t.Errorf("GET /ui: %d Location %q, want 301 to /ui/", r.StatusCode, r.Header.Get("Location"))
	}
	checkSecurityHeaders(t, Prefix, r)
	if r := get(t, h, http.MethodPost, Prefix+"/", nil); r.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: %d, want 405", r.StatusCode)
	}
}

func TestUnknownPathsAre404(t *testing.T) {
	t.Parallel()
	h := New()
	for _, target := range []string{
		Prefix + "/nope.js",
		Prefix + "/static/",
		Prefix + "/static/app.js",
		Prefix + "/static",
		Prefix + "/./app.js",
		Prefix + "/../go.mod",
		Prefix + "/%2e%2e/go.mod",
		Prefix + "/app.js/",
		Prefix + "/index.html/",
		Prefix + "/receipts/123",
		Prefix + "x/app.js",
		"/app.js",
	} {
		resp := get(t, h, http.MethodGet, target, nil)
		b := body(t, resp)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", target, resp.StatusCode)
		}
		checkSecurityHeaders(t, target, resp)
		if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("GET %s: Cache-Control %q, want no-store", target, cc)
		}
		// Not a directory listing, not the page as a fallback.
		if strings.Contains(b, "<a ") || strings.Contains(b, "app.js") || strings.Contains(b, "<html") {
			t.Errorf("GET %s answered with a listing or the page:\n%s", target, b)
		}
	}
}

// TestNoInlineCode holds the assets to what the CSP enforces, so a change
// that would only work with 'unsafe-inline' fails here and not in a browser:
// no inline script or style, no event handler attributes, and no HTML sinks
// in the script.
func TestNoInlineCode(t *testing.T) {
	t.Parallel()
	h := New()
	doc, err := html.Parse(bytes.NewReader(h.assets["index.html"].body))
	if err != nil {
		t.Fatal(err)
	}
	scripts := 0
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			if n.Data == "style" {
				t.Error("index.html has a <style> element")
			}
			if n.Data == "script" {
				scripts++
				src := ""
				for _, a := range n.Attr {
					if a.Key == "src" {
						src = a.Val
					}
				}
				if src == "" || n.FirstChild != nil {
					t.Errorf("inline <script> (src %q)", src)
				}
			}
			for _, a := range n.Attr {
				if a.Key == "style" || strings.HasPrefix(a.Key, "on") {
					t.Errorf("<%s %s=%q>: inline style or handler", n.Data, a.Key, a.Val)
				}
				if (a.Key == "href" || a.Key == "src" || a.Key == "action") && strings.Contains(strings.ToLower(a.Val), "javascript:") {
					t.Errorf("<%s %s=%q>", n.Data, a.Key, a.Val)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if scripts != 1 {
		t.Errorf("%d <script> elements, want 1 (app.js)", scripts)
	}
	js := string(h.assets["app.js"].body)
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('style'", ".style."} {
		if strings.Contains(js, sink) {
			t.Errorf("app.js uses %s: render data with textContent and DOM APIs only", sink)
		}
	}
	for _, leak := range []string{"localStorage", "document.cookie", "?key=", "&key="} {
		if strings.Contains(js, leak) {
			t.Errorf("app.js uses %s: the key belongs in sessionStorage and the Authorization header only", leak)
		}
	}
}

func TestIsRoute(t *testing.T) {
	t.Parallel()
	for _, p := range Routes {
		if !IsRoute(p) {
			t.Errorf("IsRoute(%q) = false", p)
		}
	}
	for _, p := range []string{"/ui/", "/ui/app.js", "/v1/receipts", "/uix", "/ui/*/x", ""} {
		if IsRoute(p) {
			t.Errorf("IsRoute(%q) = true; only route patterns are public", p)
		}
	}
}
