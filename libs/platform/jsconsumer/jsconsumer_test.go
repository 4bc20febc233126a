package jsconsumer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/configsync/configsync/libs/platform/jsconsumer"
	"github.com/configsync/configsync/libs/testinfra"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	stream  = "TEST_EVENTS"
	durable = "test-durable"
	wait    = 30 * time.Second // bounds waits only to fail a hung test; nothing asserts on timing
)

type fixture struct {
	js jetstream.JetStream
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	srv := testinfra.NATS(t)
	js, err := jetstream.New(srv.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"test.>"}}); err != nil {
		t.Fatal(err)
	}
	return fixture{js: js}
}

func (f fixture) publish(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for i := range n {
		if _, err := f.js.Publish(ctx, "test.msg", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

func (f fixture) start(t *testing.T, cfg jsconsumer.Config, h jsconsumer.Handler) *jsconsumer.Consumer {
	t.Helper()
	log, _ := testinfra.Logger(t)
	cfg.Stream = stream
	cfg.Consumer.Durable = durable
	c := jsconsumer.New(f.js, cfg, h, log)
	c.Start()
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return c
}

// info is the durable consumer's state; the zero state until the consumer has been created.
func (f fixture) info(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cons, err := f.js.Consumer(ctx, stream, durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return &jetstream.ConsumerInfo{}
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(wait); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With Batch 1 each worker pulls one message only when it is free: while both workers are busy the
// other messages stay in the stream (not pulled into a client buffer to age there), and once they are
// free every message is handled.
func TestSingleShapePullsOnlyWhenAWorkerIsFree(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 5)
	release := make(chan struct{})
	var mu sync.Mutex
	var handled []string
	c := f.start(t, jsconsumer.Config{Workers: 2}, func(_ context.Context, msgs []jetstream.Msg) []jsconsumer.Outcome {
		if len(msgs) != 1 {
			t.Errorf("a batch of %d with Batch 1", len(msgs))
		}
		mu.Lock()
		handled = append(handled, string(msgs[0].Data()))
		first := len(handled) <= 2
		mu.Unlock()
		if first {
			<-release
		}
		return []jsconsumer.Outcome{jsconsumer.Ack}
	})
	eventually(t, "two messages in hand", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 2
	})
	info := f.info(t)
	if info.NumAckPending != 2 || info.NumPending != 3 {
		t.Fatalf("with both workers busy: %d delivered unacked, %d undelivered; want 2 and 3", info.NumAckPending, info.NumPending)
	}
	if !c.Running() || c.Ready(context.Background()) != nil {
		t.Fatal("consumer not ready while pulling")
	}
	close(release)
	eventually(t, "every message acked", func() bool {
		info := f.info(t)
		return info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream == 5
	})
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(handled)
	if !slices.Equal(handled, []string{"0", "1", "2", "3", "4"}) {
		t.Fatalf("handled %v", handled)
	}
}

// With Batch > 1 the messages waiting are handed over in batches of at most Batch.
func TestBatchShapeHandsOverBatches(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 250)
	var mu sync.Mutex
	var sizes []int
	total := 0
	f.start(t, jsconsumer.Config{Workers: 2, Batch: 100, BatchWait: 50 * time.Millisecond},
		func(_ context.Context, msgs []jetstream.Msg) []jsconsumer.Outcome {
			mu.Lock()
			sizes = append(sizes, len(msgs))
			total += len(msgs)
			mu.Unlock()
			return ackAll(msgs)
		})
	eventually(t, "every message acked", func() bool {
		info := f.info(t)
		return info.NumAckPending == 0 && info.AckFloor.Stream == 250
	})
	mu.Lock()
	defer mu.Unlock()
	if total != 250 || slices.Max(sizes) > 100 || slices.Max(sizes) < 2 {
		t.Fatalf("batch sizes %v (total %d): want batches of 2..100 adding up to 250", sizes, total)
	}
	if info := f.info(t); info.Config.MaxAckPending != 100*(2+2) {
		t.Fatalf("max ack pending %d", info.Config.MaxAckPending)
	}
}

// With Batch > 1 the pulls go on while every worker is busy: JetStream delivers up to MaxAckPending
// messages (the workers' batches and the next ones, buffered), so a worker that finishes finds a full
// batch waiting, and no more than that. Once the workers are free, every message is handled, in batches
// of at most Batch.
func TestBatchShapeKeepsPullingWhileWorkersAreBusy(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 200)
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	total, calls := 0, 0
	f.start(t, jsconsumer.Config{Workers: 2, Batch: 10, BatchWait: 50 * time.Millisecond},
		func(_ context.Context, msgs []jetstream.Msg) []jsconsumer.Outcome {
			mu.Lock()
			calls++
			first := calls <= 2
			sizes = append(sizes, len(msgs))
			total += len(msgs)
			mu.Unlock()
			if first {
				<-release
			}
			return ackAll(msgs)
		})
	// MaxAckPending is 10*(2+2): both workers hold a batch and two more are delivered meanwhile.
	eventually(t, "JetStream delivered up to MaxAckPending while both workers were busy", func() bool {
		return f.info(t).NumAckPending == 40
	})
	mu.Lock()
	busyCalls := calls
	mu.Unlock()
	if busyCalls != 2 {
		t.Fatalf("%d handler calls while both workers were blocked", busyCalls)
	}
	close(release)
	eventually(t, "every message acked", func() bool {
		info := f.info(t)
		return info.NumAckPending == 0 && info.AckFloor.Stream == 200
	})
	mu.Lock()
	defer mu.Unlock()
	if total != 200 || slices.Max(sizes) > 10 {
		t.Fatalf("batch sizes %v (total %d): want batches of at most 10 adding up to 200", sizes, total)
	}
}

// A retried message comes back with its delivery count, each time after a delay doubled from the
// last, capped; once acked it is done.
func TestRetryBacksOffByDeliveryCount(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 1)
	var mu sync.Mutex
	var delays []time.Duration
	var deliveries []uint64
	var c *jsconsumer.Consumer
	c = f.start(t, jsconsumer.Config{RetryDelay: 20 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond},
		func(_ context.Context, msgs []jetstream.Msg) []jsconsumer.Outcome {
			meta, err := msgs[0].Metadata()
			if err != nil {
				t.Error(err)
				return []jsconsumer.Outcome{jsconsumer.Terminate("no metadata")}
			}
			mu.Lock()
			defer mu.Unlock()
			deliveries = append(deliveries, meta.NumDelivered)
			if meta.NumDelivered < 4 {
				delays = append(delays, c.RetryDelay(msgs[0]))
				return []jsconsumer.Outcome{jsconsumer.Retry}
			}
			return []jsconsumer.Outcome{jsconsumer.Ack}
		})
	eventually(t, "the message acked", func() bool { return f.info(t).AckFloor.Stream == 1 })
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(deliveries, []uint64{1, 2, 3, 4}) {
		t.Fatalf("deliveries %v", deliveries)
	}
	if want := []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 50 * time.Millisecond}; !slices.Equal(delays, want) {
		t.Fatalf("delays %v, want %v", delays, want)
	}
}

