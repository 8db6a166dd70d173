package gateway

import (
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// TestMetrics: per-route request counts and latencies (unmatched requests
// under one "other" route), durations of denied calls as well as allowed
// ones, and the whole exposition clean by client_golang's linter (the
// checks promtool check metrics runs).
func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	ev := &memEvidence{}
	s := New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		Policy: fakePolicy{allow: false}, Evidence: ev, Receipts: ev, Tools: []tools.Tool{&countingTool{}},
		InstanceID: "test", OpenAPI: OpenAPIDocument, Registry: reg,
	})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	for _, path := range []string{"/healthz", "/healthz", "/scan/1", "/scan/2"} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if status, _ := post(t, ts.URL, agentKey, `{"tool":"Count","input":{}}`); status != http.StatusForbidden {
		t.Fatalf("denied call: status %d", status)
	}
	if got := testutil.ToFloat64(s.metrics.requests.WithLabelValues("GET", "/healthz", "200")); got != 2 {
		t.Errorf("GET /healthz 200 counted %v times, want 2", got)
	}
	if got := testutil.ToFloat64(s.metrics.requests.WithLabelValues("GET", "other", "401")); got != 2 {
		t.Errorf("unmatched paths counted %v times under route other, want 2", got)
	}
	if got := testutil.ToFloat64(s.metrics.requests.WithLabelValues("POST", "/v1/tool-calls", "403")); got != 1 {
		t.Errorf("POST /v1/tool-calls 403 counted %v, want 1", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				labels := []string{mf.GetName()}
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				counts[strings.Join(labels, ",")] = h.GetSampleCount()
			}
		}
	}
	for _, want := range []string{
		"portcullis_tool_call_duration_seconds,decision=deny,tool=Count",
		"portcullis_http_request_duration_seconds,method=GET,route=/healthz",
		"portcullis_http_request_duration_seconds,method=POST,route=/v1/tool-calls",
	} {
		if counts[want] == 0 {
			t.Errorf("no observation in %s (histograms: %v)", want, counts)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
