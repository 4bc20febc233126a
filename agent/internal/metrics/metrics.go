// Package metrics is the agent's metrics task: system collectors (CPU, memory, load, disk) that always
// run, and plugin collectors (http, tcp, postgres, redis, mysql checks) built from the collectors config
// and swapped live by ReplacePluginCollectors while the system collectors keep running.
package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/libs/agentconfig"
)

// Sample is one measured value.
type Sample struct {
	Name   string            `json:"name"`
	Value  float64           `json:"value"`
	Labels map[string]string `json:"labels,omitempty"`
}

// CollectorError names a collector that failed during a run.
type CollectorError struct {
	Collector string `json:"collector"`
	Error     string `json:"error"`
}

// Report is what one metrics run publishes.
type Report struct {
	Time    time.Time         `json:"time"`
	Labels  map[string]string `json:"labels,omitempty"`
	Samples []Sample          `json:"samples"`
	Errors  []CollectorError  `json:"errors,omitempty"`
}

// Collector produces samples. Collect must honour ctx (the collector timeout).
type Collector interface {
	Name() string
	Collect(ctx context.Context) ([]Sample, error)
}

// DefaultTimeout bounds one collector run until agent_settings says otherwise.
const DefaultTimeout = 10 * time.Second

// Task runs every collector once per Run.
type Task struct {
	log    *slog.Logger
	pol    *policy.Policy
	labels func() map[string]string
	emit   func(Report)

	system  []Collector
	timeout atomic.Int64

	mu      sync.RWMutex
	plugins []*plugin

	runs     atomic.Int64
	failures atomic.Int64 // collectors that failed in the last run
}

type plugin struct {
	Collector
	every   time.Duration // zero: every run
	timeout time.Duration // zero: the task's timeout
	lastRun time.Time     // guarded by Task.mu
	key     string
	// secrets are the values injected from credentials; they are cut out of error text, which is
	// logged and reported to the backend (a driver error may quote a user name or a host).
	secrets []string
}

// scrub replaces every secret value in msg with the redaction marker.
func (p *plugin) scrub(msg string) string {
	for _, s := range p.secrets {
		msg = strings.ReplaceAll(msg, s, agentconfig.RedactedValue)
	}
	return msg
}

// NewTask builds the task. Plugin collectors connect only where pol allows. labels returns the host
// labels attached to each report; emit receives it.
func NewTask(log *slog.Logger, pol *policy.Policy, system []Collector, labels func() map[string]string, emit func(Report)) *Task {
	t := &Task{log: log, pol: pol, system: system, labels: labels, emit: emit}
	t.timeout.Store(int64(DefaultTimeout))
	return t
}

// SetTimeout sets the per-collector timeout (agent_settings.collector_timeout); zero restores the default.
func (t *Task) SetTimeout(d time.Duration) {
	if d <= 0 {
		d = DefaultTimeout
	}
	t.timeout.Store(int64(d))
}

// Timeout returns the per-collector timeout in force.
func (t *Task) Timeout() time.Duration { return time.Duration(t.timeout.Load()) }

// ReplacePluginCollectors swaps the plugin collectors for the ones described by the collectors config
// (a JSON array; null or empty removes them all). Entries with "enabled": false are skipped. Either
// the whole list is built or, on error, the running set is kept. secretFields are the RFC 6901 pointers
// of the values the backend injected from credentials (the fetch reply's or command's secret_fields).
func (t *Task) ReplacePluginCollectors(data json.RawMessage, secretFields []string) error {
	specs, err := ParseCollectors(data)
	if err != nil {
		return err
	}
	if err := CheckCollectors(t.pol, specs); err != nil {
		return err
	}
	secrets, err := secretValues(data, secretFields)
	if err != nil {
		return err
	}
	next := make([]*plugin, 0, len(specs))
	var errs []error
	for i, s := range specs {
		if !s.IsEnabled() {
			continue
		}
		c, err := build(s, t.pol)
		if err != nil {
			errs = append(errs, fmt.Errorf("collector %s/%s: %w", s.Type, s.Name, err))
			continue
		}
		next = append(next, &plugin{Collector: c, every: s.Interval.Std(), timeout: s.Timeout.Std(), key: s.Type + "/" + s.Name, secrets: secrets[i]})
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	t.mu.Lock()
	// Keep the schedule of collectors that survive the swap so a push does not make them all fire at once.
	last := make(map[string]time.Time, len(t.plugins))
	for _, p := range t.plugins {
		last[p.key] = p.lastRun
	}
	for _, p := range next {
		p.lastRun = last[p.key]
	}
	t.plugins = next
	t.mu.Unlock()
	return nil
}

// PluginNames lists the running plugin collectors as "type/name", sorted.
func (t *Task) PluginNames() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]string, 0, len(t.plugins))
	for _, p := range t.plugins {
		out = append(out, p.key)
	}
	sort.Strings(out)
	return out
}

// Runs reports how many runs have completed.
func (t *Task) Runs() int64 { return t.runs.Load() }

// LastFailures reports how many collectors failed in the last run.
func (t *Task) LastFailures() int64 { return t.failures.Load() }

// Run collects from every system collector and every due plugin collector concurrently, each bounded by
// the collector timeout, and emits one Report.
func (t *Task) Run(ctx context.Context) {
	now := time.Now()
	t.mu.Lock() // lastRun is written below

	due := make([]Collector, 0, len(t.system)+len(t.plugins))
	due = append(due, t.system...)
	for _, p := range t.plugins {
		if p.every > 0 && !p.lastRun.IsZero() && now.Sub(p.lastRun) < p.every {
			continue
		}
		p.lastRun = now
		due = append(due, p)
	}
	t.mu.Unlock()

	timeout := t.Timeout()
	type result struct {
		samples []Sample
		err     error
	}
	results := make([]result, len(due))
	var wg sync.WaitGroup
	for i, c := range due {
		wg.Go(func() {
			d := timeout
			if p, ok := c.(*plugin); ok && p.timeout > 0 {
				d = p.timeout
			}
			cctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			s, err := c.Collect(cctx)
			results[i] = result{s, err}
		})
	}
	wg.Wait()

	rep := Report{Time: now.UTC(), Samples: []Sample{}}
	if t.labels != nil {
		rep.Labels = t.labels()
	}
	for i, r := range results {
		rep.Samples = append(rep.Samples, r.samples...)
		if r.err != nil {
			msg := r.err.Error()
			if p, ok := due[i].(*plugin); ok {
				msg = p.scrub(msg)
			}
			rep.Errors = append(rep.Errors, CollectorError{Collector: due[i].Name(), Error: msg})
			t.log.Debug("collector failed", "collector", due[i].Name(), "error", msg)
		}
	}
	t.failures.Store(int64(len(rep.Errors)))
	t.runs.Add(1)
	if t.emit != nil && ctx.Err() == nil {
		t.emit(rep)
	}
}
