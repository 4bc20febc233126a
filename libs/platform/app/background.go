package app

import (
	"context"
	"sync"

	"go.uber.org/fx"
)

// Background is one goroutine that runs until it is stopped: Start runs it with a context that Stop
// cancels, and Stop waits for it to return. The zero value is ready to use; it is safe for concurrent
// use.
type Background struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs run in a new goroutine with a context cancelled by Stop. While a goroutine it began has
// not returned from a Stop, Start does nothing.
func (b *Background) Start(run func(context.Context)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.cancel, b.done = cancel, done
	go func() {
		defer close(done)
		run(ctx)
	}()
}

// Stop cancels the goroutine's context and waits for it to return until ctx is done, when it returns
// ctx.Err() (the goroutine still counts as running: a later Stop waits again). Without a goroutine it
// returns nil at once. Once it has returned nil, Start may run another.
func (b *Background) Stop(ctx context.Context) error {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.mu.Lock()
	if b.done == done {
		b.cancel, b.done = nil, nil
	}
	b.mu.Unlock()
	return nil
}

// RunForLifetime runs run in a goroutine from the app's start; stopping the app cancels its context
// and waits for it to return (or for the stop deadline).
func RunForLifetime(lc fx.Lifecycle, run func(context.Context)) {
	var b Background
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			b.Start(run)
			return nil
		},
		OnStop: b.Stop,
	})
}
