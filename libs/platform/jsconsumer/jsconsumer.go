// Package jsconsumer runs a durable JetStream pull consumer for a ConfigSync service: it ensures the
// consumer (retrying while JetStream is unavailable, starting over if the consumer is deleted), hands
// messages to a handler on a bounded set of workers, and settles each message with the outcome the
// handler chose: ack, redeliver later with a backoff by delivery count, or terminate a message that
// can never succeed.
//
// It pulls in one of two shapes. With Batch 1 each worker pulls one message with its own pull request
// only when it is free, so no message waits in a client buffer, aging towards its ack wait, while the
// workers are busy (and no worker waits on a Consume pull of one message that nats.go v1.55.0 may
// forget to renew, which left a consumer idle until its missed-heartbeat reset). With Batch > 1 one
// goroutine fetches Batch messages at a time, the next fetch as soon as one ends, into a buffer that
// holds MaxAckPending messages (JetStream delivers no more unsettled), and each worker takes up to
// Batch of them (waiting at most BatchWait) per handler call: the large pulls a high-throughput ingest
// needs.
package jsconsumer

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

	"github.com/configsync/configsync/libs/platform/backoff"
)

// Outcome is how a message is settled.
type Outcome struct {
	kind   outcomeKind
	reason string
}

type outcomeKind uint8

const (
	kindAck outcomeKind = iota
	kindRetry
	kindTerm
)

var (
	// Ack acknowledges a message: it is done.
	Ack = Outcome{kind: kindAck}
	// Retry redelivers a message after the consumer's backoff for its delivery count.
	Retry = Outcome{kind: kindRetry}
)

// Terminate drops a message for good (it can never succeed), telling JetStream why.
func Terminate(reason string) Outcome { return Outcome{kind: kindTerm, reason: reason} }

func (o Outcome) String() string {
	switch o.kind {
	case kindAck:
		return "ack"
	case kindRetry:
		return "retry"
	default:
		return "terminate"
	}
}

// Handler handles a batch of messages (one message with Batch 1) and returns one outcome per message,
// in order. Messages it returns no outcome for are redelivered later.
type Handler func(ctx context.Context, msgs []jetstream.Msg) []Outcome

// Config configures a Consumer.
type Config struct {
	// Stream and Consumer name the durable consumer. The consumer's AckPolicy (explicit), AckWait,
	// MaxDeliver (unlimited) and DeliverPolicy (all) are set from this Config; MaxAckPending defaults
	// to Batch*(Workers+2).
	Stream   string
	Consumer jetstream.ConsumerConfig
	// Workers is how many handler calls run at once (default 1).
	Workers int
	// Batch is the most messages per handler call (default 1); see the package doc for the two
	// shapes.
	Batch int
	// BatchWait is how long a worker waits for a batch to fill once it holds one message (Batch > 1;
	// default 5ms).
	BatchWait time.Duration
	// PullWait is how long one pull request waits for a message before it is renewed (Batch 1; default
	// 30s).
	PullWait time.Duration
	// AckWait is how long JetStream waits for a settlement before redelivering (default 30s).
	AckWait time.Duration
	// KeepInProgress extends the ack wait of the messages in hand every AckWait/3 while their handler
	// runs, so that only a crashed handler's messages are redelivered.
	KeepInProgress bool
	// DoubleAck waits for JetStream to confirm each ack.
	DoubleAck bool
	// RetryDelay is the redelivery delay of a message retried after its first delivery; it doubles per
	// delivery up to MaxRetryDelay (defaults 1s and 30s).
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// Started and Stopped, when set, are called each time the consumer starts pulling (after the
	// durable is ensured) and once it stopped pulling, so a service can log or report it in its own
	// words.
	Started, Stopped func()
	// Observer, when set, is told about every handler call and settlement (libs/platform/metrics
	// implements it).
	Observer Observer
}

