package ui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/gateway"
	"github.com/portcullis/portcullis/gateway/ui"
)

// TestMountedOnGateway checks the explorer as the gateway serves it: the
// page needs no key, the data routes still do, and no request path that
// starts with /ui reaches an API handler without one.
func TestMountedOnGateway(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(gateway.New(gateway.Options{OpenAPI: gateway.OpenAPIDocument}).Handler())
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	fetch := func(path string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	resp, page := fetch("/ui/")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Evidence explorer") {
		t.Fatalf("GET /ui/ without a key: %d\n%.300s", resp.StatusCode, page)
	}
	if resp.Header.Get("Content-Security-Policy") != ui.CSP || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("GET /ui/ headers: %v", resp.Header)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Error("GET /ui/ skipped the gateway's middleware (no X-Request-Id)")
	}
	if resp, _ := fetch("/ui"); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d %q, want 301 /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := fetch("/ui/nope.js"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/nope.js: %d, want 404", resp.StatusCode)
	}
	// The data stays behind the key, whatever the path looks like.
	for _, p := range []string{"/v1/receipts", "/v1/evidence/stats", "/ui/../v1/receipts", "/ui/%2e%2e/v1/receipts", "/ui%2f../v1/receipts", "/uix"} {
		resp, b := fetch(p)
		if resp.StatusCode == http.StatusOK || strings.Contains(b, `"receipts"`) {
			t.Errorf("GET %s without a key: %d %.200s", p, resp.StatusCode, b)
		}
	}
	if resp, _ := fetch("/v1/receipts"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/receipts without a key: %d, want 401", resp.StatusCode)
	}
}
