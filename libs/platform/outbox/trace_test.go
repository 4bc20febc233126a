package outbox

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/configsync/configsync/libs/platform/tracing"
	"github.com/configsync/configsync/libs/protocol"
)

// TestTraceContextTravelsFromTheRowToTheMessage: a row written under a sampled span stores its
// traceparent; the relay publishes it inside an outbox.publish span of the same trace, whose context
// the JetStream message carries under the exact header key "traceparent". A row written without a
// span carries no header.
func TestTraceContextTravelsFromTheRowToTheMessage(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tracing.Sampler(1)), sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	e := setup(t)
	r := NewRelay(e.pool, e.js, e.log, RelayOptions{})
	ctx, write := tp.Tracer("test").Start(context.Background(), "PUT")
	for _, c := range []context.Context{ctx, context.Background()} {
		if err := pgx.BeginFunc(c, e.pool, func(tx pgx.Tx) error {
			_, err := Insert(c, tx, protocol.ConfigChangedSubject, map[string]int{"seq": 1})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	write.End()
	var stored int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE traceparent = $1`, tracing.Traceparent(ctx)).Scan(&stored); err != nil || stored != 1 {
		t.Fatalf("%d rows hold the write's traceparent (%v), want 1", stored, err)
	}
	relayOnce(t, r, 2)
	st, err := e.js.Stream(context.Background(), protocol.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	traced, err := st.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	remote := trace.SpanContextFromContext(tracing.Extract(context.Background(), traced.Header))
	if remote.TraceID() != write.SpanContext().TraceID() || len(traced.Header["traceparent"]) != 1 {
		t.Fatalf("message headers %v, want the write's trace %s", traced.Header, write.SpanContext().TraceID())
	}
	var publish sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "outbox.publish" {
			publish = s
		}
	}
	if publish == nil || publish.Parent().SpanID() != write.SpanContext().SpanID() || publish.SpanContext().SpanID() != remote.SpanID() {
		t.Fatalf("outbox.publish span %v: want a child of the write whose context the message carries", publish)
	}
	plain, err := st.GetMsg(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.Header["traceparent"]; ok {
		t.Fatalf("an untraced row was published with %v", plain.Header)
	}
}
