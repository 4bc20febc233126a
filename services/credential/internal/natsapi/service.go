// Package natsapi exposes the credential service as the nats.go micro service "credential" with the
// endpoints configsync.svc.credential.{create,rotate,delete,list,get,inject}. Replicas share requests
// through the endpoints' queue group. Requests are decoded here, handed to bounded worker pools (a micro
// endpoint delivers one request at a time per instance; inject batches get their own pool so operator
// calls never wait behind them) and answered with JSON or a micro error carrying a stable protocol
// error code. Replies carry metadata only, except inject's, whose buffers are zeroed once sent.
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
	"github.com/configsync/configsync/services/credential/internal/credential"
)

// ServiceVersion is the version the micro service announces on $SRV.INFO.
const ServiceVersion = "1.0.0"

// defaultMaxPayload is NATS's default max_payload, used until the connection learns the server's.
const defaultMaxPayload = 1 << 20

// Options tune the NATS edge.
type Options struct {
	// Workers bounds concurrent management requests (create, rotate, delete, list, get).
	Workers int
	// InjectWorkers bounds concurrent inject batches.
	InjectWorkers int
	// MaxInjectItems caps the items of one inject request.
	MaxInjectItems int
	// RequestTimeout bounds the work on one request.
	RequestTimeout time.Duration
}

// Service is the credential micro service.
type Service struct {
	creds    *credential.Service
	injector *credential.Injector
	log      *zap.Logger
	opts     Options

	nc         *nats.Conn
	svc        micro.Service
	adminPool  *workerpool.Pool
	injectPool *workerpool.Pool
	ctx        context.Context
	cancel     context.CancelFunc
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
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{
		creds:      creds,
		injector:   injector,
		log:        log,
		opts:       opts,
		adminPool:  workerpool.New(opts.Workers),
		injectPool: workerpool.New(opts.InjectWorkers),
		ctx:        ctx,
		cancel:     cancel,
	}
}

// Start registers the micro service and its endpoints on nc.
func (s *Service) Start(nc *nats.Conn) error {
	svc, err := micro.AddService(nc, micro.Config{
		Name:        protocol.CredentialServiceName,
		Version:     ServiceVersion,
		Description: "Stores collector credentials encrypted and injects them into collector configs.",
	})
	if err != nil {
		return fmt.Errorf("natsapi: add service: %w", err)
	}
	endpoints := []struct {
		name, subject string
		handler       micro.HandlerFunc
	}{
		{"create", protocol.CredentialCreateSubject, s.admin("create", s.create)},
		{"rotate", protocol.CredentialRotateSubject, s.admin("rotate", s.rotate)},
		{"delete", protocol.CredentialDeleteSubject, s.admin("delete", s.delete)},
		{"list", protocol.CredentialListSubject, s.admin("list", s.list)},
		{"get", protocol.CredentialGetSubject, s.admin("get", s.get)},
		{"inject", protocol.CredentialInjectSubject, s.handleInject},
	}
	for _, e := range endpoints {
		if err := svc.AddEndpoint(e.name, e.handler, micro.WithEndpointSubject(e.subject)); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("natsapi: add endpoint %s: %w", e.name, err)
		}
	}
	s.nc, s.svc = nc, svc
	s.log.Info("credential service started", zap.String("service_id", svc.Info().ID))
	return nil
}

// Stop unsubscribes the endpoints and waits for in-flight requests until ctx is done, then cancels
// what is left.
func (s *Service) Stop(ctx context.Context) error {
	defer s.cancel()
	var errs []error
	if s.svc != nil {
		if err := s.svc.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("natsapi: stop service: %w", err))
		}
	}
	if err := s.adminPool.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("natsapi: wait for requests: %w", err))
	}
	if err := s.injectPool.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("natsapi: wait for inject batches: %w", err))
	}
	return errors.Join(errs...)
}

func (s *Service) create(ctx context.Context, data []byte) (any, error) {
	req, err := decode[protocol.CredentialCreateRequest](data)
	defer clear(req.Secret)
	if err != nil {
		return nil, err
	}
	return s.creds.Create(ctx, req)
}

func (s *Service) rotate(ctx context.Context, data []byte) (any, error) {
	req, err := decode[protocol.CredentialRotateRequest](data)
	defer clear(req.Secret)
	if err != nil {
		return nil, err
	}
	return s.creds.Rotate(ctx, req)
}

func (s *Service) delete(ctx context.Context, data []byte) (any, error) {
	req, err := decode[protocol.CredentialRef](data)
	if err != nil {
		return nil, err
	}
	return s.creds.Delete(ctx, req)
}

func (s *Service) get(ctx context.Context, data []byte) (any, error) {
	req, err := decode[protocol.CredentialRef](data)
	if err != nil {
		return nil, err
	}
	return s.creds.Get(ctx, req)
}

