package natsrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
)

// DefaultMaxPayload is NATS's default max_payload, used until the connection learns the server's.
const DefaultMaxPayload = 1 << 20

// ErrPayloadTooLarge is returned by Request.Respond for a reply over the connection's max payload
// (the request has then been answered as internal).
var ErrPayloadTooLarge = errors.New("natsrpc: reply exceeds the NATS max payload")

// Config configures a Server.
type Config struct {
	// Service is announced on $SRV.INFO (Name, Version, Description).
	Service micro.Config
	// RequestTimeout bounds the work on one request handed to a Pool (default 10s).
	RequestTimeout time.Duration
	// MapError turns a handler's error into the error sent back: the one place a service maps its
	// domain errors to protocol codes (and logs what it keeps to itself). Nil answers every error as
	// internal.
	MapError func(endpoint string, err error) *protocol.Error
	// AllowReply, when set, is asked about every request before it is dispatched: a request whose reply
	// subject it refuses is dropped unanswered (and logged). Nil allows every reply subject.
	AllowReply func(subject, reply string) bool
	// Observer, when set, is told about every request answered (libs/platform/metrics implements it).
	Observer Observer
}

// Observer is told how each request ended. Implementations must be safe for concurrent use and must
// not block.
type Observer interface {
	// Answered is called once per request: code is "ok" for a reply, the protocol error code for an
	// error reply, "reply_failed" when publishing the reply failed, "dropped" for a request whose
	// reply subject was refused, or "expired" for one that waited in a Batcher past its timeout;
	// elapsed runs from its arrival.
	Answered(service, endpoint, code string, elapsed time.Duration)
	// Batch is called per handler call of a Batcher with the number of requests handed to it.
	Batch(service, endpoint string, size int)
}

// Endpoint names one endpoint of a Server.
type Endpoint struct {
	Name    string
	Subject string
	// QueueGroup overrides micro's default queue group; replicas in one group share requests.
	QueueGroup string
}

// Dispatcher runs the requests of an endpoint: a *Pool or a *Batcher.
type Dispatcher interface {
	// dispatch queues r, or returns errBusy or errStopping without keeping it.
	dispatch(r *Request) error
	// start binds the dispatcher to its server; close stops it, waiting for queued requests until ctx
	// is done.
	start(s *Server)
	close(ctx context.Context) error
}

var (
	errBusy     = errors.New("natsrpc: queue full")
	errStopping = errors.New("natsrpc: stopping")
)

// Server is a micro service whose endpoints are answered by dispatchers.
type Server struct {
	nc  *nats.Conn
	cfg Config
	log *zap.Logger
	svc micro.Service

	// ctx is the parent of every request's context; Stop cancels it once its own ctx is done.
	ctx    context.Context
	cancel context.CancelFunc

	mu          sync.Mutex
	dispatchers []Dispatcher
	stopped     atomic.Bool // Stop was called
	stopping    atomic.Bool // the endpoints are unsubscribed: refuse what they still deliver

	refused     atomic.Int64 // requests refused because a queue was full, since the last log line
	refusedLogT atomic.Int64 // unix nanos of the last such log line
}

