package natsapi

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

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
	acks       *batchConsumer
	heartbeats *batchConsumer
	ingester   *ingest.Ingester
	log        *zap.Logger

	mu     sync.Mutex
	cancel context.CancelFunc
	stopWk context.CancelFunc
	done   chan struct{}
}

// NewConsumers returns the consumers of acks and heartbeats, both writing through ingester.
func NewConsumers(js jetstream.JetStream, ingester *ingest.Ingester, opts BatchOptions, log *zap.Logger) *Consumers {
	c := &Consumers{ingester: ingester, log: log}
	c.acks = newBatchConsumer(js, protocol.AcksStream, jetstream.ConsumerConfig{
		Durable:       AcksDurable,
		Description:   "ack-ingest: apply acknowledgements into host_config_apply_status",
		FilterSubject: protocol.AckSubjectAll,
	}, opts, c.processAcks, log)
	c.heartbeats = newBatchConsumer(js, protocol.HeartbeatsStream, jetstream.ConsumerConfig{
		Durable:       HeartbeatsDurable,
		Description:   "ack-ingest: heartbeats into the hosts table",
		FilterSubject: protocol.HeartbeatSubjectAll,
	}, opts, c.processHeartbeats, log)
	return c
}

// Start begins consuming in the background; it does not block.
func (c *Consumers) Start() {
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
		var wg sync.WaitGroup
		for _, bc := range []*batchConsumer{c.acks, c.heartbeats} {
			wg.Go(func() { bc.runUntilDone(ctx, workCtx) })
		}
		wg.Wait()
	}()
}

// Stop stops pulling, waits for the batches in hand to be written and settled, and returns. If ctx ends
// first, in-flight writes are cancelled (their messages are redelivered after the ack wait).
func (c *Consumers) Stop(ctx context.Context) error {
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

// Ready reports whether both consumers are pulling messages.
func (c *Consumers) Ready(context.Context) error {
	if !c.acks.running.Load() || !c.heartbeats.running.Load() {
		return errors.New("ack-ingest consumers are not running")
	}
	return nil
}

func (c *Consumers) processAcks(ctx context.Context, msgs []jetstream.Msg) {
	acks := make([]ingest.Ack, 0, len(msgs))
	kept := make([]jetstream.Msg, 0, len(msgs))
	for _, m := range msgs {
		a, err := decodeAck(m.Subject(), m.Data(), storedAt(m))
		if err != nil {
			c.acks.terminate(m, err)
			continue
		}
		a.Seq = streamSeq(m)
		acks = append(acks, a)
		kept = append(kept, m)
	}
	for i, o := range c.ingester.IngestAcks(ctx, acks) {
		c.acks.settle(kept[i], o)
	}
}

func (c *Consumers) processHeartbeats(ctx context.Context, msgs []jetstream.Msg) {
	beats := make([]ingest.Heartbeat, 0, len(msgs))
	kept := make([]jetstream.Msg, 0, len(msgs))
	for _, m := range msgs {
		h, err := decodeHeartbeat(m.Subject(), m.Data(), storedAt(m))
		if err != nil {
			c.heartbeats.terminate(m, err)
			continue
		}
		beats = append(beats, h)
		kept = append(kept, m)
	}
	for i, o := range c.ingester.IngestHeartbeats(ctx, beats) {
		c.heartbeats.settle(kept[i], o)
	}
}