func (s *Service) list(ctx context.Context, data []byte) (any, error) {
	req, err := decode[protocol.CredentialListRequest](data)
	if err != nil {
		return nil, err
	}
	return s.creds.List(ctx, req)
}

// admin returns the handler of a management endpoint: work runs on the admin pool and its reply is
// sent as JSON. Request bodies of create and rotate hold secrets; they are zeroed after use.
func (s *Service) admin(endpoint string, work func(context.Context, []byte) (any, error)) micro.HandlerFunc {
	return func(req micro.Request) {
		s.dispatch(s.adminPool, req, endpoint, func(ctx context.Context) {
			data := req.Data()
			defer clear(data)
			reply, err := work(ctx, data)
			if err != nil {
				s.respondError(req, endpoint, s.replyError(endpoint, err))
				return
			}
			body, err := json.Marshal(reply)
			if err != nil {
				s.log.Error("credential reply encoding failed", zap.String("endpoint", endpoint), zap.Error(err))
				s.respondError(req, endpoint, protocol.Errorf(protocol.CodeInternal, "internal error"))
				return
			}
			s.respond(req, endpoint, &nats.Msg{Data: body})
		})
	}
}

func (s *Service) handleInject(req micro.Request) {
	s.dispatch(s.injectPool, req, "inject", func(ctx context.Context) {
		body, err := s.inject(ctx, req.Data())
		defer clear(body)
		if err != nil {
			s.respondError(req, "inject", s.replyError("inject", err))
			return
		}
		if max := s.maxPayload(); len(body) > max {
			s.respondError(req, "inject", protocol.Errorf(protocol.CodeInvalidRequest,
				"the injected reply is %d bytes, over the NATS max payload of %d; send fewer items per request", len(body), max))
			return
		}
		s.respond(req, "inject", &nats.Msg{Data: body})
	})
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

func (s *Service) maxPayload() int {
	if s.nc != nil {
		if n := s.nc.MaxPayload(); n > 0 {
			return int(n)
		}
	}
	return defaultMaxPayload
}

// dispatch runs work for req on pool with the request timeout, answering panics and shutdown.
func (s *Service) dispatch(pool *workerpool.Pool, req micro.Request, endpoint string, work func(context.Context)) {
	ok := pool.Go(func() {
		ctx, cancel := context.WithTimeout(s.ctx, s.opts.RequestTimeout)
		defer cancel()
		defer func() {
			if p := recover(); p != nil {
				// The panic value is not logged: it could hold request data.
				s.log.Error("credential request panicked", zap.String("endpoint", endpoint),
					zap.ByteString("stack", debug.Stack()))
				s.respondError(req, endpoint, protocol.Errorf(protocol.CodeInternal, "internal error"))
			}
		}()
		work(ctx)
	})
	if !ok {
		s.respondError(req, endpoint, protocol.Errorf(protocol.CodeUnavailable, "credential service is shutting down"))
	}
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
	case errors.Is(err, credential.ErrUnavailable):
		s.log.Warn("credential cipher unavailable", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeUnavailable, "%s", err.Error())
	case errors.Is(err, credential.ErrDecrypt):
		s.log.Error("credential cannot be decrypted", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeCredentialFailed, "%s", err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		s.log.Warn("credential request timed out", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeUnavailable, "credential service timed out")
	case pgdb.IsUnavailable(err):
		// An outage, not a bug: "unavailable" tells callers to try again later.
		s.log.Warn("credential request failed: database unavailable", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeUnavailable, "database unavailable")
	default:
		s.log.Error("credential request failed", zap.String("endpoint", endpoint), zap.Error(err))
		return protocol.Errorf(protocol.CodeInternal, "internal error")
	}
}

// respondError sends e as a micro error (code and description headers) with the body
// {"error":{"code","message"}}, so clients can read it either way.
func (s *Service) respondError(req micro.Request, endpoint string, e *protocol.Error) {
	body, err := json.Marshal(struct {
		Error *protocol.Error `json:"error"`
	}{e})
	if err != nil {
		body = nil
	}
	s.respond(req, endpoint, &nats.Msg{
		Header: nats.Header{
			micro.ErrorHeader:     []string{headerSafe(e.Message)},
			micro.ErrorCodeHeader: []string{e.Code},
		},
		Data: body,
	})
}

// respond publishes msg to the request's reply subject on the service's connection. Replies are sent
// from worker goroutines, after the micro handler has returned, so they must not go through
// micro.Request's Respond or Error: those record the outcome in the request, which micro reads for its
// stats once the handler returns (a data race). The cost is that $SRV.STATS counts no errors.
func (s *Service) respond(req micro.Request, endpoint string, msg *nats.Msg) {
	if req.Reply() == "" {
		return // the caller asked for no reply
	}
	msg.Subject = req.Reply()
	if err := s.nc.PublishMsg(msg); err != nil {
		s.log.Error("credential reply failed", zap.String("endpoint", endpoint), zap.Error(err))
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