// Observer is told what a Consumer does, named by its durable. Implementations must be safe for
// concurrent use and must not block.
type Observer interface {
	// Handled is called after each handler call with the number of messages handed to it, how long
	// it ran, and each message's lag: the time from its JetStream timestamp to the handler call.
	Handled(consumer string, size int, lags []time.Duration, elapsed time.Duration)
	// Settled is called per message with its outcome ("ack", "retry" or "terminate") and whether
	// settling it failed.
	Settled(consumer, outcome string, failed bool)
}

func (c Config) withDefaults() Config {
	c.Workers = max(c.Workers, 1)
	c.Batch = max(c.Batch, 1)
	if c.BatchWait <= 0 {
		c.BatchWait = 5 * time.Millisecond
	}
	if c.PullWait <= 0 {
		c.PullWait = 30 * time.Second
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = time.Second
	}
	if c.MaxRetryDelay < c.RetryDelay {
		c.MaxRetryDelay = max(30*time.Second, c.RetryDelay)
	}
	c.Consumer.AckPolicy = jetstream.AckExplicitPolicy
	c.Consumer.AckWait = c.AckWait
	c.Consumer.MaxDeliver = -1
	c.Consumer.DeliverPolicy = jetstream.DeliverAllPolicy
	if c.Consumer.MaxAckPending <= 0 {
		c.Consumer.MaxAckPending = c.Batch * (c.Workers + 2)
	}
	return c
}

// Consumer runs one durable consumer.
type Consumer struct {
	js     jetstream.JetStream
	cfg    Config
	handle Handler
	log    *zap.Logger

	running atomic.Bool
	mu      sync.Mutex
	cancel  context.CancelFunc
	stopWk  context.CancelFunc
	done    chan struct{}
}

// New returns a consumer on js handling messages with handle. Start runs it.
func New(js jetstream.JetStream, cfg Config, handle Handler, log *zap.Logger) *Consumer {
	cfg = cfg.withDefaults()
	return &Consumer{js: js, cfg: cfg, handle: handle, log: log.With(zap.String("consumer", cfg.Consumer.Durable))}
}

