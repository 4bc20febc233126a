// Package natsapi is delivery's NATS edge: the agent fetch endpoint (a micro service in the delivery
// queue group, answered in batches), the durable JetStream consumer of config-change events, and the
// clients of the resolver and credential services.
package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
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
	// Workers bounds the fetches being answered at once per instance; they are answered in batches of
	// up to Batch, so Workers/Batch batches run at a time (at least one).
	Workers int
	// Queue is how many received fetches may wait for a batch; when it is full, further fetches are
	// refused at once with "unavailable" (the agent falls back to its cache and retries with backoff).
	Queue int
	// Timeout bounds a fetch from its arrival: an answer later than that is useless to the agent, so a
	// fetch still queued by then is dropped unanswered.
	Timeout time.Duration
	// Batch is the most fetches answered together: one resolver request and one credential injection
	// for all of them. 1 answers each fetch on its own.
	Batch int
	// BatchWait is how long a batch waits for more fetches while other batches are running. An idle
	// instance answers a fetch at once.
	BatchWait time.Duration
}

// FetchServer answers agents' config fetches on protocol.FetchSubjectAll. The endpoint's handler only
// queues each request; a dispatcher takes them off the queue in batches and answers each batch with
// one call of the fetcher, from its own goroutine, publishing replies on the connection.
type FetchServer struct {
	fetcher *deliver.Fetcher
	opts    FetchOptions
	log     *zap.Logger

	mu       sync.Mutex
	nc       *nats.Conn
	svc      micro.Service
	jobs     chan fetchJob
	slots    chan struct{}
	stopping chan struct{}
	workers  sync.WaitGroup
	ctx      context.Context
	cancel   context.CancelFunc

	refused     atomic.Int64 // fetches refused because the queue was full, since the last log line
	refusedLogT atomic.Int64 // unix nanos of the last such log line
}

// fetchJob is a received fetch. It holds what the batches need of the request, never the
// micro.Request itself: that is not safe to use once the handler has returned (micro reads the outcome
// recorded in it for $SRV.STATS), so batches reply by publishing to the reply subject themselves, and
// $SRV.STATS counts no fetch errors.
type fetchJob struct {
	subject string
	reply   string
	data    []byte
	arrived time.Time
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
	if opts.Batch <= 0 {
		opts.Batch = 1
	}
	opts.Batch = min(opts.Batch, protocol.MaxResolveAgents)
	if opts.BatchWait < 0 {
		opts.BatchWait = 0
	}
	return &FetchServer{fetcher: fetcher, opts: opts, log: log}
}

// Start registers the delivery micro service and its fetch endpoint on nc and starts the dispatcher.
func (s *FetchServer) Start(nc *nats.Conn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.svc != nil {
		return errors.New("natsapi: fetch server already started")
	}
	s.nc = nc
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.jobs = make(chan fetchJob, s.opts.Queue)
	s.slots = make(chan struct{}, max(1, s.opts.Workers/s.opts.Batch))
	s.stopping = make(chan struct{})
	s.workers.Go(s.dispatch)
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
		zap.String("queue_group", protocol.DeliveryQueueGroup), zap.Int("workers", s.opts.Workers),
		zap.Int("batch", s.opts.Batch), zap.Duration("batch_wait", s.opts.BatchWait), zap.Int("queue", s.opts.Queue))
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

// receive runs on the endpoint's subscription, one request at a time: it only queues the request, so
// that it never holds up the subscription (requests waiting there carry no arrival time and could not
// be dropped once their agent gave up). A full queue means the instance is behind: the fetch is
// refused at once and the agent retries later. Once stopping, requests still delivered by the draining
// subscription are told to retry elsewhere.
func (s *FetchServer) receive(req micro.Request) {
	select {
	case <-s.stopping:
		s.refuse(req, "delivery is shutting down, retry")
		return
	default:
	}
	j := fetchJob{subject: req.Subject(), reply: req.Reply(), data: req.Data(), arrived: time.Now()}
	select {
	case s.jobs <- j:
	default:
		s.refuse(req, "delivery is busy, retry later")
		s.logRefused(j.arrived)
	}
}

// refuse answers req with "unavailable" from the handler.
func (s *FetchServer) refuse(req micro.Request, msg string) {
	e := protocol.Errorf(protocol.CodeUnavailable, "%s", msg)
	if err := req.Error(e.Code, headerSafe(e.Message), errorBody(e)); err != nil {
		s.log.Warn("fetch error reply failed", zap.Error(err))
	}
}

// logRefused logs refused fetches at most once a second, with how many since the last line.
func (s *FetchServer) logRefused(now time.Time) {
	n := s.refused.Add(1)
	last := s.refusedLogT.Load()
	if now.UnixNano()-last < int64(time.Second) || !s.refusedLogT.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	s.refused.Add(-n)
	s.log.Warn("fetch queue full, fetches refused", zap.Int64("refused", n), zap.Int("queue", s.opts.Queue))
}

// dispatch takes queued fetches off the queue in batches and answers each batch on its own goroutine,
// at most cap(slots) at a time. A batch is formed only once a slot is free, so while every slot is busy
// fetches accumulate in the queue and the next batch takes them all: batches grow with the load. It
// returns once stopping, with the queue empty and every batch answered.
func (s *FetchServer) dispatch() {
	var batches sync.WaitGroup
	defer batches.Wait()
	for {
		s.slots <- struct{}{}
		jobs := s.collect()
		if len(jobs) == 0 {
			<-s.slots
			return
		}
		batches.Go(func() {
			defer func() { <-s.slots }()
			s.serve(jobs)
		})
	}
}

