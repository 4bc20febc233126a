// Package natsapi connects ack-ingest to JetStream: durable pull consumers (libs/platform/jsconsumer,
// shared by every replica) that pull acks and heartbeats in large batches, decode them, hand each batch
// to the ingest use case and settle each message with the outcome it chose, after the database commit.
package natsapi

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/configsync/configsync/libs/platform/jsconsumer"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
)

// BatchOptions tune how a consumer batches its writes.
type BatchOptions struct {
	// BatchSize is the most messages written in one database statement.
	BatchSize int
	// BatchWait is how long a writer waits for a batch to fill once it holds one message.
	BatchWait time.Duration
	// Writers is how many batches are written concurrently.
	Writers int
	// AckWait is how long JetStream waits for a settlement before redelivering.
	AckWait time.Duration
	// RetryDelay is the first redelivery delay after a database error; it doubles per delivery up to
	// MaxRetryDelay.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// Observer, when set, is told about every batch and settlement (metrics).
	Observer jsconsumer.Observer
}

// consumerConfig is the jsconsumer configuration of one batched consumer: jsconsumer fetches BatchSize
// messages at a time, back to back, and each writer takes up to BatchSize of them per statement.
// Only the batch size and the writers have defaults of ack-ingest's own; jsconsumer defaults the rest,
// MaxAckPending included (BatchSize*(Writers+2): enough in flight for every writer to hold a batch
// while the next ones are pulled).
func (o BatchOptions) consumerConfig(stream string, cfg jetstream.ConsumerConfig) jsconsumer.Config {
	if o.BatchSize <= 0 {
		o.BatchSize = 1000
	}
	if o.Writers <= 0 {
		o.Writers = 2
	}
	return jsconsumer.Config{
		Stream:        stream,
		Consumer:      cfg,
		Workers:       o.Writers,
		Batch:         o.BatchSize,
		BatchWait:     o.BatchWait,
		AckWait:       o.AckWait,
		RetryDelay:    o.RetryDelay,
		MaxRetryDelay: o.MaxRetryDelay,
		Observer:      o.Observer,
	}
}

// outcome is how the transport settles a message ingest decided about.
func outcome(o ingest.Outcome) jsconsumer.Outcome {
	switch o {
	case ingest.Done:
		return jsconsumer.Ack
	case ingest.Drop:
		return jsconsumer.Terminate("rejected")
	default:
		return jsconsumer.Retry
	}
}

// streamSeq is msg's sequence in its stream (0 if the metadata is unreadable).
func streamSeq(msg jetstream.Msg) uint64 {
	if meta, err := msg.Metadata(); err == nil {
		return meta.Sequence.Stream
	}
	return 0
}

// storedAt is when the stream stored msg (server time); now if the metadata is unreadable.
func storedAt(msg jetstream.Msg) time.Time {
	if meta, err := msg.Metadata(); err == nil && !meta.Timestamp.IsZero() {
		return meta.Timestamp
	}
	return time.Now()
}
