// Package natsapi exposes the resolver as the nats.go micro service "resolver" with the endpoints
// configsync.svc.resolver.resolve, configsync.svc.resolver.resolve_agents and
// configsync.svc.resolver.resolve_batch. Replicas share requests through the endpoints' queue group.
// Requests are decoded here, handed to a bounded worker pool (a micro endpoint delivers one request at a
// time per instance) and answered with JSON or a micro error carrying a stable protocol error code.
package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/libs/platform/workerpool"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// ServiceVersion is the version the micro service announces on $SRV.INFO.
const ServiceVersion = "1.0.0"

// defaultMaxPayload is NATS's default max_payload, used until the connection learns the server's.
const defaultMaxPayload = 1 << 20

// Options tune the NATS edge.
type Options struct {
	// Workers bounds concurrent single-host resolves.
	Workers int
	// BatchWorkers bounds concurrent batch pages. Batches have their own pool so a big batch never
	// holds up small resolves.
	BatchWorkers int
	// RequestTimeout bounds the work on one request.
	RequestTimeout time.Duration
}

// Service is the resolver's micro service.
type Service struct {
	resolver *resolve.Resolver
	log      *zap.Logger
	opts     Options

	nc          *nats.Conn
	svc         micro.Service
	resolvePool *workerpool.Pool
	batchPool   *workerpool.Pool
	ctx         context.Context
	cancel      context.CancelFunc
}

// New returns a Service answering requests with resolver. Start registers it on a connection.
func New(resolver *resolve.Resolver, opts Options, log *zap.Logger) *Service {
	if opts.Workers <= 0 {
		opts.Workers = 16
	}
	if opts.BatchWorkers <= 0 {
		opts.BatchWorkers = 2
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{
		resolver:    resolver,
		log:         log,
		opts:        opts,
		resolvePool: workerpool.New(opts.Workers),
		batchPool:   workerpool.New(opts.BatchWorkers),
		ctx:         ctx,
		cancel:      cancel,
	}
}

// Start registers the micro service and its endpoints on nc.
func (s *Service) Start(nc *nats.Conn) error {
	// Set before any endpoint subscribes: handlers reply through it.
	s.nc = nc
	svc, err := micro.AddService(nc, micro.Config{
		Name:        protocol.ResolverServiceName,
		Version:     ServiceVersion,
		Description: "Resolves hosts' effective agent configs (environment defaults merged with host overrides).",
	})
	if err != nil {
		return fmt.Errorf("natsapi: add service: %w", err)
	}
	endpoints := []struct {
		name, subject string
		handler       micro.HandlerFunc
	}{
		{"resolve", protocol.ResolveSubject, s.handleResolve},
		{"resolve_agents", protocol.ResolveAgentsSubject, s.handleResolveAgents},
		{"resolve_batch", protocol.ResolveBatchSubject, s.handleResolveBatch},
	}
	for _, e := range endpoints {
		if err := svc.AddEndpoint(e.name, e.handler, micro.WithEndpointSubject(e.subject)); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("natsapi: add endpoint %s: %w", e.name, err)
		}
	}
	s.svc = svc
	s.log.Info("resolver service started", zap.String("service_id", svc.Info().ID))
	return nil
}

// Stop unsubscribes the endpoints (draining what NATS already delivered) and waits for in-flight
// requests until ctx is done, then cancels what is left.
func (s *Service) Stop(ctx context.Context) error {
	defer s.cancel()
	var errs []error
	if s.svc != nil {
		if err := s.svc.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("natsapi: stop service: %w", err))
		}
	}
	if err := s.resolvePool.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("natsapi: wait for resolves: %w", err))
	}
	if err := s.batchPool.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("natsapi: wait for batches: %w", err))
	}
	return errors.Join(errs...)
}

func (s *Service) handleResolve(req micro.Request) {
	s.dispatch(s.resolvePool, req, "resolve", func(ctx context.Context, data []byte) (any, error) {
		return s.resolve(ctx, data)
	})
}

// handleResolveAgents shares the single-host pool: a request for many agents replaces as many
// single-host resolves on the fetch path.
func (s *Service) handleResolveAgents(req micro.Request) {
	s.dispatch(s.resolvePool, req, "resolve_agents", func(ctx context.Context, data []byte) (any, error) {
		return s.resolveAgents(ctx, data, s.maxPayload())
	})
}

func (s *Service) handleResolveBatch(req micro.Request) {
	s.dispatch(s.batchPool, req, "resolve_batch", func(ctx context.Context, data []byte) (any, error) {
		return s.resolveBatch(ctx, data, s.maxPayload())
	})
}

// resolve decodes and answers one resolve request body.
func (s *Service) resolve(ctx context.Context, data []byte) (protocol.ResolveReply, error) {
	req, err := decodeResolveRequest(data)
	if err != nil {
		return protocol.ResolveReply{}, err
	}
	return s.resolver.Resolve(ctx, req)
}

