package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/delivery/internal/deliver"
)

// maxRepairBytes bounds one repair request (1,000 hosts with every type fit easily).
const maxRepairBytes = 1 << 20

// RepairServer takes ack-ingest's repair requests (protocol.RepairSubject, core NATS, in delivery's
// queue group so each request reaches one replica) and hands them to the Repairer, one at a time. A
// request that arrives while QueueSize are waiting is dropped and counted: ack-ingest asks again
// after its backoff.
type RepairServer struct {
	repairer *deliver.Repairer
	log      *zap.Logger
	queue    chan protocol.RepairRequest
	dropped  atomic.Int64

	mu     sync.Mutex
	sub    *nats.Subscription
	worker app.Background
}

// NewRepairServer returns a server handing requests to repairer, with up to queueSize waiting.
func NewRepairServer(repairer *deliver.Repairer, queueSize int, log *zap.Logger) *RepairServer {
	return &RepairServer{repairer: repairer, log: log, queue: make(chan protocol.RepairRequest, max(queueSize, 1))}
}

// Start subscribes on nc and starts the worker.
func (s *RepairServer) Start(nc *nats.Conn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sub != nil {
		return nil
	}
	sub, err := nc.QueueSubscribe(protocol.RepairSubject, protocol.DeliveryQueueGroup, s.receive)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", protocol.RepairSubject, err)
	}
	s.sub = sub
	s.worker.Start(s.work)
	return nil
}

// work repairs the queued requests until ctx is cancelled.
func (s *RepairServer) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-s.queue:
			// Requests waiting meanwhile are repaired together: one resolver request and one
			// injection per distinct collector list for all of them.
			req = s.coalesce(ctx, req)
			if err := s.repairer.Repair(ctx, req); err != nil && !errors.Is(err, context.Canceled) {
				s.log.Warn("repair request refused", zap.Error(err))
			}
		}
	}
}

// Stop unsubscribes and waits for the repair in hand until ctx is done.
func (s *RepairServer) Stop(ctx context.Context) error {
	s.mu.Lock()
	sub := s.sub
	s.mu.Unlock()
	if sub == nil {
		return nil
	}
	_ = sub.Unsubscribe()
	return s.worker.Stop(ctx)
}

// coalesce adds the requests already waiting to req, up to protocol.MaxRepairHosts hosts.
func (s *RepairServer) coalesce(ctx context.Context, req protocol.RepairRequest) protocol.RepairRequest {
	for len(req.Hosts) < protocol.MaxRepairHosts {
		select {
		case more := <-s.queue:
			if len(req.Hosts)+len(more.Hosts) > protocol.MaxRepairHosts {
				// Too many to merge: repair this one now and the other on its own.
				if err := s.repairer.Repair(ctx, more); err != nil {
					s.log.Warn("repair request refused", zap.Error(err))
				}
				return req
			}
			req.Hosts = append(req.Hosts, more.Hosts...)
		default:
			return req
		}
	}
	return req
}

// Dropped counts requests dropped because the queue was full or they were malformed.
func (s *RepairServer) Dropped() int64 { return s.dropped.Load() }

func (s *RepairServer) receive(m *nats.Msg) {
	var req protocol.RepairRequest
	if len(m.Data) > maxRepairBytes || json.Unmarshal(m.Data, &req) != nil {
		s.dropped.Add(1)
		s.log.Warn("malformed repair request dropped", zap.Int("bytes", len(m.Data)))
		return
	}
	select {
	case s.queue <- req:
	default:
		s.dropped.Add(1)
		s.log.Warn("repair request dropped, delivery is busy", zap.Int("hosts", len(req.Hosts)))
	}
}

// IngestLag tells whether ack-ingest is behind on heartbeats: its durable consumer of the heartbeat
// stream has heartbeats waiting and has handed none out for LagAfter (ack-ingest is down or stuck).
// While it lags, hosts' stored heartbeats are stale through no fault of theirs, so delivery pushes to
// every host in scope instead of only the online ones. Answers are cached for a second.
type IngestLag struct {
	js       jetStreamConsumers
	lagAfter time.Duration
	log      *zap.Logger

	mu      sync.Mutex
	checked time.Time
	lagging bool
}

// jetStreamConsumers is the part of jetstream.JetStream IngestLag needs.
type jetStreamConsumers interface {
	ConsumerInfo(ctx context.Context, stream, durable string) (pending, ackPending uint64, lastDelivered *time.Time, err error)
}

// NewIngestLag returns a lag check over js; lagAfter 0 means 5 s.
func NewIngestLag(js jetStreamConsumers, lagAfter time.Duration, log *zap.Logger) *IngestLag {
	if lagAfter <= 0 {
		lagAfter = 5 * time.Second
	}
	return &IngestLag{js: js, lagAfter: lagAfter, log: log}
}

// Lagging implements the check (see IngestLag).
func (l *IngestLag) Lagging(ctx context.Context) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.checked) < time.Second {
		return l.lagging
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pending, ackPending, last, err := l.js.ConsumerInfo(ctx, protocol.HeartbeatsStream, protocol.HeartbeatsIngestDurable)
	switch {
	case errors.Is(err, errNoConsumer):
		l.lagging = false // no ack-ingest has ever run here: heartbeats are not what decides
	case err != nil:
		l.log.Warn("ack-ingest progress unknown; pushing to every host", zap.Error(err))
		l.lagging = true
	default:
		l.lagging = pending+ackPending > 0 && (last == nil || now.Sub(*last) > l.lagAfter)
	}
	l.checked = now
	return l.lagging
}

// errNoConsumer: the durable consumer does not exist.
var errNoConsumer = errors.New("no such consumer")

// JetStreamConsumers reads consumer state from JetStream for IngestLag.
type JetStreamConsumers struct{ JS jetstream.JetStream }

// ConsumerInfo returns the consumer's pending and unacknowledged counts and when it last handed a
// message out; errNoConsumer when it does not exist.
func (c JetStreamConsumers) ConsumerInfo(ctx context.Context, stream, durable string) (uint64, uint64, *time.Time, error) {
	cons, err := c.JS.Consumer(ctx, stream, durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, 0, nil, errNoConsumer
	}
	if err != nil {
		return 0, 0, nil, err
	}
	info := cons.CachedInfo()
	return info.NumPending, uint64(max(info.NumAckPending, 0)), info.Delivered.Last, nil
}
