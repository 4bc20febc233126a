// Package tracing is the services' OpenTelemetry setup and the few helpers that carry one trace from an
// operator's write to the last ack: over the outbox row (a stored traceparent), JetStream and NATS
// message headers (protocol.HeaderCarrier, case-sensitive keys).
//
// Export is OTLP over HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set and off otherwise: the global
// provider stays OpenTelemetry's no-op, so spans cost a few nanoseconds and nothing is injected into
// messages. Sampling is by trace-id ratio (CONFIGSYNC_TRACE_SAMPLE_RATIO, default 0.1) and parent-based
// for local parents. A remote parent (a trace context read from a message or the outbox) never decides
// by its sampled flag: Sampler applies the same ratio to the trace id again. For a trace the backend
// started that is the decision the root made (same id, same ratio), so the backend's spans of one
// trace are all kept or all dropped; for a trace an agent started (a fetch, or an ack whose flag the
// agent set) the agent's choice cannot make the backend sample more than its own ratio.
package tracing

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/configsync/configsync/libs/protocol"
)

// Environment variables.
const (
	EnvEndpoint    = "OTEL_EXPORTER_OTLP_ENDPOINT" // also read by otlptracehttp itself
	EnvSampleRatio = "CONFIGSYNC_TRACE_SAMPLE_RATIO"
)

// DefaultSampleRatio is the share of traces kept when CONFIGSYNC_TRACE_SAMPLE_RATIO is not set.
const DefaultSampleRatio = 0.1

// propagator is W3C trace context only: baggage is not carried.
var propagator = propagation.TraceContext{}

// Sampler keeps ratio of traces by trace id, follows a local parent, and decides again by ratio under a
// remote parent (see the package doc).
func Sampler(ratio float64) sdktrace.Sampler {
	r := sdktrace.TraceIDRatioBased(ratio)
	return sdktrace.ParentBased(r, sdktrace.WithRemoteParentSampled(r), sdktrace.WithRemoteParentNotSampled(r))
}

// SampleRatio reads CONFIGSYNC_TRACE_SAMPLE_RATIO (DefaultSampleRatio when unset).
func SampleRatio() (float64, error) {
	v := os.Getenv(EnvSampleRatio)
	if v == "" {
		return DefaultSampleRatio, nil
	}
	r, err := strconv.ParseFloat(v, 64)
	if err != nil || r < 0 || r > 1 {
		return 0, fmt.Errorf("tracing: %s must be a number from 0 to 1, not %q", EnvSampleRatio, v)
	}
	return r, nil
}

// Setup installs the process's tracer provider when OTEL_EXPORTER_OTLP_ENDPOINT is set (OTLP/HTTP,
// batched) and returns its shutdown, which flushes what is buffered. Without the variable it installs
// nothing and returns a no-op shutdown.
func Setup(ctx context.Context, service, version string) (func(context.Context) error, error) {
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	ratio, err := SampleRatio()
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	tp := NewProvider(service, version, ratio, sdktrace.WithBatcher(exp))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// NewProvider returns a provider for service with Sampler(ratio) and opts (exporters, processors).
func NewProvider(service, version string, ratio float64, opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	res := resource.NewSchemaless(attribute.String("service.name", service), attribute.String("service.version", version))
	return sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithSampler(Sampler(ratio)), sdktrace.WithResource(res)}, opts...)...)
}

// Enabled reports whether OTEL_EXPORTER_OTLP_ENDPOINT turns export on.
func Enabled() bool { return os.Getenv(EnvEndpoint) != "" }

// Tracer is the named tracer of the global provider (a no-op until Setup or a test installs one).
func Tracer(name string) trace.Tracer { return otel.Tracer(name) }

// Inject writes ctx's span context into msg's headers; it writes nothing (and allocates no header)
// when ctx carries no valid span context, which is always the case while tracing is off.
func Inject(ctx context.Context, msg *nats.Msg) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	propagator.Inject(ctx, protocol.HeaderCarrier(msg.Header))
}

// Extract returns ctx with the remote span context carried by h, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, protocol.HeaderCarrier(h))
}

// Traceparent is ctx's span context as a W3C traceparent value ("" when none), for storing with a row.
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c.Get("traceparent")
}

// FromTraceparent returns ctx with the remote span context of a stored traceparent ("" or malformed:
// ctx unchanged).
func FromTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}