// Start consumes in the background, starting over after unexpected ends; it does not block.
func (c *Consumer) Start() {
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
			c.log.Error("consumer ended, restarting", zap.Error(err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
}

// Stop stops pulling and waits for the messages in hand to be handled and settled, until ctx is done;
// then their handlers' contexts are cancelled (JetStream redelivers what was not settled).
func (c *Consumer) Stop(ctx context.Context) error {
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

// Running reports whether the consumer is pulling messages.
func (c *Consumer) Running() bool { return c.running.Load() }

// Ready is a readiness check: an error while the consumer is not pulling.
func (c *Consumer) Ready(context.Context) error {
	if !c.running.Load() {
		return fmt.Errorf("consumer %s is not running", c.cfg.Consumer.Durable)
	}
	return nil
}

// RetryDelay is the delay before msg is redelivered after a Retry: RetryDelay doubled per earlier
// delivery, at most MaxRetryDelay.
func (c *Consumer) RetryDelay(msg jetstream.Msg) time.Duration {
	d := c.cfg.RetryDelay
	if meta, err := msg.Metadata(); err == nil {
		for n := uint64(1); n < meta.NumDelivered && d < c.cfg.MaxRetryDelay; n++ {
			d *= 2
		}
	}
	return min(d, c.cfg.MaxRetryDelay)
}

// run consumes until ctx is done, then stops pulling and finishes the messages in hand (handled with
// workCtx, so they complete after ctx is cancelled).
func (c *Consumer) run(ctx, workCtx context.Context) error {
	cons, err := c.ensure(ctx)
	if err != nil {
		return err
	}
	c.log.Info("consumer started", zap.String("stream", c.cfg.Stream), zap.Int("workers", c.cfg.Workers),
		zap.Int("batch", c.cfg.Batch))
	if c.cfg.Started != nil {
		c.cfg.Started()
	}
	defer func() {
		c.log.Info("consumer stopped")
		if c.cfg.Stopped != nil {
			c.cfg.Stopped()
		}
	}()
	if c.cfg.Batch == 1 {
		return c.runSingle(ctx, workCtx, cons)
	}
	return c.runBatches(ctx, workCtx, cons)
}

// ensure creates or updates the durable consumer, retrying while JetStream is unavailable.
func (c *Consumer) ensure(ctx context.Context) (jetstream.Consumer, error) {
	delay := 250 * time.Millisecond
	for {
		cons, err := c.js.CreateOrUpdateConsumer(ctx, c.cfg.Stream, c.cfg.Consumer)
		if err == nil {
			return cons, nil
		}
		c.log.Warn("create consumer failed, retrying", zap.String("stream", c.cfg.Stream), zap.Error(err))
		if !backoff.Sleep(ctx, delay) {
			return nil, fmt.Errorf("create consumer %s: %w", c.cfg.Consumer.Durable, errors.Join(ctx.Err(), err))
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// runSingle runs Workers loops that each pull one message when free.
func (c *Consumer) runSingle(ctx, workCtx context.Context, cons jetstream.Consumer) error {
	pullCtx, stopPulling := context.WithCancel(ctx)
	defer stopPulling()
	var (
		wg      sync.WaitGroup
		endOnce sync.Once
		ended   error
	)
	c.running.Store(true)
	for range c.cfg.Workers {
		wg.Go(func() {
			if err := c.pullLoop(pullCtx, workCtx, cons); err != nil {
				endOnce.Do(func() { ended = err })
				stopPulling()
			}
		})
	}
	wg.Wait()
	c.running.Store(false)
	return ended
}

// pullLoop pulls and handles one message at a time until ctx is done. It returns an error only when
// the durable consumer is gone and must be created again.
func (c *Consumer) pullLoop(ctx, workCtx context.Context, cons jetstream.Consumer) error {
	return c.pullUntilDone(ctx, func() error {
		pctx, cancel := context.WithTimeout(ctx, c.cfg.PullWait)
		msg, err := cons.Next(jetstream.FetchContext(pctx))
		cancel()
		if err == nil {
			c.process(workCtx, []jetstream.Msg{msg})
		}
		return err
	})
}

// pullUntilDone calls pull until ctx is done: at once again after a pull that succeeded or timed out
// waiting for messages, after a delay doubled from 100 ms up to 5 s after any other failure (logged).
// It returns an error only when the durable consumer is gone and must be created again.
func (c *Consumer) pullUntilDone(ctx context.Context, pull func() error) error {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := pull()
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil, errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
			delay = 100 * time.Millisecond
			continue
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
			return fmt.Errorf("pull from %s: %w", c.cfg.Consumer.Durable, err)
		}
		c.log.Warn("pull failed, retrying", zap.Duration("retry_in", delay), zap.Error(err))
		if !backoff.Sleep(ctx, delay) {
			return nil
		}
		delay = min(2*delay, 5*time.Second)
	}
	return nil
}

// runBatches keeps a buffer of messages pulled ahead and lets Workers goroutines each take up to Batch
// of them per handler call.
//
// One goroutine pulls: a Fetch of Batch messages (waiting at most batchPullWait), its messages into the
// buffer, and the next Fetch as soon as that one ends, whatever the workers are doing. It replaced a
// Consume stream whose callback blocked on a full buffer while every worker was writing: nats.go renews
// a Consume's pulls only from that callback (and its own count of the messages still owed), so no pull
// was issued meanwhile; under a heartbeat burst the consumer was seen with no pull at the server,
// nothing in hand and 20,000 messages pending.
func (c *Consumer) runBatches(ctx, workCtx context.Context, cons jetstream.Consumer) error {
	buf := make(chan jetstream.Msg, c.bufferSize())
	c.running.Store(true)
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			for {
				batch := collect(buf, c.cfg.Batch, c.cfg.BatchWait)
				if batch == nil {
					return
				}
				c.process(workCtx, batch)
			}
		})
	}
	ended := c.pullAhead(ctx, cons, buf)
	c.running.Store(false)
	close(buf) // every message fetched is in buf: the workers handle them all, then return
	wg.Wait()
	return ended
}

// batchPullWait bounds one Fetch of runBatches: how long a pull waits at the server for messages
// before the next one is issued, and how long Stop waits for the pull in flight.
const batchPullWait = time.Second

// pullAhead fetches batches into buf until ctx is done. Every message of a fetch reaches buf, the
// last fetch's too. It returns an error only when the durable consumer is gone.
func (c *Consumer) pullAhead(ctx context.Context, cons jetstream.Consumer, buf chan<- jetstream.Msg) error {
	return c.pullUntilDone(ctx, func() error {
		batch, err := cons.Fetch(c.cfg.Batch, jetstream.FetchMaxWait(batchPullWait))
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			buf <- m
		}
		return batch.Error()
	})
}

