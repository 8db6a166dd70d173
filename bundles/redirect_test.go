package bundles

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHTTPSourceRedirects: a bundle service's redirect may not take the
// fetch (and its bearer token) from https to plain http, nor to a
// link-local address (cloud metadata), nor loop forever; a redirect that
// stays on https is followed.
func TestHTTPSourceRedirects(t *testing.T) {
	t.Parallel()
	bundle, err := Build(tinyBundle("true"), BuildOptions{Revision: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	var plainHits, plainTokens atomic.Int64
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits.Add(1)
		if r.Header.Get("Authorization") != "" {
			plainTokens.Add(1)
		}
		_, _ = w.Write(bundle)
	}))
	t.Cleanup(plain.Close)
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/downgrade":
			http.Redirect(w, r, plain.URL+"/b.tar.gz", http.StatusFound)
		case "/metadata":
			http.Redirect(w, r, "https://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/moved":
			http.Redirect(w, r, "/b.tar.gz", http.StatusMovedPermanently)
		default:
			_, _ = w.Write(bundle)
		}
	}))
	t.Cleanup(tls.Close)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret-bundle-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, wantErr string
	}{
		{"/downgrade", "https to http"},
		{"/metadata", "link-local"},
		{"/loop", "redirects"},
		{"/moved", ""},
	}
	for _, tc := range tests {
		src, err := NewHTTPSource(tls.URL+tc.path, HTTPOptions{BearerTokenFile: tok, Client: tls.Client()})
		if err != nil {
			t.Fatal(err)
		}
		_, err = src.Fetch(context.Background())
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("Fetch(%s) = %v, want the bundle", tc.path, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("Fetch(%s) = %v, want an error naming %q", tc.path, err, tc.wantErr)
		}
	}
	if plainHits.Load() != 0 || plainTokens.Load() != 0 {
		t.Errorf("the plain-http server was fetched %d times, %d with the bearer token", plainHits.Load(), plainTokens.Load())
	}
}
