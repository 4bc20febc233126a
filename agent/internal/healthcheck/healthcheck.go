// Package healthcheck runs the agent's self checks (NATS connection, data directory writable,
// collectors healthy, ...) every interval_seconds, each bounded by timeout_seconds, and reports the
// result.
package healthcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/configsync/configsync/libs/agentconfig"
)

// Defaults when the config is absent or leaves a field out.
const (
	DefaultInterval = 60 * time.Second
	DefaultTimeout  = 5 * time.Second
)

// Parse decodes a healthcheck config and returns the interval and timeout it asks for.
func Parse(data json.RawMessage) (interval, timeout time.Duration, err error) {
	interval, timeout = DefaultInterval, DefaultTimeout
	if agentconfig.IsNull(data) {
		return interval, timeout, nil
	}
	var c agentconfig.HealthcheckConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return 0, 0, fmt.Errorf("healthcheck: %w", err)
	}
	if c.IntervalSeconds < 0 || c.TimeoutSeconds < 0 {
		return 0, 0, fmt.Errorf("healthcheck: interval_seconds and timeout_seconds must not be negative")
	}
	if c.IntervalSeconds > 0 {
		interval = time.Duration(c.IntervalSeconds) * time.Second
	}
	if c.TimeoutSeconds > 0 {
		timeout = time.Duration(c.TimeoutSeconds) * time.Second
	}
	return interval, timeout, nil
}

// Check is one self check.
type Check struct {
	Name string
	Func func(ctx context.Context) error
}

// Result is one check's outcome.
type Result struct {
	Name       string  `json:"name"`
	OK         bool    `json:"ok"`
	Error      string  `json:"error,omitempty"`
	DurationMS float64 `json:"duration_ms"`
}

// Report is what a run publishes.
type Report struct {
	Time      time.Time `json:"time"`
	Status    string    `json:"status"` // ok, degraded
	TimeoutMS int64     `json:"timeout_ms"`
	Checks    []Result  `json:"checks"`
}

// Runner runs the checks.
type Runner struct {
	log     *slog.Logger
	checks  []Check
	emit    func(Report)
	timeout atomic.Int64
	runs    atomic.Int64
}

// NewRunner returns a runner with the default timeout.
func NewRunner(log *slog.Logger, checks []Check, emit func(Report)) *Runner {
	r := &Runner{log: log, checks: checks, emit: emit}
	r.timeout.Store(int64(DefaultTimeout))
	return r
}

// UpdateConfig sets the per-check timeout (the interval belongs to the scheduler).
func (r *Runner) UpdateConfig(timeout time.Duration) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	r.timeout.Store(int64(timeout))
}

// Runs counts completed runs.
func (r *Runner) Runs() int64 { return r.runs.Load() }

// Run executes every check concurrently and emits the report.
func (r *Runner) Run(ctx context.Context) {
	timeout := time.Duration(r.timeout.Load())
	res := make([]Result, len(r.checks))
	var wg sync.WaitGroup
	for i, c := range r.checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- c.Func(cctx) }()
			var err error
			select {
			case err = <-done:
			case <-cctx.Done():
				err = fmt.Errorf("timed out after %s", timeout)
			}
			res[i] = Result{Name: c.Name, OK: err == nil, DurationMS: float64(time.Since(start).Microseconds()) / 1000}
			if err != nil {
				res[i].Error = err.Error()
			}
		})
	}
	wg.Wait()
	rep := Report{Time: time.Now().UTC(), Status: "ok", TimeoutMS: timeout.Milliseconds(), Checks: res}
	for _, c := range res {
		if !c.OK {
			rep.Status = "degraded"
			r.log.Warn("health check failed", "check", c.Name, "error", c.Error)
		}
	}
	r.runs.Add(1)
	if r.emit != nil && ctx.Err() == nil {
		r.emit(rep)
	}
}
