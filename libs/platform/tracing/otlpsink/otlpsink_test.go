package otlpsink

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/configsync/configsync/libs/platform/tracing"
)

// TestSinkReceivesWhatTheExporterSends: spans exported by the real OTLP/HTTP exporter (gzip on)
// arrive with their service, names and parentage.
func TestSinkReceivesWhatTheExporterSends(t *testing.T) {
	s, err := Start("127.0.0.1:0", true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(s.Endpoint()+"/v1/traces"), otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	if err != nil {
		t.Fatal(err)
	}
	tp := tracing.NewProvider("sink-test", "v0", 1, sdktrace.WithSyncer(exp))
	ctx, parent := tp.Tracer("t").Start(context.Background(), "parent")
	_, child := tp.Tracer("t").Start(ctx, "child")
	child.End()
	parent.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := s.Spans(parent.SpanContext().TraceID().String())
	if len(spans) != 2 || s.Received() != 2 {
		t.Fatalf("received %d, kept %+v", s.Received(), spans)
	}
	byName := map[string]Span{}
	for _, sp := range spans {
		byName[sp.Name] = sp
	}
	if byName["child"].ParentID != parent.SpanContext().SpanID().String() || byName["parent"].Service != "sink-test" {
		t.Fatalf("spans %+v", byName)
	}
}
