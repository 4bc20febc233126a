package natsrpc

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
)

// Handler answers one request: it returns the reply (encoded by Request.RespondJSON) or an error
// (answered through the server's MapError). A handler may answer the request itself instead, for
// instance to wipe the reply's buffer once sent; what it returns is then ignored.
type Handler func(ctx context.Context, req *Request) (any, error)

// PoolOptions size a Pool.
type PoolOptions struct {
	// Workers is how many requests run at once (at least one).
	Workers int
	// Queue is how many requests may wait for a worker. Beyond that, with Queue > 0, a request is
	// refused at once with unavailable. With Queue == 0 the endpoint's subscription waits for a free
	// worker instead (NATS holds the pending requests), as backpressure.
	Queue int
}

// Pool answers each request of its endpoints with its handler on a bounded set of workers.
type Pool struct {
	handle  Handler
	workers chan struct{}
	// admitted bounds the requests running or waiting (Workers+Queue) when Queue > 0.
	admitted chan struct{}

	srv    *Server
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// NewPool returns a pool answering with handle.
func NewPool(opts PoolOptions, handle Handler) *Pool {
	p := &Pool{handle: handle, workers: make(chan struct{}, max(opts.Workers, 1))}
	if opts.Queue > 0 {
		p.admitted = make(chan struct{}, cap(p.workers)+opts.Queue)
	}
	return p
}

func (p *Pool) start(s *Server) { p.srv = s }

func (p *Pool) dispatch(r *Request) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errStopping
	}
	if p.admitted != nil {
		select {
		case p.admitted <- struct{}{}:
		default:
			p.mu.Unlock()
			return errBusy
		}
	}
	p.wg.Add(1)
	p.mu.Unlock()
	if p.admitted == nil {
		p.workers <- struct{}{} // backpressure: the subscription waits for a worker
	}
	go func() {
		defer p.wg.Done()
		if p.admitted != nil {
			defer func() { <-p.admitted }()
			p.workers <- struct{}{}
		}
		defer func() { <-p.workers }()
		p.run(r)
	}()
	return nil
}

func (p *Pool) run(r *Request) {
	ctx, cancel := context.WithTimeout(p.srv.ctx, p.srv.cfg.RequestTimeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			p.srv.recovered(r.Endpoint, v)
			r.Error(protocol.Errorf(protocol.CodeInternal, "internal error"))
		}
	}()
	reply, err := p.handle(ctx, r)
	switch {
	case err != nil:
		r.Fail(err)
	case !r.Answered():
		_ = r.RespondJSON(reply) // a failure is logged and answered by RespondJSON
	}
}

func (p *Pool) close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// BatchHandler answers a batch of requests. It must answer every request it is given (Respond,
// RespondJSON, Error or Fail); after a panic the Batcher answers those left as internal.
type BatchHandler func(ctx context.Context, reqs []*Request)

// BatchOptions size a Batcher.
type BatchOptions struct {
	// Workers bounds the requests being answered at once; they are answered in batches of up to Batch,
	// so Workers/Batch batches run at a time (at least one).
	Workers int
	// Queue is how many received requests may wait for a batch (default 4096); when it is full,
	// further requests are refused at once with unavailable, and the refusal says when to come back
	// (retry_after_ms: the time to work off the queue and the recent refusals at the measured
	// answering rate, jittered; between MinRetryAfter and twice MaxRetryAfter).
	Queue int
	// Batch is the most requests answered together (default 1).
	Batch int
	// BatchWait is how long a batch waits for more requests while other batches are running. An idle
	// dispatcher answers a request at once.
	BatchWait time.Duration
	// Timeout bounds a request from its arrival (default 10s): a request still queued by then is
	// dropped unanswered (its caller has given up), and a batch works until its newest request's
	// timeout.
	Timeout time.Duration
}

// Batcher answers the requests of its endpoints in batches. A batch is formed only once a batch slot
// is free, so while every slot is busy requests accumulate in the queue and the next batch takes them
// all: batches grow with the load.
type Batcher struct {
	handle BatchHandler
	opts   BatchOptions

	srv   *Server
	queue chan *Request
	slots chan struct{}
	// served and refused measure the answering rate and the refusals, for the retry delay a refused
	// request is given.
	served, refused rateMeter
	mu              sync.Mutex
	closed          bool
	stopping        chan struct{}
	done            chan struct{}
}

