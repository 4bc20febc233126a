package scheduler

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// An interval change reaches the running task: at one hour it would run once in the test's lifetime;
// after the update it runs many times.
func TestUpdateIntervalChangesTickRate(t *testing.T) {
	s := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var runs atomic.Int64
	s.Add("metrics", time.Hour, func(context.Context) { runs.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	waitFor(t, func() bool { return runs.Load() == 1 }) // the run at start
	if !s.UpdateInterval("metrics", 2*time.Millisecond) {
		t.Fatal("task not found")
	}
	waitFor(t, func() bool { return runs.Load() >= 20 })
	// Pausing stops the ticks: after the pause is taken, no run starts until a trigger.
	s.UpdateInterval("metrics", 0)
	s.Trigger("metrics") // processed after the pause (same goroutine, channel order not guaranteed)
	before := runs.Load()
	s.Trigger("metrics")
	waitFor(t, func() bool { return runs.Load() > before })
	cancel()
	s.Wait()
	if s.UpdateInterval("nope", time.Second) {
		t.Fatal("unknown task accepted")
	}
}

func TestIntervalBeforeStartAndPausedTask(t *testing.T) {
	s := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var paused, resumed atomic.Int64
	s.Add("paused", 0, func(context.Context) { paused.Add(1) })
	s.Add("later", time.Hour, func(context.Context) { resumed.Add(1) })
	s.UpdateInterval("later", 0) // before Start: only sets the initial value
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); s.Wait() }()
	s.Start(ctx)
	s.UpdateInterval("later", time.Millisecond) // un-pausing runs at once, then ticks
	waitFor(t, func() bool { return resumed.Load() >= 3 })
	if paused.Load() != 0 {
		t.Fatal("a paused task ran")
	}
}

func TestPanickingTaskKeepsRunning(t *testing.T) {
	s := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var runs atomic.Int64
	s.Add("bad", time.Millisecond, func(context.Context) {
		runs.Add(1)
		panic("boom")
	})
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	waitFor(t, func() bool { return runs.Load() >= 3 })
	cancel()
	s.Wait()
}
