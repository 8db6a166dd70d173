package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/wire"
)

// tracedServer is testServer with its own tracer provider, whose ended
// spans rec holds.
func tracedServer(t *testing.T, pol Decider) (*httptest.Server, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ev := &memEvidence{}
	s := New(Options{
		Keys:   []Key{{SHA256: sha256.Sum256([]byte(agentKey)), Principal: wire.Principal{ID: "agent-1", Roles: []string{wire.RoleAgent}}}},
		Policy: pol, Evidence: ev, Receipts: ev, Tools: []tools.Tool{&countingTool{}},
		InstanceID: "test", OpenAPI: OpenAPIDocument, TracerProvider: tp,
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, rec
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.String()
	}
	return m
}

// TestServerSpans: the server span of each request comes from otelhttp
// with the HTTP semantic-convention attributes, is named by its route
// template (never by the path of an unmatched request), carries error.type
// on a failure, and a tool call's span always has a gen_ai.tool.call.id.
func TestServerSpans(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, method, path, key, body string
		policy                        fakePolicy
		wantName                      string
		wantAttrs                     map[attribute.Key]string
		absent                        []attribute.Key
	}{
		{name: "health", method: "GET", path: "/healthz", wantName: "GET /healthz",
			wantAttrs: map[attribute.Key]string{"http.route": "/healthz", "http.response.status_code": "200", "url.scheme": "http",
				"network.protocol.version": "1.1", "user_agent.original": "portcullis-test/1", "http.request.method": "GET", "client.address": "127.0.0.1"},
			absent: []attribute.Key{"error.type"}},
		{name: "unmatched", method: "GET", path: "/no/such/thing/12345", key: agentKey, wantName: "GET",
			wantAttrs: map[attribute.Key]string{"http.response.status_code": "404", "error.type": "not_found"},
			absent:    []attribute.Key{"http.route"}},
		{name: "denied call", method: "POST", path: "/v1/tool-calls", key: agentKey, body: `{"tool":"Count","input":{}}`,
			policy: fakePolicy{allow: false}, wantName: "POST /v1/tool-calls",
			wantAttrs: map[attribute.Key]string{"http.route": "/v1/tool-calls", "http.response.status_code": "403", "error.type": "permission_denied"}},
		{name: "unauthenticated", method: "GET", path: "/v1/tools", wantName: "GET /v1/tools",
			wantAttrs: map[attribute.Key]string{"http.response.status_code": "401", "error.type": "unauthenticated"}},
		{name: "wrong method", method: "DELETE", path: "/healthz", wantName: "DELETE /healthz",
			wantAttrs: map[attribute.Key]string{"http.response.status_code": "405", "error.type": "invalid_input"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts, rec := tracedServer(t, tc.policy)
			req, _ := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("User-Agent", "portcullis-test/1")
			req.Header.Set("X-Forwarded-For", "203.0.113.7") // no trusted proxies: not believed
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			server := serverSpan(t, rec)
			if server.Name() != tc.wantName {
				t.Errorf("span name %q, want %q", server.Name(), tc.wantName)
			}
			got := spanAttrs(server)
			for k, v := range tc.wantAttrs {
				if got[k] != v {
					t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			for _, k := range tc.absent {
				if _, ok := got[k]; ok {
					t.Errorf("%s set (%q), want absent", k, got[k])
				}
			}
			if got["server.address"] == "" {
				t.Errorf("server.address missing: %v", got)
			}
		})
	}
}

func serverSpan(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range rec.Ended() {
		if s.SpanKind().String() == "server" {
			return s
		}
	}
	t.Fatalf("no server span among %d", len(rec.Ended()))
	return nil
}

// TestToolCallSpanCallID: gen_ai.tool.call.id is the caller's call_id,
// else the receipt id; never empty.
func TestToolCallSpanCallID(t *testing.T) {
	t.Parallel()
	for _, callID := range []string{"", "call-7"} {
		ts, rec := tracedServer(t, fakePolicy{allow: true})
		body, _ := json.Marshal(wire.ToolCallRequest{Tool: "Count", Input: json.RawMessage(`{}`), CallID: callID})
		status, out := post(t, ts.URL, agentKey, string(body))
		if status != 200 {
			t.Fatalf("status %d", status)
		}
		want := callID
		if want == "" {
			want = out.ReceiptID
		}
		var found bool
		for _, s := range rec.Ended() {
			if s.Name() == "execute_tool Count" {
				found = true
				if got := spanAttrs(s)["gen_ai.tool.call.id"]; got != want || got == "" {
					t.Errorf("call_id %q: gen_ai.tool.call.id = %q, want %q", callID, got, want)
				}
			}
		}
		if !found {
			t.Fatal("no execute_tool span")
		}
	}
}

// TestAnnotateMCP: the MCP semantic-convention attributes of a message.
func TestAnnotateMCP(t *testing.T) {
	t.Parallel()
	cases := []struct {
		method, session, id string
		want                map[attribute.Key]string
		absent              []attribute.Key
	}{
		{"tools/call", "sess-1", `7`, map[attribute.Key]string{"mcp.method.name": "tools/call", "mcp.session.id": "sess-1", "jsonrpc.request.id": "7"}, nil},
		{"tools/list", "sess-1", `"abc"`, map[attribute.Key]string{"jsonrpc.request.id": "abc"}, nil},
		{"initialize", "", `1`, map[attribute.Key]string{"mcp.method.name": "initialize"}, []attribute.Key{"mcp.session.id"}},
		{"notifications/initialized", "s", ``, map[attribute.Key]string{"mcp.method.name": "notifications/initialized"}, []attribute.Key{"jsonrpc.request.id"}},
		{"ping", "s", `null`, nil, []attribute.Key{"jsonrpc.request.id"}},
		// Client-chosen strings are bounded on the span: a megabyte
		// method name or id is not exported to the tracing backend whole.
		{strings.Repeat("m", 1<<20), "s", `"` + strings.Repeat("i", 1<<20) + `"`, map[attribute.Key]string{
			"mcp.method.name": strings.Repeat("m", maxSpanText) + "…", "jsonrpc.request.id": strings.Repeat("i", maxSpanText) + "…"}, nil},
	}
	for _, tc := range cases {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		ctx, span := tp.Tracer("t").Start(context.Background(), "POST /mcp")
		annotateMCP(ctx, tc.method, tc.session, json.RawMessage(tc.id))
		span.End()
		got := spanAttrs(rec.Ended()[0])
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%.40s: %s = %.60q (%d bytes), want %.60q (%d bytes)", tc.method, k, got[k], len(got[k]), v, len(v))
			}
		}
		for _, k := range tc.absent {
			if _, ok := got[k]; ok {
				t.Errorf("%s: %s set, want absent", tc.method, k)
			}
		}
	}
}

// TestTraceLogHandler: a record logged in a span's context carries its
// trace_id and span_id; one logged outside any span carries neither.
func TestTraceLogHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(TraceLogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "x")
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "op")
	log.InfoContext(ctx, "inside")
	span.End()
	log.Info("outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var in, out map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &in)
	_ = json.Unmarshal([]byte(lines[1]), &out)
	sc := span.SpanContext()
	if in["trace_id"] != sc.TraceID().String() || in["span_id"] != sc.SpanID().String() || in["component"] != "x" {
		t.Errorf("inside a span: %v, want trace_id %s span_id %s", in, sc.TraceID(), sc.SpanID())
	}
	if _, ok := out["trace_id"]; ok {
		t.Errorf("outside a span: %v carries a trace_id", out)
	}
}
