package tests

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes each export
// (protobuf) the gateway's exporter sends and keeps the spans.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var ex collectortrace.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &ex) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range ex.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				r.spans = append(r.spans, ss.GetSpans()...)
			}
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) byName(name string) *tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

func (r *otlpReceiver) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.spans {
		out = append(out, s.GetName())
	}
	return out
}

func otlpAttrs(s *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, kv := range s.GetAttributes() {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			m[kv.GetKey()] = v.GetStringValue()
		default:
			b, _ := json.Marshal(v.GetIntValue())
			m[kv.GetKey()] = string(b)
		}
	}
	return m
}

func otlpEnv(d *deployment, endpoint string, extra ...string) []string {
	env := append([]string(nil), d.env...)
	env = append(env, "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_EXPORTER=otlp", "OTEL_BSP_SCHEDULE_DELAY=50")
	return append(env, extra...)
}

// TestOTLPExport: the real binary exports its spans over OTLP/HTTP to a
// receiver: server spans from the net/http instrumentation with the HTTP
// semantic-convention attributes, named by route (never by the path of an
// unmatched request), error.type on a refused call, a non-empty
// gen_ai.tool.call.id; its log records carry the trace_id and span_id.
// With OTEL_SDK_DISABLED=true nothing is exported.
func TestOTLPExport(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, storeSQLite)
	recv := newOTLPReceiver(t)
	g := startProcess(t, d, startOptions{env: otlpEnv(d, recv.URL)})

	if r := g.do(t, http.MethodGet, "/healthz", "", nil); r.status != 200 {
		t.Fatalf("healthz %d", r.status)
	}
	if r := g.do(t, http.MethodGet, "/scanner/probe/12345", d.keys["agent-full"], nil); r.status != 404 {
		t.Fatalf("unmatched path %d", r.status)
	}
	denied := g.do(t, http.MethodPost, "/v1/tool-calls", d.keys["agent-noexec"], execCall(map[string]any{"argv": []string{"/bin/true"}}, "", ""))
	if denied.status != http.StatusForbidden {
		t.Fatalf("denied call %d: %s", denied.status, denied.body)
	}
	var post, tool *tracepb.Span
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		post, tool = recv.byName("POST /v1/tool-calls"), recv.byName("execute_tool Exec")
		if post != nil && tool != nil && recv.byName("GET /healthz") != nil && recv.byName("GET") != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if post == nil || tool == nil || recv.byName("GET /healthz") == nil || recv.byName("GET") == nil {
		t.Fatalf("spans received: %q; want POST /v1/tool-calls, execute_tool Exec, GET /healthz and GET (the unmatched request)", recv.names())
	}
	for _, n := range recv.names() {
		if strings.Contains(n, "scanner") || strings.Contains(n, "unmatched") {
			t.Errorf("span named %q: an unmatched path must not name a span", n)
		}
	}
	a := otlpAttrs(post)
	for k, want := range map[string]string{"http.request.method": "POST", "http.route": "/v1/tool-calls", "url.scheme": "http",
		"network.protocol.version": "1.1", "server.address": "127.0.0.1", "error.type": "permission_denied", "http.response.status_code": "403"} {
		if a[k] != want {
			t.Errorf("server span %s = %q, want %q (all %v)", k, a[k], want, a)
		}
	}
	if a["user_agent.original"] == "" {
		t.Errorf("server span has no user_agent.original: %v", a)
	}
	if post.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("server span kind %v", post.GetKind())
	}
	ta := otlpAttrs(tool)
	if ta["gen_ai.tool.call.id"] == "" || ta["gen_ai.tool.name"] != "Exec" {
		t.Errorf("execute_tool span: %v, want a gen_ai.tool.call.id and gen_ai.tool.name Exec", ta)
	}
	// The access log line of the refused call names the span's trace and span.
	traceID, spanID := hex.EncodeToString(post.GetTraceId()), hex.EncodeToString(post.GetSpanId())
	var logged bool
	for _, line := range strings.Split(g.stderr.String(), "\n") {
		if strings.Contains(line, `"route":"/v1/tool-calls"`) && strings.Contains(line, `"trace_id":"`+traceID+`"`) && strings.Contains(line, `"span_id":"`+spanID+`"`) {
			logged = true
		}
	}
	if !logged {
		t.Errorf("no log record with trace_id %s and span_id %s:\n%s", traceID, spanID, g.stderr.String())
	}

	// OTEL_SDK_DISABLED=true: the same exporter settings, nothing sent,
	// not even at shutdown (which flushes).
	if err := g.stop(30 * time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
	off := newOTLPReceiver(t)
	g2 := startProcess(t, d, startOptions{env: otlpEnv(d, off.URL, "OTEL_SDK_DISABLED=true")})
	g2.do(t, http.MethodGet, "/healthz", "", nil)
	g2.do(t, http.MethodPost, "/v1/tool-calls", d.keys["agent-noexec"], execCall(map[string]any{"argv": []string{"/bin/true"}}, "", ""))
	if err := g2.stop(30 * time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
	if n := off.names(); len(n) != 0 {
		t.Errorf("OTEL_SDK_DISABLED=true exported spans: %q", n)
	}
}
