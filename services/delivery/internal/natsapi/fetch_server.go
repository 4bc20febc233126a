// Package natsapi is delivery's NATS edge: the agent fetch endpoint (a micro service in the delivery
// queue group, answered by a bounded worker pool), the durable JetStream consumer of config-change
// events, and the clients of the resolver and credential services.
package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/delivery/internal/deliver"
)

// ServiceName and ServiceVersion are announced on $SRV.INFO.
const (
	ServiceName    = "delivery"
	ServiceVersion = "1.0.0"
)

// FetchOptions tune the fetch endpoint.
type FetchOptions struct {
	// Workers bounds concurrent fetches per instance.
	Workers int
	// Queue is how many received fetches may wait for a worker before the endpoint stops reading.
	Queue int
	// Timeout bounds a fetch from its arrival: an answer later than that is useless to the agent.
	Timeout time.Duration
}

// FetchServer answers agents' config fetches on protocol.FetchSubjectAll.
type FetchServer struct {
	fetcher *deliver.Fetcher
	opts    FetchOptions
	log     *zap.Logger

	mu       sync.Mutex
	nc       *nats.Conn
	svc      micro.Service
	jobs     chan fetchJob
	stopping chan struct{}
	workers  sync.WaitGroup
	ctx      context.Context
	cancel   context.CancelFunc
}

// fetchJob is a received fetch. It holds what the workers need of the request, never the
// micro.Request itself: that is not safe to use once the handler has returned (micro reads the outcome
// recorded in it for $SRV.STATS), so workers reply by publishing to the reply subject themselves.
type fetchJob struct {
	subject, reply string
	data           []byte
	arrived        time.Time
}

// NewFetchServer returns a server answering with fetcher.
func NewFetchServer(fetcher *deliver.Fetcher, opts FetchOptions, log *zap.Logger) *FetchServer {
	if opts.Workers <= 0 {
		opts.Workers = 64
	}
	if opts.Queue <= 0 {
		opts.Queue = 4096
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	return &FetchServer{fetcher: fetcher, opts: opts, log: log}
}

// Start registers the delivery micro service and its fetch endpoint on nc and starts the workers.
func (s *FetchServer) Start(nc *nats.Conn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.svc != nil {
		return errors.New("natsapi: fetch server already started")
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.nc = nc // set before the endpoint subscribes: workers reply through it
	s.jobs = make(chan fetchJob, s.opts.Queue)
	s.stopping = make(chan struct{})
	for range s.opts.Workers {
		s.workers.Go(s.work)
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        ServiceName,
		Version:     ServiceVersion,
		Description: "Delivers effective agent configs: startup fetches and pushes of config changes.",
	})
	if err == nil {
		err = svc.AddEndpoint("fetch", micro.HandlerFunc(s.receive),
			micro.WithEndpointSubject(protocol.FetchSubjectAll),
			micro.WithEndpointQueueGroup(protocol.DeliveryQueueGroup))
		if err != nil {
			_ = svc.Stop()
		}
	}
	if err != nil {
		close(s.stopping)
		s.workers.Wait()
		s.cancel()
		return fmt.Errorf("natsapi: start fetch endpoint: %w", err)
	}
	s.svc = svc
	s.log.Info("fetch endpoint started", zap.String("subject", protocol.FetchSubjectAll),
		zap.String("queue_group", protocol.DeliveryQueueGroup), zap.Int("workers", s.opts.Workers))
	return nil
}

// Stop stops receiving fetches, answers those already received and waits until ctx is done, after
// which the remaining ones are cancelled.
func (s *FetchServer) Stop(ctx context.Context) error {
	s.mu.Lock()
	svc := s.svc
	s.svc = nil
	s.mu.Unlock()
	if svc == nil {
		return nil
	}
	err := svc.Stop()
	close(s.stopping)
	done := make(chan struct{})
	go func() { s.workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.cancel()
		<-done
	}
	s.cancel()
	if err != nil {
		return fmt.Errorf("natsapi: stop fetch endpoint: %w", err)
	}
	return nil
}

// receive runs on the endpoint's subscription, one request at a time: it only queues the request.
// A full queue blocks it, so NATS buffers further requests (backpressure) rather than this process.
// Once stopping, requests still delivered by the draining subscription are told to retry elsewhere.
func (s *FetchServer) receive(req micro.Request) {
	j := fetchJob{subject: req.Subject(), reply: req.Reply(), data: req.Data(), arrived: time.Now()}
	select {
	case s.jobs <- j:
	case <-s.stopping:
		s.respondError(j.reply, protocol.Errorf(protocol.CodeUnavailable, "delivery is shutting down, retry"))
	}
}

// work serves queued fetches until stopping, then the ones still queued.
func (s *FetchServer) work() {
	for {
		select {
		case j := <-s.jobs:
			s.serve(j)
		case <-s.stopping:
			for {
				select {
				case j := <-s.jobs:
					s.serve(j)
				default:
					return
				}
			}
		}
	}
}

func (s *FetchServer) serve(j fetchJob) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("fetch panicked", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			s.respondError(j.reply, protocol.Errorf(protocol.CodeInternal, "internal error"))
		}
	}()
	ctx, cancel := context.WithDeadline(s.ctx, j.arrived.Add(s.opts.Timeout))
	defer cancel()
	if ctx.Err() != nil {
		return // waited too long in the queue: the agent has given up (it retries or uses its cache)
	}
	agentID, err := decodeFetchRequest(j.subject, j.data)
	if err != nil {
		s.log.Info("fetch refused", zap.String("subject", j.subject), zap.Error(err))
		s.respondError(j.reply, fetchError(err))
		return
	}
	reply, err := s.fetcher.Fetch(ctx, agentID)
	if err != nil {
		perr := fetchError(err)
		if perr.Code == protocol.CodeNotFound {
			s.log.Info("fetch by unknown agent", zap.String("agent_id", agentID))
		} else {
			s.log.Warn("fetch failed", zap.String("agent_id", agentID), zap.Error(err))
		}
		s.respondError(j.reply, perr)
		return
	}
	body, err := json.Marshal(reply)
	if err != nil {
		s.log.Error("fetch reply encoding failed", zap.String("agent_id", agentID), zap.Error(err))
		s.respondError(j.reply, protocol.Errorf(protocol.CodeInternal, "internal error"))
		return
	}
	if err := s.publish(&nats.Msg{Subject: j.reply, Data: body}); err != nil {
		s.log.Warn("fetch reply failed", zap.String("agent_id", agentID), zap.Error(err))
		if errors.Is(err, nats.ErrMaxPayload) {
			s.respondError(j.reply, protocol.Errorf(protocol.CodeInternal, "configs exceed the NATS max payload"))
		}
	}
}

