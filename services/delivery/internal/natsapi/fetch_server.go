// Package natsapi is delivery's NATS edge: the agent fetch endpoint (a micro service in the delivery
// queue group, answered in batches by a libs/platform/natsrpc Batcher), the durable JetStream consumer
// of config-change events (libs/platform/jsconsumer), and the clients of the resolver and credential
// services (natsrpc clients).
package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/platform/tracing"
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
	// BatchOptions batch the fetches of an instance (natsrpc's defaults). A batch of fetches is answered
	// with one resolver request and one credential injection, so Batch is capped at
	// protocol.MaxResolveAgents. A fetch refused because the queue is full makes the agent fall back to
	// its cache and retry with backoff; one still queued after Timeout is dropped unanswered, since an
	// answer that late is useless to the agent.
	natsrpc.BatchOptions
	// Observer, when set, is told about every fetch and batch (metrics).
	Observer natsrpc.Observer
}

// FetchServer answers agents' config fetches on protocol.FetchSubjectAll. The endpoint only queues
// each request; a natsrpc Batcher takes them off the queue in batches and answers each batch with one
// call of the fetcher.
type FetchServer struct {
	fetcher *deliver.Fetcher
	opts    FetchOptions
	log     *zap.Logger

	mu      sync.Mutex
	srv     *natsrpc.Server
	batcher *natsrpc.Batcher

	refusedReplies atomic.Int64
}

// NewFetchServer returns a server answering with fetcher.
func NewFetchServer(fetcher *deliver.Fetcher, opts FetchOptions, log *zap.Logger) *FetchServer {
	opts.BatchOptions = opts.BatchOptions.WithDefaults()
	opts.Batch = min(opts.Batch, protocol.MaxResolveAgents)
	return &FetchServer{fetcher: fetcher, opts: opts, log: log}
}

// Start registers the delivery micro service and its fetch endpoint on nc.
func (s *FetchServer) Start(nc *nats.Conn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("natsapi: fetch server already started")
	}
	batcher := natsrpc.NewBatcher(s.opts.BatchOptions, s.serve)
	srv, err := natsrpc.Serve(nc, natsrpc.Config{
		Service: micro.Config{
			Name:        ServiceName,
			Version:     ServiceVersion,
			Description: "Delivers effective agent configs: startup fetches and pushes of config changes.",
		},
		RequestTimeout: s.opts.Timeout,
		MapError:       func(_ string, err error) *protocol.Error { return fetchError(err) },
		AllowReply:     s.allowReply,
		Observer:       s.opts.Observer,
	}, s.log, natsrpc.Route{Endpoint: natsrpc.Endpoint{Name: "fetch", Subject: protocol.FetchSubjectAll, QueueGroup: protocol.DeliveryQueueGroup},
		Dispatcher: batcher})
	if err != nil {
		return fmt.Errorf("natsapi: start fetch endpoint: %w", err)
	}
	s.srv, s.batcher = srv, batcher
	s.log.Info("fetch endpoint started", zap.String("subject", protocol.FetchSubjectAll),
		zap.String("queue_group", protocol.DeliveryQueueGroup), zap.Int("workers", s.opts.Workers),
		zap.Int("batch", s.opts.Batch), zap.Duration("batch_wait", s.opts.BatchWait), zap.Int("queue", s.opts.Queue))
	return nil
}

// Stop stops receiving fetches, answers those already received and waits until ctx is done, after
// which the remaining ones are cancelled.
func (s *FetchServer) Stop(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Stop(ctx); err != nil {
		return fmt.Errorf("natsapi: stop fetch endpoint: %w", err)
	}
	return nil
}

// Queued is how many fetches wait for a batch.
func (s *FetchServer) Queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.batcher == nil {
		return 0
	}
	return s.batcher.Queued()
}