// collect waits for a fetch and returns it with the others already queued, up to opts.Batch. While
// other batches are running it waits up to opts.BatchWait for more. It returns nil once stopping and
// the queue is empty.
func (s *FetchServer) collect() []fetchJob {
	var first fetchJob
	select {
	case first = <-s.jobs:
	case <-s.stopping:
		select {
		case first = <-s.jobs:
		default:
			return nil
		}
	}
	jobs := make([]fetchJob, 1, s.opts.Batch)
	jobs[0] = first
queued:
	for len(jobs) < s.opts.Batch {
		select {
		case j := <-s.jobs:
			jobs = append(jobs, j)
		default:
			break queued
		}
	}
	if len(jobs) == s.opts.Batch || s.opts.BatchWait == 0 || len(s.slots) <= 1 {
		return jobs
	}
	timer := time.NewTimer(s.opts.BatchWait)
	defer timer.Stop()
	for len(jobs) < s.opts.Batch {
		select {
		case j := <-s.jobs:
			jobs = append(jobs, j)
		case <-timer.C:
			return jobs
		case <-s.stopping:
			return jobs
		}
	}
	return jobs
}

// serve answers a batch of fetches: the ones that waited past the timeout are dropped, malformed ones
// refused, and the others answered together by the fetcher.
func (s *FetchServer) serve(jobs []fetchJob) {
	answered := make([]bool, len(jobs))
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("fetch panicked", zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			for i, j := range jobs {
				if !answered[i] {
					s.respondError(j.reply, protocol.Errorf(protocol.CodeInternal, "internal error"))
				}
			}
		}
	}()
	now := time.Now()
	var (
		agents  []string
		pending []int // jobs[pending[k]] asked for agents[k]
		expired int
		latest  time.Time
	)
	for i, j := range jobs {
		if now.Sub(j.arrived) >= s.opts.Timeout {
			// Waited too long in the queue: the agent has given up (it retries or uses its cache).
			answered[i] = true
			expired++
			continue
		}
		agentID, err := decodeFetchRequest(j.subject, j.data)
		if err != nil {
			s.log.Info("fetch refused", zap.String("subject", j.subject), zap.Error(err))
			s.respondError(j.reply, fetchError(err))
			answered[i] = true
			continue
		}
		agents = append(agents, agentID)
		pending = append(pending, i)
		if j.arrived.After(latest) {
			latest = j.arrived
		}
	}
	if expired > 0 {
		s.log.Warn("fetches dropped after waiting longer than the fetch timeout", zap.Int("dropped", expired),
			zap.Duration("timeout", s.opts.Timeout))
	}
	if len(agents) == 0 {
		return
	}
	// The batch works until its newest fetch times out; an answer that comes later for an older fetch
	// costs one publish to an inbox nobody reads.
	ctx, cancel := context.WithDeadline(s.ctx, latest.Add(s.opts.Timeout))
	defer cancel()
	results := s.fetcher.FetchBatch(ctx, agents)
	encoded := map[*protocol.FetchReply][]byte{} // a reply shared by several agents is encoded once
	for k, res := range results {
		i := pending[k]
		s.answer(jobs[i].reply, agents[k], res, encoded)
		answered[i] = true
	}
}

// answer sends one fetch's result; encoded caches the encodings of the batch's replies.
func (s *FetchServer) answer(replyTo, agentID string, res deliver.FetchResult, encoded map[*protocol.FetchReply][]byte) {
	if res.Err != nil {
		perr := fetchError(res.Err)
		if perr.Code == protocol.CodeNotFound {
			s.log.Info("fetch by unknown agent", zap.String("agent_id", agentID))
		} else {
			s.log.Warn("fetch failed", zap.String("agent_id", agentID), zap.Error(res.Err))
		}
		s.respondError(replyTo, perr)
		return
	}
	body, ok := encoded[res.Reply]
	if !ok {
		var err error
		if body, err = json.Marshal(res.Reply); err != nil {
			s.log.Error("fetch reply encoding failed", zap.String("agent_id", agentID), zap.Error(err))
			s.respondError(replyTo, protocol.Errorf(protocol.CodeInternal, "internal error"))
			return
		}
		encoded[res.Reply] = body
	}
	if replyTo == "" {
		return
	}
	if err := s.nc.Publish(replyTo, body); err != nil {
		s.log.Warn("fetch reply failed", zap.String("agent_id", agentID), zap.Int("bytes", len(body)), zap.Error(err))
		if errors.Is(err, nats.ErrMaxPayload) {
			s.respondError(replyTo, protocol.Errorf(protocol.CodeInternal, "configs exceed the NATS max payload"))
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

// respondError answers with e both as micro error headers and as the body {"error": {...}}, as
// micro.Request.Error does.
func (s *FetchServer) respondError(replyTo string, e *protocol.Error) {
	if replyTo == "" {
		return
	}
	msg := &nats.Msg{
		Subject: replyTo,
		Header: nats.Header{
			micro.ErrorCodeHeader: {e.Code},
			micro.ErrorHeader:     {headerSafe(e.Message)},
		},
		Data: errorBody(e),
	}
	if err := s.nc.PublishMsg(msg); err != nil {
		s.log.Warn("fetch error reply failed", zap.Error(err))
	}
}

// headerSafe keeps an error message usable as a NATS header value (one line).
func headerSafe(msg string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(msg) }

func errorBody(e *protocol.Error) []byte {
	body, _ := json.Marshal(struct {
		Error *protocol.Error `json:"error"`
	}{e})
	return body
}
