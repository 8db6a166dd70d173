package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// serverSpans wraps h in the OpenTelemetry net/http instrumentation
// (otelhttp): the server span of every request, continuing a W3C
// traceparent, with the HTTP semantic-convention attributes
// (http.request.method, url.scheme, server.address, network.protocol.version,
// user_agent.original, http.response.status_code, error.type on 5xx). The
// span is named by the method alone until routeSpan, inside echo, names the
// route.
func serverSpans(h http.Handler, tp trace.TracerProvider) http.Handler {
	return otelhttp.NewHandler(h, "http.server", otelhttp.WithTracerProvider(tp),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }),
		otelhttp.WithPropagators(otel.GetTextMapPropagator()))
}

// routeSpan names the server span after the matched route template
// ("POST /v1/tool-calls"; an unmatched request keeps the method alone, so
// scanners cannot mint span names), sets http.route, the client address as
// clientIP decides (otelhttp would believe any X-Forwarded-For), and on a
// failure error.type (markError).
func (s *Server) routeSpan(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		span := trace.SpanFromContext(r.Context())
		span.SetAttributes(attribute.String("client.address", c.RealIP()))
		if route := c.Path(); s.routes[route] {
			span.SetName(r.Method + " " + route)
			span.SetAttributes(attribute.String("http.route", route))
		}
		err := next(c)
		if c.Response().Status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(c.Response().Status))
		}
		return err
	}
}

// markError sets error.type, the contract code, on the request's server
// span: every answer that carries an error passes here (errorHandler,
// writeAnswer).
func markError(c echo.Context, code wire.Code) {
	trace.SpanFromContext(c.Request().Context()).SetAttributes(attribute.String("error.type", string(code)))
}

// annotateMCP sets the MCP semantic-convention attributes of one JSON-RPC
// message on the span in ctx (the request's server span): mcp.method.name,
// mcp.session.id (when the session is known) and jsonrpc.request.id (for a
// request; a notification has none). The MCP endpoint calls it once per
// message, whatever serves the protocol.
// maxSpanText bounds a client-chosen string set as a span attribute, in
// bytes: the rest is cut (on a character boundary) and marked with "…".
const maxSpanText = 256

// spanText is s within maxSpanText.
func spanText(s string) string {
	if len(s) <= maxSpanText {
		return s
	}
	cut := maxSpanText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func annotateMCP(ctx context.Context, method, sessionID string, requestID json.RawMessage) {
	span := trace.SpanFromContext(ctx)
	attrs := []attribute.KeyValue{attribute.String("mcp.method.name", spanText(method))}
	if sessionID != "" {
		attrs = append(attrs, attribute.String("mcp.session.id", sessionID))
	}
	if id := rpcIDText(requestID); id != "" {
		attrs = append(attrs, attribute.String("jsonrpc.request.id", spanText(id)))
	}
	span.SetAttributes(attrs...)
}

// rpcIDText is a JSON-RPC id as text: a string's value, a number's digits;
// "" for none or null.
func rpcIDText(id json.RawMessage) string {
	var v any
	if len(id) == 0 || json.Unmarshal(id, &v) != nil || v == nil {
		return ""
	}
	if str, ok := v.(string); ok {
		return str
	}
	return string(id)
}

// TraceLogHandler wraps h so that every record logged with a context that
// carries a span has its trace_id and span_id, joining logs to traces.
func TraceLogHandler(h slog.Handler) slog.Handler { return traceLogHandler{h} }

type traceLogHandler struct{ slog.Handler }

func (h traceLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceLogHandler{h.Handler.WithAttrs(as)}
}

func (h traceLogHandler) WithGroup(name string) slog.Handler {
	return traceLogHandler{h.Handler.WithGroup(name)}
}

// metrics are the gateway's Prometheus series, registered on the server's own
// registry (no global state).
type metrics struct {
	requests         *prometheus.CounterVec
	requestDuration  *prometheus.HistogramVec
	calls            *prometheus.CounterVec
	duration         *prometheus.HistogramVec
	decisionDuration prometheus.Histogram
	evidenceFailures prometheus.Counter
	authFailures     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portcullis_http_requests_total", Help: "HTTP requests by method, route template (other: no route matched) and status code.",
		}, []string{"method", "route", "code"}),
		requestDuration: latency("portcullis_http_request_duration_seconds",
			"HTTP request latency by method and route template, until the answer is written.", "method", "route"),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portcullis_tool_calls_total", Help: "Tool calls by tool, decision and error code.",
		}, []string{"tool", "decision", "code"}),
		duration: latency("portcullis_tool_call_duration_seconds",
			"Wall time of tool calls, receipt to answer, by tool and decision (allow, deny, invalid).", "tool", "decision"),
		decisionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "portcullis_policy_decision_duration_seconds", Help: "Policy evaluation time.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 2, 16),
		}),
		evidenceFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portcullis_evidence_write_failures_total", Help: "Evidence writes that did not become durable.",
		}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portcullis_auth_failures_total", Help: "Requests whose credentials (API key, JWT, client certificate) were missing or refused.",
		}),
	}
	reg.MustRegister(m.requests, m.requestDuration, m.calls, m.duration, m.decisionDuration, m.evidenceFailures, m.authFailures)
	return m
}

// latency is a histogram of request or call latency, 0.5 ms to about
// 65 s, by labels.
func latency(name, help string, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
	}, labels)
}

// lateCollector exposes evidence.LateOutcomes.Counts as
// portcullis_evidence_late_outcomes_total{result}.
type lateCollector struct {
	l    *evidence.LateOutcomes
	desc *prometheus.Desc
}

func newLateCollector(l *evidence.LateOutcomes) *lateCollector {
	return &lateCollector{l: l, desc: prometheus.NewDesc("portcullis_evidence_late_outcomes_total",
		"Outcomes recorded after their first write failed, by result: recorded, already_recorded, no_decision (the refused call's decision never committed), refused (the store refused it 3 times), overflow (queue full: left to the next start), replayed (loaded from the spool at start), spool_error and spool_overflow (could not be spooled: kept in memory only).",
		[]string{"result"}, nil)}
}

func (c *lateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *lateCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.l.Counts()
	for _, r := range evidence.LateResults {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(counts[r]), r)
	}
}

// observeRequest counts a request and its latency under its route
// template; a request no route matched counts as "other", so scanners
// cannot mint series.
func (s *Server) observeRequest(c echo.Context, took time.Duration) {
	route := c.Path()
	if !s.routes[route] {
		route = "other"
	}
	method := c.Request().Method
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
	default:
		method = "other"
	}
	s.metrics.requests.WithLabelValues(method, route, strconv.Itoa(c.Response().Status)).Inc()
	s.metrics.requestDuration.WithLabelValues(method, route).Observe(took.Seconds())
}
