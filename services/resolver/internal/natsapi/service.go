// Package natsapi exposes the resolver as the nats.go micro service "resolver" with the endpoints
// configsync.svc.resolver.resolve, and the resolve_sets contract's configsync.svc.resolver.resolve_sets.v1
// (agents' fetches) and configsync.svc.resolver.resolve_push.v1 (pages of a config-change fan-out),
// served by libs/platform/natsrpc. Replicas share requests through the endpoints' queue group. Requests
// are decoded here and answered from two bounded worker pools (single hosts and agents; push pages),
// with JSON or a protocol error code that replyError maps from the domain's errors, in one place.
// Fitting a reply into the NATS max payload happens here too (encode.go), never in the domain.
package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// ServiceVersion is the version the micro service announces on $SRV.INFO.
const ServiceVersion = "1.0.0"

// defaultMaxPayload is NATS's default max_payload, used until the connection learns the server's.
const defaultMaxPayload = natsrpc.DefaultMaxPayload

// Options tune the NATS edge.
type Options struct {
	// Workers bounds concurrent single-host resolves.
	Workers int
	// BatchWorkers bounds concurrent push pages. Pages have their own pool so a big fan-out never
	// holds up small resolves and fetches.
	BatchWorkers int
	// RequestTimeout bounds the work on one request (zero: natsrpc's default).
	RequestTimeout time.Duration
	// Observer, when set, is told about every request (metrics).
	Observer natsrpc.Observer
}

// Service is the resolver's micro service.
type Service struct {
	resolver *resolve.Resolver
	log      *zap.Logger
	opts     Options
	srv      *natsrpc.Server
}

// New returns a Service answering requests with resolver. Start registers it on a connection.
func New(resolver *resolve.Resolver, opts Options, log *zap.Logger) *Service {
	if opts.Workers <= 0 {
		opts.Workers = 16
	}
	if opts.BatchWorkers <= 0 {
		opts.BatchWorkers = 2
	}
	return &Service{resolver: resolver, log: log, opts: opts}
}

// Start registers the micro service and its endpoints on nc.
func (s *Service) Start(nc *nats.Conn) error {
	// A queue of 0: a busy pool holds its subscriptions back (NATS keeps the pending requests). The
	// sets request shares the single-host pool: it replaces as many single-host resolves on the
	// fetch path.
	resolvePool := natsrpc.NewPool(natsrpc.PoolOptions{Workers: s.opts.Workers}, s.handle)
	pushPool := natsrpc.NewPool(natsrpc.PoolOptions{Workers: s.opts.BatchWorkers}, s.handle)
	srv, err := natsrpc.Serve(nc, natsrpc.Config{
		Service: micro.Config{
			Name:        protocol.ResolverServiceName,
			Version:     ServiceVersion,
			Description: "Resolves hosts' effective agent configs (environment defaults merged with host overrides).",
		},
		RequestTimeout: s.opts.RequestTimeout,
		MapError:       s.replyError,
		Observer:       s.opts.Observer,
	}, s.log,
		natsrpc.Route{Endpoint: natsrpc.Endpoint{Name: "resolve", Subject: protocol.ResolveSubject}, Dispatcher: resolvePool},
		natsrpc.Route{Endpoint: natsrpc.Endpoint{Name: "resolve_sets", Subject: protocol.ResolveSetsSubject}, Dispatcher: resolvePool},
		natsrpc.Route{Endpoint: natsrpc.Endpoint{Name: "resolve_push", Subject: protocol.ResolvePushSubject}, Dispatcher: pushPool},
	)
	if err != nil {
		return fmt.Errorf("natsapi: %w", err)
	}
	s.srv = srv
	s.log.Info("resolver service started", zap.String("service_id", srv.ID()))
	return nil
}

// Stop unsubscribes the endpoints (draining what NATS already delivered) and waits for in-flight
// requests until ctx is done, then cancels what is left.
func (s *Service) Stop(ctx context.Context) error { return s.srv.Stop(ctx) }

// handle answers one request of any endpoint.
func (s *Service) handle(ctx context.Context, req *natsrpc.Request) (any, error) {
	switch req.Endpoint {
	case "resolve":
		return s.resolve(ctx, req.Data)
	case "resolve_sets":
		return s.resolveSets(ctx, req.Data, req.MaxPayload())
	case "resolve_push":
		return s.resolvePush(ctx, req.Data, req.MaxPayload())
	}
	return nil, fmt.Errorf("natsapi: no handler for endpoint %q", req.Endpoint)
}

// resolve decodes and answers one resolve request body.
func (s *Service) resolve(ctx context.Context, data []byte) (protocol.ResolveReply, error) {
	req, err := decodeResolveRequest(data)
	if err != nil {
		return protocol.ResolveReply{}, err
	}
	return s.resolver.Resolve(ctx, req)
}

// resolveSets decodes and answers one resolve_sets request body, encoded within maxBytes.
func (s *Service) resolveSets(ctx context.Context, data []byte, maxBytes int) (json.RawMessage, error) {
	return answerSets(ctx, data, maxBytes, decodeResolveSetsRequest, s.resolver.ResolveSets, encodeSetsReply)
}

// resolvePush decodes and answers one resolve_push request body, encoded within maxBytes (the page
// cut short if need be).
func (s *Service) resolvePush(ctx context.Context, data []byte, maxBytes int) (json.RawMessage, error) {
	return answerSets(ctx, data, maxBytes, decodeResolvePushRequest, s.resolver.ResolvePush, encodePushReply)
}

// answerSets decodes a request body with decode, resolves it into config sets with sets and encodes
// the reply within maxBytes with encode: the shape both sets endpoints share.
func answerSets[R any](ctx context.Context, data []byte, maxBytes int,
	decode func([]byte) (R, error),
	sets func(context.Context, R) (protocol.ResolveSetsReply, error),
	encode func(protocol.ResolveSetsReply, int) (json.RawMessage, error),
) (json.RawMessage, error) {
	req, err := decode(data)
	if err != nil {
		return nil, err
	}
	reply, err := sets(ctx, req)
	if err != nil {
		return nil, err
	}
	return encode(reply, maxBytes)
}

// replyError maps an error to its protocol code, in one place. Internal details are logged, not sent.
func (s *Service) replyError(endpoint string, err error) *protocol.Error {
	switch {
	case errors.Is(err, resolve.ErrInvalidRequest):
		return protocol.Errorf(protocol.CodeInvalidRequest, "%s", err.Error())
	case errors.Is(err, resolve.ErrContractMismatch):
		s.log.Warn("resolver request of another contract refused (rolling upgrade in progress?)", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeContractMismatch, "%s", err.Error())
	case errors.Is(err, resolve.ErrNotFound):
		return protocol.Errorf(protocol.CodeNotFound, "%s", err.Error())
	case errors.Is(err, errReplyTooLarge):
		s.log.Error("resolver reply too large", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeInternal, "a single host's config exceeds the NATS max payload")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		s.log.Warn("resolver request timed out", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeUnavailable, "resolver timed out")
	case errors.Is(err, resolve.ErrSigning):
		// The signing key (Vault) is away: agents refuse unsigned configs, so nothing is sent unsigned.
		s.log.Warn("resolver request failed: signing unavailable", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeUnavailable, "signing unavailable")
	case errors.Is(err, resolve.ErrUnavailable):
		// An outage, not a bug: "unavailable" tells callers to try again later.
		s.log.Warn("resolver request failed: database unavailable", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeUnavailable, "database unavailable")
	default:
		s.log.Error("resolver request failed", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeInternal, "internal error")
	}
}
