package agentrun

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"runtime/debug"
	"time"

	"github.com/configsync/configsync/agent/internal/changedetect"
	"github.com/configsync/configsync/agent/internal/command"
	"github.com/configsync/configsync/agent/internal/healthcheck"
	"github.com/configsync/configsync/agent/internal/labels"
	"github.com/configsync/configsync/agent/internal/logcollect"
	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/agent/internal/selflog"
	"github.com/configsync/configsync/agent/internal/tracing"
	"github.com/configsync/configsync/agent/internal/watchfiles"
	"github.com/configsync/configsync/libs/agentconfig"
)

// registerCallbacks wires the hot-reload callback of each of the ten config types. Each receives the
// config to apply (nil: built-in defaults), checks it against the local policy whatever its origin
// (push, fetch, cache, local default) and changes the running component in place; a refusal changes
// nothing.
func (a *agent) registerCallbacks() {
	h := policyChecked{a.handler, a.pol}
	h.RegisterCallback(agentconfig.Labels, func(_ context.Context, _ string, data json.RawMessage, _ int64) error {
		cfg, err := labels.Parse(data)
		if err != nil {
			return err
		}
		return a.labels.Update(cfg)
	})
	h.RegisterCallback(agentconfig.Intervals, func(_ context.Context, _ string, data json.RawMessage, _ int64) error {
		var c agentconfig.IntervalsConfig
		if err := decode(data, &c); err != nil {
			return fmt.Errorf("intervals: %w", err)
		}
		inventory := orDefault(c.Inventory, defaultInventoryInterval)
		a.sched.UpdateInterval(taskMetrics, orDefault(c.Metrics, defaultMetricsInterval))
		a.sched.UpdateInterval(taskInventory, inventory)
		a.sched.UpdateInterval(taskWatchFiles, inventory)
		heartbeat := orDefault(c.Heartbeat, defaultHeartbeatInterval)
		a.sched.UpdateInterval(taskHeartbeat, heartbeat)
		if a.heartbeatEvery.Swap(heartbeat.Milliseconds()) != heartbeat.Milliseconds() {
			// The backend judges this host's liveness by the interval it reports: report a new one at
			// once rather than at the end of the new (possibly long) interval.
			a.sched.Trigger(taskHeartbeat)
		}
		a.sched.UpdateInterval(taskProcesses, orDefault(c.Processes, defaultProcessesInterval))
		return nil
	})
	h.RegisterCallback(agentconfig.Collectors, func(_ context.Context, _ string, data json.RawMessage, _ int64) error {
		// The cache was updated before this callback (spec: cache.Put, then the callback).
		return a.metrics.ReplacePluginCollectors(data, a.cache.SecretFields(agentconfig.Collectors))
	})
	h.RegisterCallback(agentconfig.ChangeDetection, func(_ context.Context, _ string, data json.RawMessage, _ int64) error {
		cfg, every, err := changedetect.Parse(data)
		if err != nil {
			return err
		}
		if err := a.changes.UpdateConfig(cfg); err != nil {
			return err
		}
		a.sched.UpdateInterval(taskChangeDetection, every)
		return nil
	})
	h.RegisterCallback(agentconfig.WatchFiles, func(_ context.Context, _ string, data json.RawMessage, _ int64) error {
		cfg, err := watchfiles.Parse(data)
		if err != nil {
			return err
		}
		if err := a.files.UpdateConfig(cfg); err != nil {
			return err
		}
		a.sched.Trigger(taskWatchFiles) // report under the new rules now, not an inventory interval later
		return nil
	})
	h.RegisterCallback(agentconfig.Healthcheck, func(_ context.Context, _ string, data json.RawMessage, _ int64) error {
		interval, timeout, err := healthcheck.Parse(data)
		if err != nil {
			return err
		}
		a.health.UpdateConfig(timeout)
		a.sched.UpdateInterval(taskHealthcheck, interval)
		return nil
	})
	h.RegisterCallback(agentconfig.LogCollection, func(_ context.Context, _ string, data json.RawMessage, _ int64) error {
		cfg, err := logcollect.Parse(data)
		if err != nil {
			return err
		}
		_, err = a.logs.Apply(cfg)
		return err
	})
	h.RegisterCallback(agentconfig.AgentSettings, func(_ context.Context, _ string, data json.RawMessage, _ int64) error {
		var c agentconfig.AgentSettingsConfig
		if err := decode(data, &c); err != nil {
			return fmt.Errorf("agent_settings: %w", err)
		}
		name := c.LogLevel
		if name == "" {
			name = a.cfg.LogLevel
		}
		lvl, err := selflog.ParseLevel(name)
		if err != nil {
			return fmt.Errorf("agent_settings: %w", err)
		}
		if c.MemoryLimitMB < 0 || c.CollectorTimeout < 0 {
			return fmt.Errorf("agent_settings: memory_limit_mb and collector_timeout must not be negative")
		}
		a.level.Set(lvl)
		limit := int64(math.MaxInt64) // the runtime's "no limit"
		if c.MemoryLimitMB > 0 {
			limit = int64(c.MemoryLimitMB) << 20
		}
		debug.SetMemoryLimit(limit)
		if c.MemoryLimitMB > 0 {
			a.memLimit.Store(limit)
		} else {
			a.memLimit.Store(0)
		}
		a.metrics.SetTimeout(c.CollectorTimeout.Std())
		return nil
	})
	h.RegisterCallback(agentconfig.Tracing, func(_ context.Context, _ string, data json.RawMessage, _ int64) error {
		var c agentconfig.TracingConfig
		if err := decode(data, &c); err != nil {
			return fmt.Errorf("tracing: %w", err)
		}
		cfg := tracing.Config{Enabled: c.Enabled != nil && *c.Enabled, SampleRatio: 1}
		if c.SampleRatio != nil {
			cfg.SampleRatio = *c.SampleRatio
		}
		return a.tracing.Apply(cfg)
	})
	h.RegisterCallback(agentconfig.LogShipping, func(_ context.Context, _ string, data json.RawMessage, _ int64) error {
		var c agentconfig.LogShippingConfig
		if err := decode(data, &c); err != nil {
			return fmt.Errorf("log_shipping: %w", err)
		}
		name := c.Level
		if name == "" {
			name = "warn"
		}
		lvl, err := selflog.ParseLevel(name)
		if err != nil {
			return fmt.Errorf("log_shipping: %w", err)
		}
		a.shipper.Apply(c.Enabled != nil && *c.Enabled, lvl)
		return nil
	})
}

// policyChecked registers callbacks that run checkPolicy first.
type policyChecked struct {
	h   *command.ConfigHandler
	pol *policy.Policy
}

func (p policyChecked) RegisterCallback(configType string, cb command.Callback) {
	p.h.RegisterCallback(configType, func(ctx context.Context, t string, data json.RawMessage, v int64) error {
		if err := checkPolicy(p.pol, t, data); err != nil {
			return err
		}
		return cb(ctx, t, data, v)
	})
}

// decode unmarshals a config; null or empty leaves dst at its zero value (built-in defaults).
func decode(data json.RawMessage, dst any) error {
	if agentconfig.IsNull(data) {
		return nil
	}
	return json.Unmarshal(data, dst)
}

func orDefault(d agentconfig.Duration, def time.Duration) time.Duration {
	if d > 0 {
		return d.Std()
	}
	return def
}
