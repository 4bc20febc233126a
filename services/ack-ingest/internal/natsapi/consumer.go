// Package natsapi connects ack-ingest to JetStream: durable pull consumers (shared by every replica)
// that hand batches of acks and heartbeats to the ingest use case and settle each message after the
// database commit.
package natsapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

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
}

func (o BatchOptions) withDefaults() BatchOptions {
	if o.BatchSize <= 0 {
		o.BatchSize = 1000
	}
	if o.BatchWait <= 0 {
		o.BatchWait = 5 * time.Millisecond
	}
	if o.Writers <= 0 {
		o.Writers = 2
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = time.Second
	}
	if o.MaxRetryDelay < o.RetryDelay {
		o.MaxRetryDelay = max(30*time.Second, o.RetryDelay)
	}
	return o
}

// batchConsumer runs one durable consumer: it keeps a buffer of messages pulled ahead and lets Writers
// goroutines each take up to BatchSize of them (waiting at most BatchWait) and process them as a batch.
type batchConsumer struct {
	js      jetstream.JetStream
	cfg     jetstream.ConsumerConfig
	stream  string
	opts    BatchOptions
	process func(ctx context.Context, msgs []jetstream.Msg)
	log     *zap.Logger
	running atomic.Bool
}

func newBatchConsumer(js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, opts BatchOptions,
	process func(ctx context.Context, msgs []jetstream.Msg), log *zap.Logger) *batchConsumer {
	opts = opts.withDefaults()
	cfg.AckPolicy = jetstream.AckExplicitPolicy
	cfg.AckWait = opts.AckWait
	cfg.MaxDeliver = -1
	cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	// Enough in flight for every writer to hold a batch while the next ones are pulled.
	cfg.MaxAckPending = opts.BatchSize * (opts.Writers + 2)
	return &batchConsumer{js: js, cfg: cfg, stream: stream, opts: opts, process: process,
		log: log.With(zap.String("consumer", cfg.Durable))}
}

// run consumes until ctx is done, then stops pulling, finishes the batches in hand (their writes use
// workCtx, so they can complete after ctx is cancelled) and returns.
func (c *batchConsumer) run(ctx, workCtx context.Context) error {
	cons, err := c.ensureConsumer(ctx)
	if err != nil {
		return err
	}
	buf := make(chan jetstream.Msg, c.opts.BatchSize)
	cc, err := cons.Consume(func(m jetstream.Msg) { buf <- m },
		jetstream.PullMaxMessages(c.opts.BatchSize*(c.opts.Writers+1)),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			c.log.Warn("consume error", zap.Error(err))
		}))
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.cfg.Durable, err)
	}
	c.running.Store(true)
	c.log.Info("consumer started", zap.String("stream", c.stream), zap.Int("batch_size", c.opts.BatchSize),
		zap.Int("writers", c.opts.Writers))

	var wg sync.WaitGroup
	for range c.opts.Writers {
		wg.Go(func() {
			for {
				batch := collect(buf, c.opts.BatchSize, c.opts.BatchWait)
				if batch == nil {
					return
				}
				c.process(workCtx, batch)
			}
		})
	}
	var ended error
	select {
	case <-ctx.Done():
	case <-cc.Closed(): // for example the consumer was deleted; the caller starts over
		ended = fmt.Errorf("consume %s: ended unexpectedly", c.cfg.Durable)
	}
	c.running.Store(false)
	cc.Drain() // buffered messages still reach the handler, hence buf, and are written
	<-cc.Closed()
	close(buf)
	wg.Wait()
	c.log.Info("consumer stopped")
	return ended
}

// runUntilDone runs the consumer until ctx is done, starting over after unexpected ends.
func (c *batchConsumer) runUntilDone(ctx, workCtx context.Context) {
	for {
		err := c.run(ctx, workCtx)
		if ctx.Err() != nil {
			return
		}
		c.log.Error("consumer ended, restarting", zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// ensureConsumer creates or updates the durable consumer, retrying while JetStream is unavailable.
func (c *batchConsumer) ensureConsumer(ctx context.Context) (jetstream.Consumer, error) {
	delay := 250 * time.Millisecond
	for {
		cons, err := c.js.CreateOrUpdateConsumer(ctx, c.stream, c.cfg)
		if err == nil {
			return cons, nil
		}
		c.log.Warn("create consumer failed, retrying", zap.String("stream", c.stream), zap.Error(err))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("create consumer %s: %w", c.cfg.Durable, errors.Join(ctx.Err(), err))
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// collect takes one message (blocking) and then up to max-1 more, waiting at most wait for them. It
// returns nil once buf is closed and empty.
func collect(buf <-chan jetstream.Msg, limit int, wait time.Duration) []jetstream.Msg {
	first, ok := <-buf
	if !ok {
		return nil
	}
	batch := make([]jetstream.Msg, 1, limit)
	batch[0] = first
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(batch) < limit {
		select {
		case m, ok := <-buf:
			if !ok {
				return batch
			}
			batch = append(batch, m)
		case <-timer.C:
			return batch
		}
	}
	return batch
}

// settle acknowledges, redelivers later or terminates msg according to o.
func (c *batchConsumer) settle(msg jetstream.Msg, o ingest.Outcome) {
	var err error
	switch o {
	case ingest.Done:
		err = msg.Ack()
	case ingest.Drop:
		err = msg.TermWithReason("rejected")
	case ingest.Retry:
		err = msg.NakWithDelay(c.retryDelay(msg))
	}
	if err != nil {
		c.log.Warn("settling message failed; JetStream will redeliver it", zap.Stringer("outcome", o), zap.Error(err))
	}
}

// terminate drops a malformed message for good, logging why but never its payload.
func (c *batchConsumer) terminate(msg jetstream.Msg, cause error) {
	fields := []zap.Field{zap.String("subject", msg.Subject()), zap.Int("bytes", len(msg.Data())), zap.Error(cause)}
	if meta, err := msg.Metadata(); err == nil {
		fields = append(fields, zap.Uint64("stream_seq", meta.Sequence.Stream))
	}
	c.log.Warn("malformed message terminated", fields...)
	if err := msg.TermWithReason("malformed"); err != nil {
		c.log.Warn("terminating message failed", zap.Error(err))
	}
}

func (c *batchConsumer) retryDelay(msg jetstream.Msg) time.Duration {
	d := c.opts.RetryDelay
	if meta, err := msg.Metadata(); err == nil {
		for n := uint64(1); n < meta.NumDelivered && d < c.opts.MaxRetryDelay; n++ {
			d *= 2
		}
	}
	return min(d, c.opts.MaxRetryDelay)
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