// resolveAgents decodes and answers one resolve_agents request body, encoded within maxBytes.
func (s *Service) resolveAgents(ctx context.Context, data []byte, maxBytes int) (json.RawMessage, error) {
	req, err := decodeResolveAgentsRequest(data)
	if err != nil {
		return nil, err
	}
	reply, err := s.resolver.ResolveAgents(ctx, req)
	if err != nil {
		return nil, err
	}
	return encodeAgentsReply(reply, maxBytes)
}

// resolveBatch decodes and answers one resolve_batch request body within maxBytes.
func (s *Service) resolveBatch(ctx context.Context, data []byte, maxBytes int) (protocol.ResolveBatchReply, error) {
	req, err := decodeResolveBatchRequest(data)
	if err != nil {
		return protocol.ResolveBatchReply{}, err
	}
	return s.resolver.ResolveBatch(ctx, req, maxBytes)
}

func (s *Service) maxPayload() int {
	if s.nc != nil {
		if n := s.nc.MaxPayload(); n > 0 {
			return int(n)
		}
	}
	return defaultMaxPayload
}

// dispatch runs work for req on pool and sends its reply. The reply is published from the pool
// goroutine straight to the request's reply subject: micro.Request is not safe to use after the handler
// returns (micro reads its state for $SRV.STATS), so the worker never touches it.
func (s *Service) dispatch(pool *workerpool.Pool, req micro.Request, endpoint string, work func(context.Context, []byte) (any, error)) {
	replyTo, data := req.Reply(), req.Data()
	ok := pool.Go(func() {
		ctx, cancel := context.WithTimeout(s.ctx, s.opts.RequestTimeout)
		defer cancel()
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("resolver request panicked", zap.String("endpoint", endpoint),
					zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
				s.respondError(replyTo, endpoint, protocol.Errorf(protocol.CodeInternal, "internal error"))
			}
		}()
		reply, err := work(ctx, data)
		if err != nil {
			s.respondError(replyTo, endpoint, s.replyError(endpoint, err))
			return
		}
		s.respond(replyTo, endpoint, reply)
	})
	if !ok {
		s.respondError(replyTo, endpoint, protocol.Errorf(protocol.CodeUnavailable, "resolver is shutting down"))
	}
}

// respond sends reply as JSON (a json.RawMessage is sent as it is).
func (s *Service) respond(replyTo, endpoint string, reply any) {
	if replyTo == "" {
		return
	}
	body, encoded := reply.(json.RawMessage)
	if !encoded {
		var err error
		if body, err = json.Marshal(reply); err != nil {
			s.log.Error("resolver reply encoding failed", zap.String("endpoint", endpoint), zap.Error(err))
			s.respondError(replyTo, endpoint, protocol.Errorf(protocol.CodeInternal, "internal error"))
			return
		}
	}
	if err := s.nc.Publish(replyTo, body); err != nil {
		s.log.Error("resolver reply failed", zap.String("endpoint", endpoint), zap.Int("bytes", len(body)), zap.Error(err))
		if errors.Is(err, nats.ErrMaxPayload) {
			s.respondError(replyTo, endpoint, protocol.Errorf(protocol.CodeInternal, "reply exceeds the NATS max payload"))
		}
	}
}

// replyError maps an error to its protocol code, in one place. Internal details are logged, not sent.
func (s *Service) replyError(endpoint string, err error) *protocol.Error {
	switch {
	case errors.Is(err, resolve.ErrInvalidRequest):
		return protocol.Errorf(protocol.CodeInvalidRequest, "%s", err.Error())
	case errors.Is(err, resolve.ErrNotFound):
		return protocol.Errorf(protocol.CodeNotFound, "%s", err.Error())
	case errors.Is(err, resolve.ErrReplyTooLarge):
		s.log.Error("resolver reply too large", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeInternal, "a single host's config exceeds the NATS max payload")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		s.log.Warn("resolver request timed out", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeUnavailable, "resolver timed out")
	case pgdb.IsUnavailable(err):
		// An outage, not a bug: "unavailable" tells callers to try again later.
		s.log.Warn("resolver request failed: database unavailable", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeUnavailable, "database unavailable")
	default:
		s.log.Error("resolver request failed", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeInternal, "internal error")
	}
}

// respondError sends e as a micro error (the Nats-Service-Error-Code and Nats-Service-Error headers)
// with the body {"error":{"code","message"}}, so clients can read it either way.
func (s *Service) respondError(replyTo, endpoint string, e *protocol.Error) {
	if replyTo == "" {
		return
	}
	body, err := json.Marshal(struct {
		Error *protocol.Error `json:"error"`
	}{e})
	if err != nil {
		body = nil
	}
	msg := &nats.Msg{
		Subject: replyTo,
		Header:  nats.Header{micro.ErrorCodeHeader: {e.Code}, micro.ErrorHeader: {headerSafe(e.Message)}},
		Data:    body,
	}
	if err := s.nc.PublishMsg(msg); err != nil {
		s.log.Warn("resolver error reply failed", zap.String("endpoint", endpoint), zap.Error(err))
	}
}

// headerSafe keeps a description usable as a NATS header value: one line, bounded, never empty.
func headerSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	if len(s) > 512 {
		s = s[:512]
	}
	if strings.TrimSpace(s) == "" {
		return "error"
	}
	return s
}
