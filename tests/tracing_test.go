package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestTraceparentReachesReceipt: a caller's W3C traceparent continues into
// the gateway's spans, and the receipt names that trace, allowed or denied.
func TestTraceparentReachesReceipt(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	g := d.start(t)
	for _, tc := range []struct {
		name, principal string
		wantStatus      int
	}{
		{"allowed", "agent-full", http.StatusOK},
		{"denied", "agent-noexec", http.StatusForbidden},
	} {
		traceID := randHex(t, 16)
		body, _ := json.Marshal(execCall(map[string]any{"argv": []string{"/bin/echo", "traced"}}, "", ""))
		req, _ := http.NewRequest(http.MethodPost, g.baseURL+"/v1/tool-calls", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+d.keys[tc.principal])
		req.Header.Set("traceparent", "00-"+traceID+"-"+randHex(t, 8)+"-01")
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			ReceiptID string `json:"receipt_id"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != tc.wantStatus || out.ReceiptID == "" {
			t.Fatalf("%s: status %d receipt %q, want %d and a receipt", tc.name, resp.StatusCode, out.ReceiptID, tc.wantStatus)
		}
		r, ok := g.getReceipt(t, out.ReceiptID)
		if !ok {
			t.Fatalf("%s: receipt %s not found", tc.name, out.ReceiptID)
		}
		var full struct {
			TraceID string `json:"trace_id"`
		}
		if err := json.Unmarshal([]byte(r.raw), &full); err != nil {
			t.Fatal(err)
		}
		if full.TraceID != traceID {
			t.Errorf("%s: receipt trace_id %q, want the caller's %q", tc.name, full.TraceID, traceID)
		}
	}
}