// NewServer adds the micro service cfg.Service on nc. Add endpoints with Handle; Stop removes it.
func NewServer(nc *nats.Conn, cfg Config, log *zap.Logger) (*Server, error) {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	svc, err := micro.AddService(nc, cfg.Service)
	if err != nil {
		return nil, fmt.Errorf("natsrpc: add service %s: %w", cfg.Service.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{nc: nc, cfg: cfg, log: log, svc: svc, ctx: ctx, cancel: cancel}, nil
}

// Route is an endpoint and the dispatcher that answers it.
type Route struct {
	Endpoint
	Dispatcher Dispatcher
}

// Serve adds the micro service cfg.Service on nc with every route registered; when a route cannot be
// registered it removes the service again and returns the error.
func Serve(nc *nats.Conn, cfg Config, log *zap.Logger, routes ...Route) (*Server, error) {
	srv, err := NewServer(nc, cfg, log)
	if err != nil {
		return nil, err
	}
	for _, r := range routes {
		if err := srv.Handle(r.Endpoint, r.Dispatcher); err != nil {
			_ = srv.Stop(context.Background())
			return nil, err
		}
	}
	return srv, nil
}

// ID is the micro service instance's id.
func (s *Server) ID() string { return s.svc.Info().ID }

// Handle registers e, answered by d. A dispatcher serves one endpoint or several.
func (s *Server) Handle(e Endpoint, d Dispatcher) error {
	s.mu.Lock()
	known := false
	for _, other := range s.dispatchers {
		known = known || other == d
	}
	if !known {
		d.start(s)
		s.dispatchers = append(s.dispatchers, d)
	}
	s.mu.Unlock()
	opts := []micro.EndpointOpt{micro.WithEndpointSubject(e.Subject)}
	if e.QueueGroup != "" {
		opts = append(opts, micro.WithEndpointQueueGroup(e.QueueGroup))
	}
	name := e.Name
	if err := s.svc.AddEndpoint(name, micro.HandlerFunc(func(req micro.Request) { s.receive(name, d, req) }), opts...); err != nil {
		return fmt.Errorf("natsrpc: add endpoint %s: %w", name, err)
	}
	// Once Handle returns, the server knows the subscription: a request sent right after a service
	// reports itself started must not meet "no responders".
	if err := s.nc.FlushTimeout(5 * time.Second); err != nil {
		s.log.Warn("endpoint subscription not confirmed by the server", zap.String("endpoint", name), zap.Error(err))
	}
	return nil
}

// Stop unsubscribes the endpoints (requests NATS already delivered are refused as shutting down) and
// waits for the dispatched requests until ctx is done, after which their contexts are cancelled.
// A nil Server (never started) has nothing to stop.
func (s *Server) Stop(ctx context.Context) error {
	if s == nil || !s.stopped.CompareAndSwap(false, true) {
		return nil
	}
	defer s.cancel()
	var errs []error
	if err := s.svc.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("natsrpc: stop service: %w", err))
	}
	// The subscriptions drain in the background: what they still deliver is refused.
	s.stopping.Store(true)
	// The server has processed the unsubscriptions once it answers a flush: from then on a request sent
	// after Stop returns goes to another replica (or to no one), never to this draining instance.
	// Bounded: during a NATS outage the flush cannot be answered, and shutdown must not wait for it.
	if err := s.nc.FlushTimeout(2 * time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.log.Warn("endpoint unsubscriptions not confirmed by the server", zap.Error(err))
	}
	s.mu.Lock()
	dispatchers := s.dispatchers
	s.mu.Unlock()
	// Cancel the requests left once ctx is done, so every dispatcher returns soon after.
	stop := context.AfterFunc(ctx, s.cancel)
	defer stop()
	for _, d := range dispatchers {
		if err := d.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("natsrpc: wait for requests: %w", err))
		}
	}
	return errors.Join(errs...)
}

// receive runs on the endpoint's subscription: it copies what the dispatcher needs of req (never req
// itself) and hands it over.
func (s *Server) receive(endpoint string, d Dispatcher, req micro.Request) {
	r := &Request{
		Endpoint: endpoint,
		Subject:  req.Subject(),
		Reply:    req.Reply(),
		Data:     req.Data(),
		Header:   nats.Header(req.Headers()),
		Arrived:  time.Now(),
		srv:      s,
	}
	if s.cfg.AllowReply != nil && !s.cfg.AllowReply(r.Subject, r.Reply) {
		r.answered.Store(true)
		r.observe("dropped")
		s.log.Warn("request dropped: reply subject not allowed", zap.String("endpoint", endpoint),
			zap.String("subject", r.Subject), zap.String("reply", HeaderValue(r.Reply)))
		return
	}
	if s.stopping.Load() {
		r.Error(protocol.Errorf(protocol.CodeUnavailable, "%s is shutting down, retry", s.cfg.Service.Name))
		return
	}
	switch err := d.dispatch(r); {
	case errors.Is(err, errBusy):
		e := protocol.Errorf(protocol.CodeUnavailable, "%s is busy, retry later", s.cfg.Service.Name)
		var busy *busyError
		if errors.As(err, &busy) {
			e.RetryAfterMS = max(1, busy.retryAfter.Milliseconds())
		}
		r.Error(e)
		s.logRefused(endpoint, r.Arrived)
	case err != nil:
		r.Error(protocol.Errorf(protocol.CodeUnavailable, "%s is shutting down, retry", s.cfg.Service.Name))
	}
}

// logRefused logs refused requests at most once a second, with how many since the last line.
func (s *Server) logRefused(endpoint string, now time.Time) {
	n := s.refused.Add(1)
	last := s.refusedLogT.Load()
	if now.UnixNano()-last < int64(time.Second) || !s.refusedLogT.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	s.refused.Add(-n)
	s.log.Warn("queue full, requests refused", zap.String("endpoint", endpoint), zap.Int64("refused", n))
}

// mapError is the server's MapError, or internal.
func (s *Server) mapError(endpoint string, err error) *protocol.Error {
	if s.cfg.MapError != nil {
		if e := s.cfg.MapError(endpoint, err); e != nil {
			return e
		}
	}
	return protocol.Errorf(protocol.CodeInternal, "internal error")
}

func (s *Server) maxPayload() int {
	if n := s.nc.MaxPayload(); n > 0 {
		return int(n)
	}
	return DefaultMaxPayload
}