// bufferSize is the capacity of runBatches' buffer: every message JetStream may have delivered and not
// yet seen settled, so the puller never waits for a worker but when a redelivery exceeds it.
func (c *Consumer) bufferSize() int {
	return max(c.cfg.Consumer.MaxAckPending, c.cfg.Batch*(c.cfg.Workers+1))
}

// collect takes one message (blocking) and then up to limit-1 more, waiting at most wait for them. It
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

// process handles msgs and settles each with its outcome.
func (c *Consumer) process(ctx context.Context, msgs []jetstream.Msg) {
	var outcomes []Outcome
	start := time.Now()
	var lags []time.Duration
	if c.cfg.Observer != nil {
		lags = make([]time.Duration, 0, len(msgs))
		for _, m := range msgs {
			if meta, err := m.Metadata(); err == nil {
				lags = append(lags, start.Sub(meta.Timestamp))
			}
		}
	}
	func() {
		if c.cfg.KeepInProgress {
			defer c.keepInProgress(msgs)()
		}
		defer func() {
			if p := recover(); p != nil {
				// The value is not logged: it could hold message data.
				c.log.Error("handler panicked; its messages will be redelivered", zap.String("panic_type", fmt.Sprintf("%T", p)))
				outcomes = nil
			}
		}()
		outcomes = c.handle(ctx, msgs)
	}()
	if c.cfg.Observer != nil {
		c.cfg.Observer.Handled(c.cfg.Consumer.Durable, len(msgs), lags, time.Since(start))
	}
	for i, m := range msgs {
		o := Retry
		if i < len(outcomes) {
			o = outcomes[i]
		}
		c.settle(m, o)
	}
}

// settle acknowledges, redelivers later or terminates msg.
func (c *Consumer) settle(msg jetstream.Msg, o Outcome) {
	var err error
	switch o.kind {
	case kindAck:
		if c.cfg.DoubleAck {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = msg.DoubleAck(ctx)
			cancel()
		} else {
			err = msg.Ack()
		}
	case kindRetry:
		err = msg.NakWithDelay(c.RetryDelay(msg))
	case kindTerm:
		err = msg.TermWithReason(o.reason)
	}
	if err != nil {
		c.log.Warn("settling message failed; JetStream will redeliver it", zap.Stringer("outcome", o), zap.Error(err))
	}
	if c.cfg.Observer != nil {
		c.cfg.Observer.Settled(c.cfg.Consumer.Durable, o.String(), err != nil)
	}
}

// keepInProgress tells JetStream every AckWait/3 that msgs are still being handled, until the returned
// function is called.
func (c *Consumer) keepInProgress(msgs []jetstream.Msg) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(c.cfg.AckWait/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, m := range msgs {
					if err := m.InProgress(); err != nil {
						c.log.Warn("extending ack wait failed", zap.Error(err))
					}
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
