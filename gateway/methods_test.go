package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/wire"
)

// TestMethods: every GET route answers HEAD like GET without a body, route
// middleware (authentication, roles) included; a method a route does not
// serve is 405 with Allow, in the contract's error shape.
func TestMethods(t *testing.T) {
	t.Parallel()
	ts, _ := testServer(t, fakePolicy{allow: true}, &memEvidence{})
	cases := []struct {
		name, method, path, key string
		wantStatus              int
		wantAllow               []string // methods Allow must list (405 only)
		wantBody                bool
	}{
		{"HEAD healthz", http.MethodHead, "/healthz", "", 200, nil, false},
		{"HEAD openapi", http.MethodHead, "/openapi.json", "", 200, nil, false},
		{"HEAD tools without a key", http.MethodHead, "/v1/tools", "", 401, nil, false},
		{"HEAD tools with a key", http.MethodHead, "/v1/tools", agentKey, 200, nil, false},
		{"HEAD receipts needs auditor", http.MethodHead, "/v1/receipts", agentKey, 403, nil, false},
		{"GET healthz", http.MethodGet, "/healthz", "", 200, nil, true},
		{"POST healthz", http.MethodPost, "/healthz", "", 405, []string{"GET", "HEAD"}, true},
		{"DELETE tools", http.MethodDelete, "/v1/tools", agentKey, 405, []string{"GET", "HEAD"}, true},
		{"PUT decisions", http.MethodPut, "/v1/decisions", agentKey, 405, []string{"POST"}, true},
		{"HEAD decisions (POST only)", http.MethodHead, "/v1/decisions", agentKey, 405, []string{"POST"}, false},
		{"unknown route stays 404", http.MethodGet, "/v1/nope", agentKey, 404, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest(tc.method, ts.URL+tc.path, nil)
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status = %d, want %d (body %s)", resp.StatusCode, tc.wantStatus, body)
			}
			if got := len(body) > 0; got != tc.wantBody {
				t.Fatalf("body = %q, want a body: %v", body, tc.wantBody)
			}
			allow := resp.Header.Get("Allow")
			for _, m := range tc.wantAllow {
				if !strings.Contains(allow, m) {
					t.Errorf("Allow = %q, want it to list %s", allow, m)
				}
			}
			if tc.wantStatus != 405 || !tc.wantBody {
				return
			}
			var eb struct{ Error wire.Error }
			if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Code != wire.CodeInvalidInput || eb.Error.Details["field"] != "method" {
				t.Errorf("405 body = %s (%v), want the contract error shape, invalid_input on field method", body, err)
			}
		})
	}
}
