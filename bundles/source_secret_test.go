package bundles

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHTTPSourceQueryNotShown: a bundle URL may carry a credential in its
// query (a presigned object-store URL: X-Amz-Signature, sig=...). The
// source's name, which logs, the policy status and the evidence's policy
// activation events keep, and the fetch's errors, show the URL without it.
func TestHTTPSourceQueryNotShown(t *testing.T) {
	t.Parallel()
	const sig = "presigned-s3cr3t-signature"
	notFound := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(notFound.Close)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	for name, base := range map[string]string{"HTTP 404": notFound.URL, "connection refused": dead.URL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src, err := NewHTTPSource(base+"/bundle.tar.gz?X-Amz-Signature="+sig, HTTPOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if s := src.String(); strings.Contains(s, sig) || !strings.Contains(s, "/bundle.tar.gz") {
				t.Errorf("String() = %q: want the URL without its query", s)
			}
			_, err = src.Fetch(context.Background())
			if err == nil || strings.Contains(err.Error(), sig) {
				t.Errorf("Fetch error %v: want an error without the query", err)
			}
		})
	}
}
