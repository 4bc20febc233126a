package tracing

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// TestHeaderCarrierSurvivesNATS: a trace context injected into a message's headers crosses a real
// nats-server under the exact key "traceparent" and is extracted on the other side; OTel's HTTP carrier
// would have looked it up as "Traceparent" and found nothing.
func TestHeaderCarrierSurvivesNATS(t *testing.T) {
	srv := testinfra.NATS(t, testinfra.WithoutJetStream())
	nc := srv.Connect(t)
	sub, err := nc.SubscribeSync("trace.test")
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	ctx, span := tp.Tracer("test").Start(context.Background(), "publish")
	defer span.End()

	msg := &nats.Msg{Subject: "trace.test", Data: []byte("x")}
	Inject(ctx, msg)
	if err := nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	got, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Header["traceparent"]; !ok {
		t.Fatalf("received headers %v, want the exact key traceparent", got.Header)
	}
	remote := trace.SpanContextFromContext(Extract(context.Background(), got.Header))
	if !remote.IsRemote() || remote.TraceID() != span.SpanContext().TraceID() || remote.SpanID() != span.SpanContext().SpanID() || !remote.IsSampled() {
		t.Fatalf("extracted %v, want the publisher's span %v", remote, span.SpanContext())
	}
	if v := (propagation.HeaderCarrier(http.Header(got.Header))).Get("traceparent"); v != "" {
		t.Fatalf("the HTTP carrier found %q; this test no longer shows why the NATS carrier exists", v)
	}
	keys := protocol.HeaderCarrier(got.Header).Keys()
	if len(keys) != 1 || keys[0] != "traceparent" {
		t.Fatalf("keys %v", keys)
	}

	// Without a span context nothing is written, not even an empty header.
	plain := &nats.Msg{Subject: "trace.test"}
	Inject(context.Background(), plain)
	if plain.Header != nil {
		t.Fatalf("header %v written without a span", plain.Header)
	}
	if Traceparent(context.Background()) != "" || Extract(context.Background(), nil) != context.Background() {
		t.Fatal("no span context must round-trip as nothing")
	}
	stored := Traceparent(ctx)
	if back := trace.SpanContextFromContext(FromTraceparent(context.Background(), stored)); back.TraceID() != span.SpanContext().TraceID() {
		t.Fatalf("stored traceparent %q came back as %v", stored, back)
	}
}

// TestSamplerDecidesRemoteParentsByItsOwnRatio: under a remote parent the backend's decision follows
// its ratio and the trace id, never the parent's flag; for a trace a backend root started it is the
// same decision as the root's, and local children follow their parent.
func TestSamplerDecidesRemoteParentsByItsOwnRatio(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	for _, tc := range []struct {
		name    string
		ratio   float64
		flags   trace.TraceFlags
		sampled bool
	}{
		{"agent sampled, backend ratio 0", 0, trace.FlagsSampled, false},
		{"agent not sampled, backend ratio 1", 1, 0, true},
		{"agent sampled, backend ratio 1", 1, trace.FlagsSampled, true},
	} {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(Sampler(tc.ratio)), sdktrace.WithSpanProcessor(rec))
		parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4}, TraceFlags: tc.flags, Remote: true})
		ctx, span := tp.Tracer("t").Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "child")
		if span.SpanContext().IsSampled() != tc.sampled || span.SpanContext().TraceID() != parent.TraceID() {
			t.Errorf("%s: sampled %v (trace %s), want %v in the parent's trace", tc.name, span.SpanContext().IsSampled(), span.SpanContext().TraceID(), tc.sampled)
		}
		_, local := tp.Tracer("t").Start(ctx, "grandchild")
		if local.SpanContext().IsSampled() != tc.sampled {
			t.Errorf("%s: a local child decided differently from its parent", tc.name)
		}
		local.End()
		span.End()
	}
	// Same ratio, same trace id: a root and a remote child of it decide alike, at any ratio.
	for _, ratio := range []float64{0.25, 0.5, 0.75} {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(Sampler(ratio)))
		kept := 0
		for i := 0; i < 200; i++ {
			_, root := tp.Tracer("t").Start(context.Background(), "root")
			remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: root.SpanContext().TraceID(), SpanID: trace.SpanID{9}, TraceFlags: root.SpanContext().TraceFlags(), Remote: true})
			_, child := tp.Tracer("t").Start(trace.ContextWithRemoteSpanContext(context.Background(), remote), "child")
			if child.SpanContext().IsSampled() != root.SpanContext().IsSampled() {
				t.Fatalf("ratio %v: the remote child of a root decided differently", ratio)
			}
			if root.SpanContext().IsSampled() {
				kept++
			}
		}
		if kept == 0 || kept == 200 {
			t.Fatalf("ratio %v kept %d of 200 roots", ratio, kept)
		}
	}
}