// recovered logs a recovered panic. Its value is logged only when it is a runtime error: any other
// value could hold request data (secrets on the credential path).
func (s *Server) recovered(endpoint string, p any) {
	fields := []zap.Field{zap.String("endpoint", endpoint), zap.String("panic_type", fmt.Sprintf("%T", p)),
		zap.ByteString("stack", debug.Stack())}
	if re, ok := p.(runtime.Error); ok {
		fields = append(fields, zap.String("panic", re.Error()))
	}
	s.log.Error("request panicked", fields...)
}

// Request is a received request, safe to keep after the endpoint's handler returned.
type Request struct {
	Endpoint string
	Subject  string
	// Reply is the reply subject; empty when the caller asked for no reply.
	Reply   string
	Data    []byte
	Header  nats.Header
	Arrived time.Time

	srv      *Server
	answered atomic.Bool
}

// MaxPayload is the most bytes a reply may hold on the server's connection.
func (r *Request) MaxPayload() int { return r.srv.maxPayload() }

// Answered reports whether the request has been answered (or dropped).
func (r *Request) Answered() bool { return r.answered.Load() }

// Respond sends body as the reply. A body over the connection's max payload is not sent: the request is
// answered as internal and ErrPayloadTooLarge returned.
func (r *Request) Respond(body []byte) error {
	if !r.answered.CompareAndSwap(false, true) {
		return nil
	}
	if r.Reply == "" {
		r.observe("ok")
		return nil
	}
	if max := r.srv.maxPayload(); len(body) > max {
		return r.tooLarge(len(body), nats.ErrMaxPayload)
	}
	err := r.srv.nc.Publish(r.Reply, body)
	if errors.Is(err, nats.ErrMaxPayload) {
		return r.tooLarge(len(body), err)
	}
	if err != nil {
		r.srv.log.Warn("reply failed", zap.String("endpoint", r.Endpoint), zap.Int("bytes", len(body)), zap.Error(err))
		r.observe("reply_failed")
		return fmt.Errorf("natsrpc: reply: %w", err)
	}
	r.observe("ok")
	return nil
}

// observe reports the request's end to the server's Observer.
func (r *Request) observe(code string) {
	if o := r.srv.cfg.Observer; o != nil {
		o.Answered(r.srv.cfg.Service.Name, r.Endpoint, code, time.Since(r.Arrived))
	}
}

func (r *Request) tooLarge(n int, cause error) error {
	r.srv.log.Error("reply exceeds the NATS max payload", zap.String("endpoint", r.Endpoint), zap.Int("bytes", n),
		zap.Int("max_payload", r.srv.maxPayload()))
	r.sendError(protocol.Errorf(protocol.CodeInternal, "reply exceeds the NATS max payload"))
	return fmt.Errorf("%w: %d bytes: %w", ErrPayloadTooLarge, n, cause)
}

// RespondJSON sends v encoded as JSON; a json.RawMessage or []byte is sent as it is.
func (r *Request) RespondJSON(v any) error {
	body, err := protocol.EncodeJSON(v)
	if err != nil {
		r.srv.log.Error("reply encoding failed", zap.String("endpoint", r.Endpoint), zap.Error(err))
		r.Error(protocol.Errorf(protocol.CodeInternal, "internal error"))
		return fmt.Errorf("natsrpc: encode reply: %w", err)
	}
	return r.Respond(body)
}

// Fail answers err as mapped by the server's MapError.
func (r *Request) Fail(err error) { r.Error(r.srv.mapError(r.Endpoint, err)) }

// Error answers e as a micro error (code and description headers) with the body
// {"error":{"code","message"}}.
func (r *Request) Error(e *protocol.Error) {
	if !r.answered.CompareAndSwap(false, true) {
		return
	}
	r.sendError(e)
}

func (r *Request) sendError(e *protocol.Error) {
	r.observe(e.Code)
	if r.Reply == "" {
		return
	}
	msg := &nats.Msg{
		Subject: r.Reply,
		Header:  nats.Header{micro.ErrorCodeHeader: {e.Code}, micro.ErrorHeader: {HeaderValue(e.Message)}},
		Data:    ErrorBody(e),
	}
	if err := r.srv.nc.PublishMsg(msg); err != nil {
		r.srv.log.Warn("error reply failed", zap.String("endpoint", r.Endpoint), zap.Error(err))
	}
}

// ErrorBody is the body of an error reply: {"error":{"code","message"}}.
func ErrorBody(e *protocol.Error) []byte {
	body, _ := json.Marshal(errorReply{Error: e}) // strings only: cannot fail
	return body
}

type errorReply struct {
	Error *protocol.Error `json:"error"`
}
