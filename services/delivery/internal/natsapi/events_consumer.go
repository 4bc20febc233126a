package natsapi

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/jsconsumer"
	"github.com/configsync/configsync/libs/platform/tracing"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/delivery/internal/deliver"
)

// PushDurable is the durable consumer every delivery replica binds to, so JetStream hands each
// config-change event to one of them.
const PushDurable = "configsync-delivery-push"

// EventOptions tune the consumer of config-change events.
type EventOptions struct {
	// Concurrency is how many events one instance fans out at the same time.
	Concurrency int
	// AckWait is how long JetStream waits before redelivering an event nobody settled; a running
	// fan-out extends it (InProgress) every AckWait/3, so only a crashed one is redone.
	AckWait time.Duration
	// RetryDelay is the first redelivery delay of a failed fan-out, doubling up to MaxRetryDelay.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// PullWait is how long one pull request waits for an event before it is renewed.
	PullWait time.Duration
	// Observer, when set, is told about every fan-out (metrics).
	Observer jsconsumer.Observer
}

// EventConsumer consumes config-change events (a libs/platform/jsconsumer consumer pulling one event
// per free worker) and fans each out with the Pusher. An event is acked only after its fan-out ran, so
// a crash mid-fan-out redoes it.
type EventConsumer struct {
	pusher *deliver.Pusher
	log    *zap.Logger
	cons   *jsconsumer.Consumer
}

// NewEventConsumer returns a consumer on js fanning events out with pusher.
func NewEventConsumer(js jetstream.JetStream, pusher *deliver.Pusher, opts EventOptions, log *zap.Logger) *EventConsumer {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.AckWait <= 0 {
		opts.AckWait = time.Minute
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = time.Second
	}
	if opts.MaxRetryDelay < opts.RetryDelay {
		opts.MaxRetryDelay = max(time.Minute, opts.RetryDelay)
	}
	c := &EventConsumer{pusher: pusher, log: log}
	c.cons = jsconsumer.New(js, jsconsumer.Config{
		Stream: protocol.EventsStream,
		Consumer: jetstream.ConsumerConfig{
			Durable:       PushDurable,
			Description:   "delivery: fan config-change events out to online agents",
			FilterSubject: protocol.ConfigChangedSubject,
			// Room for every replica's workers; JetStream stops handing out events beyond it.
			MaxAckPending: 256,
		},
		// One event per free worker: none waits in a client buffer while the fan-outs run.
		Workers:        opts.Concurrency,
		Batch:          1,
		PullWait:       opts.PullWait,
		AckWait:        opts.AckWait,
		KeepInProgress: true,
		DoubleAck:      true,
		RetryDelay:     opts.RetryDelay,
		MaxRetryDelay:  opts.MaxRetryDelay,
		Started: func() {
			log.Info("event consumer started", zap.String("stream", protocol.EventsStream), zap.Int("concurrency", opts.Concurrency))
		},
		Stopped:  func() { log.Info("event consumer stopped") },
		Observer: opts.Observer,
	}, c.handle, log)
	return c
}

// Start consumes in the background (creating the durable consumer, retrying while JetStream is
// unavailable); it does not block.
func (c *EventConsumer) Start() { c.cons.Start() }

// Stop stops taking events and waits for running fan-outs until ctx is done; then they are cancelled
// and their events redelivered (to another replica, or after a restart).
func (c *EventConsumer) Stop(ctx context.Context) error { return c.cons.Stop(ctx) }

// Ready reports whether the consumer is receiving events.
func (c *EventConsumer) Ready(context.Context) error {
	if !c.cons.Running() {
		return errors.New("config-change consumer is not running")
	}
	return nil
}

// handle fans one event out and says how to settle it: ack after the fan-out, terminate an unusable
// event, redeliver later after a failure.
func (c *EventConsumer) handle(ctx context.Context, msgs []jetstream.Msg) []jsconsumer.Outcome {
	outcomes := make([]jsconsumer.Outcome, len(msgs))
	for i, msg := range msgs {
		outcomes[i] = c.handleEvent(ctx, msg)
	}
	return outcomes
}

var tracer = tracing.Tracer("github.com/configsync/configsync/services/delivery")

func (c *EventConsumer) handleEvent(ctx context.Context, msg jetstream.Msg) jsconsumer.Outcome {
	ev, err := decodeConfigChanged(msg.Data())
	if err != nil {
		fields := []zap.Field{zap.String("subject", msg.Subject()), zap.Int("bytes", len(msg.Data())), zap.Error(err)}
		if meta, merr := msg.Metadata(); merr == nil {
			fields = append(fields, zap.Uint64("stream_seq", meta.Sequence.Stream))
		}
		c.log.Warn("malformed config-change event terminated", fields...)
		return jsconsumer.Terminate("malformed")
	}
	start := time.Now()
	// The event carries the trace of the write that produced it (outbox relay); the push continues it.
	ctx, span := tracer.Start(tracing.Extract(ctx, msg.Headers()), "delivery.push", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("config_type", ev.ConfigType), attribute.Int64("version", ev.Version)))
	defer span.End()
	res, err := c.pusher.Push(ctx, ev)
	span.SetAttributes(attribute.Int("hosts", res.Hosts), attribute.Int("published", res.Published))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	fields := append(eventFields(ev), zap.Int("pages", res.Pages), zap.Int("hosts", res.Hosts),
		zap.Int("published", res.Published), zap.Int("skipped_credentials", res.SkippedCredentials), zap.Int("skipped_too_large", res.SkippedTooLarge),
		zap.Int("publish_failed", res.FailedPublish), zap.Duration("took", time.Since(start)))
	switch {
	case err == nil:
		c.log.Info("push done", fields...)
		return jsconsumer.Ack
	case errors.Is(err, deliver.ErrInvalidRequest):
		c.log.Warn("push refused, event terminated", append(fields, zap.Error(err))...)
		return jsconsumer.Terminate("invalid")
	default:
		c.log.Warn("push failed, will redo", append(fields, zap.Duration("retry_in", c.cons.RetryDelay(msg)), zap.Error(err))...)
		return jsconsumer.Retry
	}
}

func eventFields(ev protocol.ConfigChanged) []zap.Field {
	return []zap.Field{zap.String("event_id", ev.EventID), zap.String("scope", ev.Scope),
		zap.String("environment_id", ev.EnvironmentID), zap.String("host_id", ev.HostID),
		zap.String("config_type", ev.ConfigType), zap.Int64("version", ev.Version)}
}
