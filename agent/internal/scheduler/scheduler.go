// Package scheduler runs the agent's periodic tasks (heartbeat, metrics, scans, health checks), each in
// its own goroutine, with intervals that can be changed while the tasks run.
package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Func is the work of one task run. It gets the scheduler's context.
type Func func(ctx context.Context)

// Scheduler owns a fixed set of named tasks. Tasks are added before Start; intervals can be updated any
// time (before Start they only set the initial value). An interval of zero pauses a task.
type Scheduler struct {
	log *slog.Logger

	mu      sync.Mutex
	tasks   map[string]*task
	started bool
	wg      sync.WaitGroup
}

type task struct {
	name     string
	fn       Func
	interval time.Duration // guarded by Scheduler.mu until Start; afterwards owned by the task goroutine
	update   chan time.Duration
	trigger  chan struct{}
}

// New returns an empty scheduler.
func New(log *slog.Logger) *Scheduler {
	return &Scheduler{log: log, tasks: map[string]*task{}}
}

// Add registers a task. It runs once when the scheduler starts (unless paused) and then every interval.
// Add panics when called after Start or twice with one name: both are programming errors.
func (s *Scheduler) Add(name string, interval time.Duration, fn Func) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		panic("scheduler: Add after Start")
	}
	if _, ok := s.tasks[name]; ok {
		panic("scheduler: duplicate task " + name)
	}
	s.tasks[name] = &task{
		name: name, fn: fn, interval: interval,
		update:  make(chan time.Duration, 1),
		trigger: make(chan struct{}, 1),
	}
}

// Start launches every task's goroutine; they stop when ctx is done (Wait waits for them).
func (s *Scheduler) Start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	for _, t := range s.tasks {
		s.wg.Add(1)
		go func(t *task, interval time.Duration) {
			defer s.wg.Done()
			t.loop(ctx, interval, s.log)
		}(t, t.interval)
	}
}

// Wait blocks until every task goroutine has returned.
func (s *Scheduler) Wait() { s.wg.Wait() }

// UpdateInterval changes a task's interval. A running task resets its ticker at once (the latest value
// wins when updates arrive faster than the task takes them). It reports whether the task exists.
func (s *Scheduler) UpdateInterval(name string, d time.Duration) bool {
	if d < 0 {
		d = 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[name]
	if !ok {
		return false
	}
	if !s.started {
		t.interval = d
		return true
	}
	// Replace a pending value rather than block: only the newest interval matters.
	select {
	case <-t.update:
	default:
	}
	t.update <- d
	return true
}

// Trigger asks a task to run once as soon as it can, without changing its schedule. Before Start it is a
// no-op (every task runs at start anyway).
func (s *Scheduler) Trigger(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[name]
	if !ok {
		return false
	}
	if s.started {
		select {
		case t.trigger <- struct{}{}:
		default:
		}
	}
	return true
}

func (t *task) loop(ctx context.Context, interval time.Duration, log *slog.Logger) {
	var ticker *time.Ticker
	var tick <-chan time.Time
	setInterval := func(d time.Duration) {
		if d <= 0 {
			if ticker != nil {
				ticker.Stop()
			}
			tick = nil
			return
		}
		if ticker == nil {
			ticker = time.NewTicker(d)
		} else {
			ticker.Reset(d)
		}
		tick = ticker.C
	}
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	setInterval(interval)
	if interval > 0 {
		t.run(ctx, log)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-t.update:
			if d != interval {
				log.Debug("task interval changed", "task", t.name, "from", interval, "to", d)
			}
			wasPaused := interval <= 0
			interval = d
			setInterval(d)
			if wasPaused && d > 0 {
				t.run(ctx, log)
			}
		case <-t.trigger:
			t.run(ctx, log)
		case <-tick:
			t.run(ctx, log)
		}
	}
}

func (t *task) run(ctx context.Context, log *slog.Logger) {
	if ctx.Err() != nil {
		return
	}
	defer func() {
		// A panicking task must not take the agent down; it runs again next tick.
		if r := recover(); r != nil {
			log.Error("task panicked", "task", t.name, "panic", r)
		}
	}()
	t.fn(ctx)
}
