// Package natsapi exposes the credential service as the nats.go micro service "credential" with the
// endpoints configsync.svc.credential.{create,rotate,delete,list,get,inject}. Replicas share requests
// through the endpoints' queue group; libs/platform/natsrpc serves them. Requests are decoded here and
// answered from bounded worker pools (inject batches get their own pool so operator calls never wait
// behind them) with JSON or a protocol error code that replyError maps from the domain's errors, in one
// place. Replies carry metadata only, except inject's, whose buffers are zeroed once sent.
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
	"github.com/configsync/configsync/services/credential/internal/credential"
)

// ServiceVersion is the version the micro service announces on $SRV.INFO.
const ServiceVersion = "1.0.0"

// Options tune the NATS edge.
type Options struct {
	// Workers bounds concurrent management requests (create, rotate, delete, list, get).
	Workers int
	// InjectWorkers bounds concurrent inject batches.
	InjectWorkers int
	// MaxInjectItems caps the items of one inject request.
	MaxInjectItems int
	// RequestTimeout bounds the work on one request (zero: natsrpc's default).
	RequestTimeout time.Duration
	// Observer, when set, is told about every request (metrics).
	Observer natsrpc.Observer
}

// Service is the credential micro service.
type Service struct {
	creds    *credential.Service
	injector *credential.Injector
	log      *zap.Logger
	opts     Options
	srv      *natsrpc.Server
}

// New returns a Service answering with creds and injector. Start registers it on a connection.
func New(creds *credential.Service, injector *credential.Injector, opts Options, log *zap.Logger) *Service {
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	if opts.InjectWorkers <= 0 {
		opts.InjectWorkers = 4
	}
	if opts.MaxInjectItems <= 0 {
		opts.MaxInjectItems = 10000
	}
	return &Service{creds: creds, injector: injector, log: log, opts: opts}
}

// Start registers the micro service and its endpoints on nc.
func (s *Service) Start(nc *nats.Conn) error {
	// Queues of 0: a busy pool holds its subscriptions back (NATS keeps the pending requests).
	adminPool := natsrpc.NewPool(natsrpc.PoolOptions{Workers: s.opts.Workers}, s.admin)
	injectPool := natsrpc.NewPool(natsrpc.PoolOptions{Workers: s.opts.InjectWorkers}, s.handleInject)
	route := func(name, subject string, d natsrpc.Dispatcher) natsrpc.Route {
		return natsrpc.Route{Endpoint: natsrpc.Endpoint{Name: name, Subject: subject}, Dispatcher: d}
	}
	srv, err := natsrpc.Serve(nc, natsrpc.Config{
		Service: micro.Config{
			Name:        protocol.CredentialServiceName,
			Version:     ServiceVersion,
			Description: "Stores collector credentials encrypted and injects them into collector configs.",
		},
		RequestTimeout: s.opts.RequestTimeout,
		MapError:       s.replyError,
		Observer:       s.opts.Observer,
	}, s.log,
		route("create", protocol.CredentialCreateSubject, adminPool),
		route("rotate", protocol.CredentialRotateSubject, adminPool),
		route("delete", protocol.CredentialDeleteSubject, adminPool),
		route("list", protocol.CredentialListSubject, adminPool),
		route("get", protocol.CredentialGetSubject, adminPool),
		route("inject", protocol.CredentialInjectSubject, injectPool),
	)
	if err != nil {
		return fmt.Errorf("natsapi: %w", err)
	}
	s.srv = srv
	s.log.Info("credential service started", zap.String("service_id", srv.ID()))
	return nil
}

// Stop unsubscribes the endpoints and waits for in-flight requests until ctx is done, then cancels
// what is left.
func (s *Service) Stop(ctx context.Context) error { return s.srv.Stop(ctx) }