// serve answers a batch of fetches: malformed ones are refused, the others answered together by the
// fetcher. (The Batcher already dropped those that waited past the fetch timeout.)
func (s *FetchServer) serve(ctx context.Context, reqs []*natsrpc.Request) {
	agents := make([]string, 0, len(reqs))
	pending := make([]*natsrpc.Request, 0, len(reqs)) // pending[k] asked for agents[k]
	for _, r := range reqs {
		agentID, err := decodeFetchRequest(r.Subject, r.Data)
		if err != nil {
			s.log.Info("fetch refused", zap.String("subject", r.Subject), zap.Error(err))
			r.Fail(err)
			continue
		}
		agents = append(agents, agentID)
		pending = append(pending, r)
	}
	if len(agents) == 0 {
		return
	}
	// A fetch an agent traced gets a span of its own (the batch is shared, so the span covers the
	// batch's work for this agent); whether it is kept is the backend's decision (tracing.Sampler).
	spans := make([]trace.Span, len(pending))
	for k, r := range pending {
		if len(r.Header) > 0 {
			_, spans[k] = tracer.Start(tracing.Extract(ctx, r.Header), "delivery.fetch", trace.WithSpanKind(trace.SpanKindServer))
		}
	}
	results := s.fetcher.FetchBatch(ctx, agents)
	b := replyBuilder{encoded: map[*protocol.FetchReply][]byte{}}
	for k, res := range results {
		s.answer(pending[k], agents[k], res, &b)
		if spans[k] != nil {
			spans[k].SetAttributes(attribute.Int("batch", len(agents)))
			if res.Err != nil {
				spans[k].SetStatus(codes.Error, res.Err.Error())
			}
			spans[k].End()
		}
	}
}

// replyBuilder holds what the answers of one batch share: the encoding of each distinct reply (the
// agents of a config set share one), and the buffer a reply with an agent's own identity is spliced
// into (Respond copies it into the connection's buffer, so it is reused for the next agent).
type replyBuilder struct {
	encoded map[*protocol.FetchReply][]byte
	buf     []byte
}

// answer sends one fetch's result.
func (s *FetchServer) answer(r *natsrpc.Request, agentID string, res deliver.FetchResult, b *replyBuilder) {
	if res.Err != nil {
		perr := fetchError(res.Err)
		if perr.Code == protocol.CodeNotFound {
			s.log.Info("fetch by unknown agent", zap.String("agent_id", agentID))
		} else {
			s.log.Warn("fetch failed", zap.String("agent_id", agentID), zap.Error(res.Err))
		}
		r.Error(perr)
		return
	}
	body, ok := b.encoded[res.Reply]
	if !ok {
		var err error
		if body, err = json.Marshal(res.Reply); err != nil {
			s.log.Error("fetch reply encoding failed", zap.String("agent_id", agentID), zap.Error(err))
			r.Error(protocol.Errorf(protocol.CodeInternal, "internal error"))
			return
		}
		b.encoded[res.Reply] = body
	}
	if res.Identity != nil {
		// The reply is shared by the agents of a group; the identity statement is each agent's own.
		var err error
		if b.buf, err = appendWithIdentity(b.buf[:0], body, res.Identity); err != nil {
			s.log.Error("fetch reply encoding failed", zap.String("agent_id", agentID), zap.Error(err))
			r.Error(protocol.Errorf(protocol.CodeInternal, "internal error"))
			return
		}
		body = b.buf
	}
	_ = r.Respond(body) // failures are logged (and an oversized reply answered as internal) by Respond
}

// appendWithIdentity appends to dst the encoded fetch reply (a JSON object without an identity member)
// with the identity member added last, as encoding the reply with its Identity set gives.
func appendWithIdentity(dst, reply []byte, identity *protocol.Signed) ([]byte, error) {
	if len(reply) < 2 || reply[len(reply)-1] != '}' {
		return dst, fmt.Errorf("encode identity: reply is not an object")
	}
	dst = append(dst, reply[:len(reply)-1]...)
	if len(reply) > 2 {
		dst = append(dst, ',')
	}
	dst = append(dst, `"identity":`...)
	dst, err := identity.AppendJSON(dst)
	if err != nil {
		return dst, fmt.Errorf("encode identity: %w", err)
	}
	return append(dst, '}'), nil
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

// allowReply answers a fetch only on the asking agent's own inbox prefix (_INBOX.<agent_id>.), the only
// inbox its NATS user may read. Any other reply subject would let an agent make delivery write a config
// reply of up to the max payload into a subject of its choosing (a JetStream stream, another agent's
// subjects): such a fetch is dropped unanswered and counted.
func (s *FetchServer) allowReply(subject, reply string) bool {
	if agent, ok := protocol.AgentIDFromSubject(subject); ok {
		// reply starts with InboxPrefix(agent) + ".", checked without building that string.
		if rest, ok := strings.CutPrefix(reply, protocol.InboxPrefix("")); ok {
			if rest, ok = strings.CutPrefix(rest, agent); ok && strings.HasPrefix(rest, ".") {
				return true
			}
		}
	}
	s.refusedReplies.Add(1)
	return false
}

// RefusedReplies is how many fetches were dropped because their reply subject was not the agent's own
// inbox.
func (s *FetchServer) RefusedReplies() int64 { return s.refusedReplies.Load() }