// A terminated message is never redelivered; a handler returning no outcome (or panicking) gets its
// messages redelivered.
func TestTerminateAndMissingOutcomes(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 2) // "0" is terminated at once; "1" panics once, then returns nothing once, then is acked
	var mu sync.Mutex
	seen := map[string]int{}
	f.start(t, jsconsumer.Config{RetryDelay: 10 * time.Millisecond, AckWait: time.Hour},
		func(_ context.Context, msgs []jetstream.Msg) []jsconsumer.Outcome {
			body := string(msgs[0].Data())
			mu.Lock()
			seen[body]++
			n := seen[body]
			mu.Unlock()
			switch {
			case body == "0":
				return []jsconsumer.Outcome{jsconsumer.Terminate("malformed")}
			case n == 1:
				panic("handler bug")
			case n == 2:
				return nil
			}
			return []jsconsumer.Outcome{jsconsumer.Ack}
		})
	// The ack wait is an hour: a redelivery within the test can only come from a NAK.
	eventually(t, "both settled", func() bool {
		info := f.info(t)
		return info.AckFloor.Stream == 2 && info.NumAckPending == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if seen["0"] != 1 || seen["1"] != 3 {
		t.Fatalf("deliveries %v, want 0 once and 1 three times", seen)
	}
}

// KeepInProgress keeps a long handler's message from being redelivered past the ack wait.
func TestKeepInProgressHoldsTheAckWait(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 1)
	var mu sync.Mutex
	calls := 0
	f.start(t, jsconsumer.Config{AckWait: 500 * time.Millisecond, KeepInProgress: true, DoubleAck: true},
		func(_ context.Context, msgs []jetstream.Msg) []jsconsumer.Outcome {
			mu.Lock()
			calls++
			mu.Unlock()
			time.Sleep(2 * time.Second) // four ack waits
			return []jsconsumer.Outcome{jsconsumer.Ack}
		})
	eventually(t, "the message acked", func() bool { return f.info(t).AckFloor.Stream == 1 })
	mu.Lock()
	defer mu.Unlock()
	if info := f.info(t); calls != 1 || info.NumRedelivered != 0 {
		t.Fatalf("%d handler calls, %d redelivered", calls, info.NumRedelivered)
	}
}