// admin answers a management endpoint on the admin pool. Request bodies of create and rotate hold
// secrets; the body and the decoded secret are zeroed after use.
func (s *Service) admin(ctx context.Context, req *natsrpc.Request) (any, error) {
	defer clear(req.Data)
	switch req.Endpoint {
	case "create":
		return answer(ctx, req.Data, s.creds.Create, func(r *protocol.CredentialCreateRequest) { clear(r.Secret) })
	case "rotate":
		return answer(ctx, req.Data, s.creds.Rotate, func(r *protocol.CredentialRotateRequest) { clear(r.Secret) })
	case "delete":
		return answer(ctx, req.Data, s.creds.Delete, nil)
	case "list":
		return answer(ctx, req.Data, s.creds.List, nil)
	case "get":
		return answer(ctx, req.Data, s.creds.Get, nil)
	}
	return nil, fmt.Errorf("natsapi: no handler for endpoint %q", req.Endpoint)
}

// answer decodes a management request body into an R and answers it with fn. wipe, when not nil,
// zeroes what the decoded request holds of a secret once answered, also when it was refused.
func answer[R, P any](ctx context.Context, data []byte, fn func(context.Context, R) (P, error), wipe func(*R)) (any, error) {
	req, err := decode[R](data)
	if wipe != nil {
		defer wipe(&req)
	}
	if err != nil {
		return nil, err
	}
	return fn(ctx, req)
}

// handleInject answers an inject batch itself, so that the reply's buffer is zeroed once sent.
func (s *Service) handleInject(ctx context.Context, req *natsrpc.Request) (any, error) {
	body, err := s.inject(ctx, req.Data)
	defer clear(body)
	if err != nil {
		return nil, err
	}
	if max := req.MaxPayload(); len(body) > max {
		return nil, fmt.Errorf("%w: the injected reply is %d bytes, over the NATS max payload of %d; send fewer items per request",
			credential.ErrInvalidRequest, len(body), max)
	}
	_ = req.Respond(body) // a failure is logged by Respond
	return nil, nil
}

// inject decodes one inject request body, runs the batch and returns the encoded reply. The results
// are wiped once encoded; the caller zeroes the returned body once it is sent.
func (s *Service) inject(ctx context.Context, data []byte) ([]byte, error) {
	req, err := decodeInjectRequest(data, s.opts.MaxInjectItems)
	if err != nil {
		return nil, err
	}
	results, err := s.injector.Inject(ctx, req.Items)
	if err != nil {
		return nil, err
	}
	defer credential.Wipe(results)
	body, err := json.Marshal(protocol.InjectReply{Results: results})
	if err != nil {
		return nil, fmt.Errorf("natsapi: encode inject reply: %w", err)
	}
	return body, nil
}

// replyError maps an error to its protocol code, in one place. Internal details are logged, not sent.
// No error reaching here holds a secret value: the domain and adapters build them from ids and names.
func (s *Service) replyError(endpoint string, err error) *protocol.Error {
	switch {
	case errors.Is(err, credential.ErrInvalidRequest):
		return protocol.Errorf(protocol.CodeInvalidRequest, "%s", err.Error())
	case errors.Is(err, credential.ErrNotFound):
		return protocol.Errorf(protocol.CodeNotFound, "%s", err.Error())
	case errors.Is(err, credential.ErrConflict):
		return protocol.Errorf(protocol.CodeConflict, "%s", err.Error())
	case errors.Is(err, credential.ErrStoreUnavailable):
		// An outage, not a bug: "unavailable" tells callers to try again later.
		s.log.Warn("credential request failed: database unavailable", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeUnavailable, "database unavailable")
	case errors.Is(err, credential.ErrUnavailable):
		s.log.Warn("credential cipher unavailable", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeUnavailable, "%s", err.Error())
	case errors.Is(err, credential.ErrDecrypt):
		s.log.Error("credential cannot be decrypted", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeCredentialFailed, "%s", err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		s.log.Warn("credential request timed out", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeUnavailable, "credential service timed out")
	default:
		s.log.Error("credential request failed", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeInternal, "internal error")
	}
}
