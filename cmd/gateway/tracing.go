package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// setupTracing installs the global tracer provider (the one global the house
// allows). With no exporter configured through the standard OTEL_* variables,
// spans are not sampled and nothing is exported, but trace ids still exist so
// receipts can name the trace a caller's traceparent started.
//
// OTEL_SDK_DISABLED=true turns the SDK off, as the specification says:
// no provider is installed (spans are no-ops), so a receipt names a trace
// only when its caller sent a traceparent.
func setupTracing(ctx context.Context, log *slog.Logger) (func(), error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if sdkDisabled() {
		log.Info("OpenTelemetry SDK disabled (OTEL_SDK_DISABLED=true): no spans are recorded or exported")
		return func() {}, nil
	}
	res := resource.NewSchemaless(semconv.ServiceName(envOr("OTEL_SERVICE_NAME", "portcullis-gateway")))
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if exporterConfigured() {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("OpenTelemetry exporter from OTEL_* variables: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
		log.Info("tracing enabled", "exporter", envOr("OTEL_TRACES_EXPORTER", "otlp"))
	} else {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	}, nil
}

func exporterConfigured() bool {
	switch os.Getenv("OTEL_TRACES_EXPORTER") {
	case "none":
		return false
	case "":
		return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	}
	return true
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// sdkDisabled is OTEL_SDK_DISABLED, case-insensitive "true" only (the
// specification's boolean: anything else is false).
func sdkDisabled() bool {
	return strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true")
}