// Stop waits for the message in hand, which is settled; afterwards nothing is pulled.
func TestStopFinishesTheMessagesInHand(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 1)
	log, _ := testinfra.Logger(t)
	started, release := make(chan struct{}), make(chan struct{})
	c := jsconsumer.New(f.js, jsconsumer.Config{Stream: stream, Consumer: jetstream.ConsumerConfig{Durable: durable}},
		func(_ context.Context, msgs []jetstream.Msg) []jsconsumer.Outcome {
			close(started)
			<-release
			return []jsconsumer.Outcome{jsconsumer.Ack}
		}, log)
	c.Start()
	<-started
	testinfra.StopReleasing(t, c.Stop, release)
	if c.Running() {
		t.Fatal("running after Stop")
	}
	if info := f.info(t); info.AckFloor.Stream != 1 || info.NumAckPending != 0 {
		t.Fatalf("after stop: ack floor %d, %d pending", info.AckFloor.Stream, info.NumAckPending)
	}
}

// With Batch > 1 a deleted durable is created again and consumed from: the puller sees it gone and the
// consumer starts over.
func TestBatchShapeStartsOverWhenTheConsumerIsDeleted(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	total := 0
	f.start(t, jsconsumer.Config{Workers: 2, Batch: 10, BatchWait: 10 * time.Millisecond},
		func(_ context.Context, msgs []jetstream.Msg) []jsconsumer.Outcome {
			mu.Lock()
			total += len(msgs)
			mu.Unlock()
			return ackAll(msgs)
		})
	f.publish(t, 5)
	eventually(t, "the first messages acked", func() bool { return f.info(t).AckFloor.Stream == 5 })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := f.js.DeleteConsumer(ctx, stream, durable); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the durable created again", func() bool { return f.info(t).Config.Durable == durable })
	f.publish(t, 5)
	eventually(t, "every message handled once more after the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return total >= 15 // the new durable delivers all 10 stored messages again (DeliverAll)
	})
}

// ackAll is the outcome of a handler that settles every message of its batch: Ack each.
func ackAll(msgs []jetstream.Msg) []jsconsumer.Outcome {
	out := make([]jsconsumer.Outcome, len(msgs))
	for i := range out {
		out[i] = jsconsumer.Ack
	}
	return out
}
