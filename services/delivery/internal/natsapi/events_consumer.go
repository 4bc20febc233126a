package natsapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

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
}

// EventConsumer consumes config-change events and fans each out with the Pusher. An event is acked
// only after its fan-out ran, so a crash mid-fan-out redoes it.
type EventConsumer struct {
	js     jetstream.JetStream
	pusher *deliver.Pusher
	opts   EventOptions
	log    *zap.Logger

	running atomic.Bool
	mu      sync.Mutex
	cancel  context.CancelFunc
	stopWk  context.CancelFunc
	done    chan struct{}
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
	if opts.PullWait <= 0 {
		opts.PullWait = 30 * time.Second
	}
	if opts.MaxRetryDelay < opts.RetryDelay {
		opts.MaxRetryDelay = max(time.Minute, opts.RetryDelay)
	}
	return &EventConsumer{js: js, pusher: pusher, opts: opts, log: log}
}

// Start consumes in the background (creating the durable consumer, retrying while JetStream is
// unavailable); it does not block.
func (c *EventConsumer) Start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	workCtx, stopWork := context.WithCancel(context.Background())
	c.cancel, c.stopWk, c.done = cancel, stopWork, make(chan struct{})
	go func() {
		defer close(c.done)
		for {
			err := c.run(ctx, workCtx)
			if ctx.Err() != nil {
				return
			}
			c.log.Error("event consumer ended, restarting", zap.Error(err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
}

// Stop stops taking events and waits for running fan-outs until ctx is done; then they are cancelled
// and their events redelivered (to another replica, or after a restart).
func (c *EventConsumer) Stop(ctx context.Context) error {
	c.mu.Lock()
	cancel, stopWork, done := c.cancel, c.stopWk, c.done
	c.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	defer stopWork()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		stopWork()
		<-done
		return ctx.Err()
	}
}

// Ready reports whether the consumer is receiving events.
func (c *EventConsumer) Ready(context.Context) error {
	if !c.running.Load() {
		return errors.New("config-change consumer is not running")
	}
	return nil
}

func (c *EventConsumer) run(ctx, workCtx context.Context) error {
	cons, err := c.ensureConsumer(ctx)
	if err != nil {
		return err
	}
	// Each worker pulls one event only when it is free, so no event waits in a client buffer,
	// aging towards its ack wait without InProgress, while the workers are busy. One pull request
	// per event (rather than a Consume stream with a batch of one) also keeps a worker from waiting
	// on a pull that the client library forgot to renew.
	pullCtx, stopPulling := context.WithCancel(ctx)
	defer stopPulling()
	var (
		wg      sync.WaitGroup
		endOnce sync.Once
		ended   error
	)
	c.running.Store(true)
	c.log.Info("event consumer started", zap.String("stream", protocol.EventsStream), zap.Int("concurrency", c.opts.Concurrency))
	for range c.opts.Concurrency {
		wg.Go(func() {
			if err := c.pullLoop(pullCtx, workCtx, cons); err != nil {
				endOnce.Do(func() { ended = err })
				stopPulling()
			}
		})
	}
	wg.Wait()
	c.running.Store(false)
	c.log.Info("event consumer stopped")
	return ended
}

// pullLoop pulls and handles one event at a time until ctx is done. It returns an error only when
// the durable consumer is gone and must be created again.
func (c *EventConsumer) pullLoop(ctx, workCtx context.Context, cons jetstream.Consumer) error {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, c.opts.PullWait)
		msg, err := cons.Next(jetstream.FetchContext(pctx))
		cancel()
		switch {
		case err == nil:
			delay = 100 * time.Millisecond
			c.handle(workCtx, msg)
			continue
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
			delay = 100 * time.Millisecond
			continue
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
			return fmt.Errorf("pull from %s: %w", PushDurable, err)
		}
		c.log.Warn("pulling an event failed, retrying", zap.Duration("retry_in", delay), zap.Error(err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
	return nil
}

func (c *EventConsumer) ensureConsumer(ctx context.Context) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{
		Durable:       PushDurable,
		Description:   "delivery: fan config-change events out to online agents",
		FilterSubject: protocol.ConfigChangedSubject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.opts.AckWait,
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		// Room for every replica's workers; JetStream stops handing out events beyond it.
		MaxAckPending: 256,
	}
	delay := 250 * time.Millisecond
	for {
		cons, err := c.js.CreateOrUpdateConsumer(ctx, protocol.EventsStream, cfg)
		if err == nil {
			return cons, nil
		}
		c.log.Warn("create event consumer failed, retrying", zap.Error(err))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("create consumer %s: %w", PushDurable, errors.Join(ctx.Err(), err))
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// handle fans one event out and settles it: ack after the fan-out, terminate an unusable event,
// redeliver later after a failure.
func (c *EventConsumer) handle(ctx context.Context, msg jetstream.Msg) {
	ev, err := decodeConfigChanged(msg.Data())
	if err != nil {
		fields := []zap.Field{zap.String("subject", msg.Subject()), zap.Int("bytes", len(msg.Data())), zap.Error(err)}
		if meta, merr := msg.Metadata(); merr == nil {
			fields = append(fields, zap.Uint64("stream_seq", meta.Sequence.Stream))
		}
		c.log.Warn("malformed config-change event terminated", fields...)
		if err := msg.TermWithReason("malformed"); err != nil {
			c.log.Warn("terminating event failed", zap.Error(err))
		}
		return
	}
	stopProgress := c.keepInProgress(msg)
	start := time.Now()
	res, err := c.pusher.Push(ctx, ev)
	stopProgress()
	fields := append(eventFields(ev), zap.Int("pages", res.Pages), zap.Int("hosts", res.Hosts),
		zap.Int("published", res.Published), zap.Int("skipped_credentials", res.SkippedCredentials),
		zap.Int("publish_failed", res.FailedPublish), zap.Duration("took", time.Since(start)))
	switch {
	case err == nil:
		c.log.Info("push done", fields...)
		ackCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := msg.DoubleAck(ackCtx); err != nil {
			c.log.Warn("acking event failed; it will be redelivered", append(fields, zap.Error(err))...)
		}
	case errors.Is(err, deliver.ErrInvalidRequest):
		c.log.Warn("push refused, event terminated", append(fields, zap.Error(err))...)
		if err := msg.TermWithReason("invalid"); err != nil {
			c.log.Warn("terminating event failed", zap.Error(err))
		}
	default:
		delay := c.retryDelay(msg)
		c.log.Warn("push failed, will redo", append(fields, zap.Duration("retry_in", delay), zap.Error(err))...)
		if err := msg.NakWithDelay(delay); err != nil {
			c.log.Warn("nak failed; the event will be redelivered after the ack wait", zap.Error(err))
		}
	}
}

// keepInProgress tells JetStream every AckWait/3 that the fan-out of msg is still running, until the
// returned function is called.
func (c *EventConsumer) keepInProgress(msg jetstream.Msg) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(c.opts.AckWait/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := msg.InProgress(); err != nil {
					c.log.Warn("extending event ack wait failed", zap.Error(err))
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (c *EventConsumer) retryDelay(msg jetstream.Msg) time.Duration {
	d := c.opts.RetryDelay
	if meta, err := msg.Metadata(); err == nil {
		for n := uint64(1); n < meta.NumDelivered && d < c.opts.MaxRetryDelay; n++ {
			d *= 2
		}
	}
	return min(d, c.opts.MaxRetryDelay)
}

func eventFields(ev protocol.ConfigChanged) []zap.Field {
	return []zap.Field{zap.String("event_id", ev.EventID), zap.String("scope", ev.Scope),
		zap.String("environment_id", ev.EnvironmentID), zap.String("host_id", ev.HostID),
		zap.String("config_type", ev.ConfigType), zap.Int64("version", ev.Version)}
}
