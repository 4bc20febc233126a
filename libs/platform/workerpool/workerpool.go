// Package workerpool bounds how much work a service runs at once: the micro endpoints of ConfigSync
// hand each request to a Pool, so a slow request never blocks the endpoint and load never grows without
// bound.
package workerpool

import (
	"context"
	"sync"
)

// Pool runs at most size tasks at once. Go blocks while the pool is full, which holds back the
// endpoint's subscription (NATS buffers the pending requests) instead of growing without bound.
type Pool struct {
	sem    chan struct{}
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// New returns a pool that runs at most size tasks at once (at least one).
func New(size int) *Pool {
	return &Pool{sem: make(chan struct{}, max(size, 1))}
}

// Go runs task on a pool goroutine; it returns false, without running it, once the pool is closed.
func (p *Pool) Go(task func()) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.wg.Add(1)
	p.mu.Unlock()
	p.sem <- struct{}{}
	go func() {
		defer func() {
			<-p.sem
			p.wg.Done()
		}()
		task()
	}()
	return true
}

// Close refuses new tasks and waits for the running ones, or until ctx is done.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
