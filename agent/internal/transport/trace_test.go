package transport

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestTraceHeaders: an ack or fetch sent under a span carries its context under the exact key
// "traceparent"; a command's header gives the handler that context back; untraced messages get no
// header, and a malformed traceparent from the network is ignored.
func TestTraceHeaders(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(context.Background(), "config.apply")
	defer span.End()

	msg := traced(ctx, &nats.Msg{Subject: "s"})
	if len(msg.Header["traceparent"]) != 1 {
		t.Fatalf("headers %v, want traceparent", msg.Header)
	}
	got := trace.SpanContextFromContext(TraceContext(context.Background(), msg.Header))
	if got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() || !got.IsRemote() {
		t.Fatalf("extracted %v, want %v", got, span.SpanContext())
	}
	if plain := traced(context.Background(), &nats.Msg{Subject: "s"}); plain.Header != nil {
		t.Fatalf("untraced message got headers %v", plain.Header)
	}
	for _, bad := range []string{"garbage", "00-00000000000000000000000000000000-0000000000000000-01", "ff-" + got.TraceID().String() + "-" + got.SpanID().String() + "-01"} {
		if sc := trace.SpanContextFromContext(TraceContext(context.Background(), nats.Header{"traceparent": {bad}})); sc.IsValid() {
			t.Errorf("traceparent %q accepted as %v", bad, sc)
		}
	}
}
