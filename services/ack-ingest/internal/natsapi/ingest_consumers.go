package natsapi

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/jsconsumer"
	"github.com/configsync/configsync/libs/platform/tracing"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
)

// Durable consumer names. Every replica binds to the same durable, so JetStream splits the messages
// between them.
const (
	AcksDurable       = "configsync-ack-ingest-acks"
	HeartbeatsDurable = protocol.HeartbeatsIngestDurable
)

// Consumers runs the acks and heartbeats consumers.
type Consumers struct {
	acks       *jsconsumer.Consumer
	heartbeats *jsconsumer.Consumer
	ingester   *ingest.Ingester
	log        *zap.Logger
}

// NewConsumers returns the consumers of acks and heartbeats, both writing through ingester.
func NewConsumers(js jetstream.JetStream, ingester *ingest.Ingester, opts BatchOptions, log *zap.Logger) *Consumers {
	c := &Consumers{ingester: ingester, log: log}
	c.acks = jsconsumer.New(js, opts.consumerConfig(protocol.AcksStream, jetstream.ConsumerConfig{
		Durable:       AcksDurable,
		Description:   "ack-ingest: apply acknowledgements into host_config_apply_status",
		FilterSubject: protocol.AckSubjectAll,
	}), c.processAcks, log)
	c.heartbeats = jsconsumer.New(js, opts.consumerConfig(protocol.HeartbeatsStream, jetstream.ConsumerConfig{
		Durable:       HeartbeatsDurable,
		Description:   "ack-ingest: heartbeats into the hosts table",
		FilterSubject: protocol.HeartbeatSubjectAll,
	}), c.processHeartbeats, log)
	return c
}

// Start begins consuming in the background; it does not block.
func (c *Consumers) Start() {
	c.acks.Start()
	c.heartbeats.Start()
}

// Stop stops pulling, waits for the batches in hand to be written and settled, and returns. If ctx ends
// first, in-flight writes are cancelled (their messages are redelivered after the ack wait).
func (c *Consumers) Stop(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- c.heartbeats.Stop(ctx) }()
	return errors.Join(c.acks.Stop(ctx), <-errc)
}

// Ready reports whether both consumers are pulling messages.
func (c *Consumers) Ready(context.Context) error {
	if !c.acks.Running() || !c.heartbeats.Running() {
		return errors.New("ack-ingest consumers are not running")
	}
	return nil
}

var tracer = tracing.Tracer("github.com/configsync/configsync/services/ack-ingest")

func (c *Consumers) processAcks(ctx context.Context, msgs []jetstream.Msg) []jsconsumer.Outcome {
	outcomes := make([]jsconsumer.Outcome, len(msgs))
	acks := make([]ingest.Ack, 0, len(msgs))
	kept := make([]int, 0, len(msgs)) // acks[k] came from msgs[kept[k]]
	var spans []trace.Span            // one per traced ack, ended when its batch is written
	for i, m := range msgs {
		a, err := decodeAck(m.Subject(), m.Data(), storedAt(m))
		if err != nil {
			outcomes[i] = c.malformed(m, err)
			continue
		}
		a.Seq = streamSeq(m)
		acks = append(acks, a)
		kept = append(kept, i)
		if h := m.Headers(); len(h) > 0 {
			// The agent's apply span is the parent; the backend's sampler decides again by its own
			// ratio (tracing.Sampler), so an agent cannot make ack-ingest record more.
			_, span := tracer.Start(tracing.Extract(ctx, h), "ack.ingest", trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(attribute.String("config_type", a.ConfigType), attribute.Int64("version", a.Version), attribute.String("status", a.Status)))
			spans = append(spans, span)
		}
	}
	for k, o := range c.ingester.IngestAcks(ctx, acks) {
		outcomes[kept[k]] = outcome(o)
	}
	for _, s := range spans {
		s.SetAttributes(attribute.Int("batch", len(acks)))
		s.End()
	}
	return outcomes
}

func (c *Consumers) processHeartbeats(ctx context.Context, msgs []jetstream.Msg) []jsconsumer.Outcome {
	outcomes := make([]jsconsumer.Outcome, len(msgs))
	beats := make([]ingest.Heartbeat, 0, len(msgs))
	kept := make([]int, 0, len(msgs))
	for i, m := range msgs {
		h, err := decodeHeartbeat(m.Subject(), m.Data(), storedAt(m))
		if err != nil {
			outcomes[i] = c.malformed(m, err)
			continue
		}
		beats = append(beats, h)
		kept = append(kept, i)
	}
	for k, o := range c.ingester.IngestHeartbeats(ctx, beats) {
		outcomes[kept[k]] = outcome(o)
	}
	return outcomes
}

// malformed drops a message that can never be ingested, logging why but never its payload.
func (c *Consumers) malformed(msg jetstream.Msg, cause error) jsconsumer.Outcome {
	fields := []zap.Field{zap.String("subject", msg.Subject()), zap.Int("bytes", len(msg.Data())), zap.Error(cause)}
	if meta, err := msg.Metadata(); err == nil {
		fields = append(fields, zap.Uint64("stream_seq", meta.Sequence.Stream))
	}
	c.log.Warn("malformed message terminated", fields...)
	return jsconsumer.Terminate("malformed")
}