// fetchError maps a fetch failure to the error sent to the agent, in one place. Details of upstream
// failures stay in the log.
func fetchError(err error) *protocol.Error {
	switch {
	case errors.Is(err, deliver.ErrForbidden):
		return protocol.Errorf(protocol.CodeForbidden, "agent_id does not match the subject")
	case errors.Is(err, deliver.ErrInvalidRequest):
		return protocol.Errorf(protocol.CodeInvalidRequest, "%s", err.Error())
	case errors.Is(err, deliver.ErrNotFound):
		return protocol.Errorf(protocol.CodeNotFound, "unknown agent")
	default:
		return protocol.Errorf(protocol.CodeUnavailable, "configs are unavailable, retry later")
	}
}

// respondError answers with e both as micro error headers and as the body {"error": {...}}.
func (s *FetchServer) respondError(replyTo string, e *protocol.Error) {
	body, _ := json.Marshal(struct {
		Error *protocol.Error `json:"error"`
	}{e})
	msg := &nats.Msg{
		Subject: replyTo,
		Header: nats.Header{
			micro.ErrorCodeHeader: {e.Code},
			micro.ErrorHeader:     {strings.NewReplacer("\r", " ", "\n", " ").Replace(e.Message)},
		},
		Data: body,
	}
	if err := s.publish(msg); err != nil {
		s.log.Warn("fetch error reply failed", zap.Error(err))
	}
}

// publish sends a reply on the service's connection. A request without a reply subject gets none.
// Replies bypass micro.Request (see fetchJob), so $SRV.STATS counts no fetch errors.
func (s *FetchServer) publish(msg *nats.Msg) error {
	if msg.Subject == "" {
		return nil
	}
	return s.nc.PublishMsg(msg)
}