// WithDefaults returns o with the default in every field left zero (or negative): 64 workers, a
// queue of 4096, batches of 1, no batch wait and a 10s timeout. NewBatcher applies them; a caller that
// reports or derives from its options applies them first.
func (o BatchOptions) WithDefaults() BatchOptions {
	if o.Workers <= 0 {
		o.Workers = 64
	}
	if o.Queue <= 0 {
		o.Queue = 4096
	}
	if o.Batch <= 0 {
		o.Batch = 1
	}
	if o.BatchWait < 0 {
		o.BatchWait = 0
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	return o
}

// NewBatcher returns a batcher answering with handle.
func NewBatcher(opts BatchOptions, handle BatchHandler) *Batcher {
	opts = opts.WithDefaults()
	return &Batcher{
		handle:   handle,
		opts:     opts,
		queue:    make(chan *Request, opts.Queue),
		slots:    make(chan struct{}, max(1, opts.Workers/opts.Batch)),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// Queued is how many requests wait for a batch.
func (b *Batcher) Queued() int { return len(b.queue) }

func (b *Batcher) start(s *Server) {
	b.srv = s
	go func() {
		defer close(b.done)
		b.run()
	}()
}

func (b *Batcher) dispatch(r *Request) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errStopping
	}
	select {
	case b.queue <- r:
		return nil
	default:
		now := time.Now()
		b.refused.add(1, now)
		return &busyError{retryAfter: retryAfter(len(b.queue), b.refused.perSecond(now), b.served.perSecond(now), b.opts.Timeout)}
	}
}

// close stops taking requests, answers those queued and waits for them until ctx is done (the server
// then cancels their contexts).
func (b *Batcher) close(ctx context.Context) error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.stopping)
	}
	b.mu.Unlock()
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		<-b.done // the server cancels the batches' contexts: they end soon
		return nil
	}
}

// run takes queued requests off the queue in batches and answers each batch on its own goroutine, at
// most cap(slots) at a time. It returns once stopping, with the queue empty and every batch answered.
func (b *Batcher) run() {
	var batches sync.WaitGroup
	defer batches.Wait()
	for {
		b.slots <- struct{}{}
		reqs := b.collect()
		if len(reqs) == 0 {
			<-b.slots
			return
		}
		batches.Go(func() {
			defer func() { <-b.slots }()
			b.serve(reqs)
		})
	}
}

// collect waits for a request and returns it with the others already queued, up to Batch. While other
// batches are running it waits up to BatchWait for more. It returns nil once stopping and the queue is
// empty.
func (b *Batcher) collect() []*Request {
	var first *Request
	select {
	case first = <-b.queue:
	case <-b.stopping:
		select {
		case first = <-b.queue:
		default:
			return nil
		}
	}
	reqs := make([]*Request, 1, b.opts.Batch)
	reqs[0] = first
queued:
	for len(reqs) < b.opts.Batch {
		select {
		case r := <-b.queue:
			reqs = append(reqs, r)
		default:
			break queued
		}
	}
	if len(reqs) == b.opts.Batch || b.opts.BatchWait == 0 || len(b.slots) <= 1 {
		return reqs
	}
	timer := time.NewTimer(b.opts.BatchWait)
	defer timer.Stop()
	for len(reqs) < b.opts.Batch {
		select {
		case r := <-b.queue:
			reqs = append(reqs, r)
		case <-timer.C:
			return reqs
		case <-b.stopping:
			return reqs
		}
	}
	return reqs
}

// serve drops the requests that waited past the timeout and hands the others to the handler.
func (b *Batcher) serve(reqs []*Request) {
	defer func() {
		if v := recover(); v != nil {
			b.srv.recovered(reqs[0].Endpoint, v)
			for _, r := range reqs {
				r.Error(protocol.Errorf(protocol.CodeInternal, "internal error"))
			}
		}
	}()
	now := time.Now()
	live := reqs[:0:0]
	var latest time.Time
	for _, r := range reqs {
		if now.Sub(r.Arrived) >= b.opts.Timeout {
			// Waited too long in the queue: the caller has given up (it retries or uses its cache).
			r.answered.Store(true)
			r.observe("expired")
			continue
		}
		live = append(live, r)
		if r.Arrived.After(latest) {
			latest = r.Arrived
		}
	}
	if dropped := len(reqs) - len(live); dropped > 0 {
		b.srv.log.Warn("requests dropped after waiting longer than their timeout", zap.String("endpoint", reqs[0].Endpoint),
			zap.Int("dropped", dropped), zap.Duration("timeout", b.opts.Timeout))
	}
	if len(live) == 0 {
		return
	}
	// The batch works until its newest request times out; an answer that comes later for an older
	// request costs one publish to an inbox nobody reads.
	ctx, cancel := context.WithDeadline(b.srv.ctx, latest.Add(b.opts.Timeout))
	defer cancel()
	if o := b.srv.cfg.Observer; o != nil {
		o.Batch(b.srv.cfg.Service.Name, live[0].Endpoint, len(live))
	}
	b.handle(ctx, live)
	b.served.add(len(live), time.Now())
}
