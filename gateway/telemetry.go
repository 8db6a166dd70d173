package gateway

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/portcullis/portcullis/evidence"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// trace opens the server span of each request, continuing a W3C traceparent
// sent by the caller.
func (s *Server) trace(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		ctx, span := s.tracer.Start(ctx, fmt.Sprintf("%s %s", r.Method, route),
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(
				attribute.String("http.request.method", r.Method),
				attribute.String("http.route", route),
				attribute.String("url.path", r.URL.Path),
				attribute.String("client.address", c.RealIP()),
			))
		defer span.End()
		c.SetRequest(r.WithContext(ctx))
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		status := c.Response().Status
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= http.StatusInternalServerError {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		return nil
	}
}

// metrics are the gateway's Prometheus series, registered on the server's own
// registry (no global state).
type metrics struct {
	calls            *prometheus.CounterVec
	duration         *prometheus.HistogramVec
	decisionDuration prometheus.Histogram
	evidenceFailures prometheus.Counter
	authFailures     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portcullis_tool_calls_total", Help: "Tool calls by tool, decision and error code.",
		}, []string{"tool", "decision", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "portcullis_tool_call_duration_seconds", Help: "Wall time of allowed tool calls, receipt to answer.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"tool"}),
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
	reg.MustRegister(m.calls, m.duration, m.decisionDuration, m.evidenceFailures, m.authFailures)
	return m
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
