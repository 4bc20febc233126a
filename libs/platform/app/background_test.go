package app

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
)

func TestBackgroundStartStop(t *testing.T) {
	var b Background
	if err := b.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	var runs atomic.Int32
	started := make(chan struct{}, 2)
	run := func(ctx context.Context) {
		runs.Add(1)
		started <- struct{}{}
		<-ctx.Done()
	}
	b.Start(run)
	<-started
	b.Start(run) // still running: nothing
	if err := b.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("runs after a second Start while running = %d, want 1", n)
	}
	b.Start(run) // stopped: runs again
	<-started
	if err := b.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("runs after restart = %d, want 2", n)
	}
}

func TestBackgroundStopDeadline(t *testing.T) {
	var b Background
	release := make(chan struct{})
	b.Start(func(context.Context) { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop of a goroutine ignoring its context = %v, want deadline exceeded", err)
	}
	close(release)
	if err := b.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after it returned: %v", err)
	}
}

func TestRunForLifetime(t *testing.T) {
	var cancelled atomic.Bool
	started := make(chan struct{})
	app := fxtest.New(t, fx.Invoke(func(lc fx.Lifecycle) {
		RunForLifetime(lc, func(ctx context.Context) {
			close(started)
			<-ctx.Done()
			cancelled.Store(true)
		})
	}))
	app.RequireStart()
	<-started
	app.RequireStop()
	if !cancelled.Load() {
		t.Fatal("stopping the app returned before the goroutine saw its context cancelled")
	}
}
