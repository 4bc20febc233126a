package agentrun

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/configsync/configsync/agent/internal/changedetect"
	"github.com/configsync/configsync/agent/internal/labels"
	"github.com/configsync/configsync/agent/internal/logcollect"
	"github.com/configsync/configsync/agent/internal/metrics"
	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/agent/internal/watchfiles"
	"github.com/configsync/configsync/libs/agentconfig"
)

// checkPolicy decides whether a config of configType may be applied under the local policy. It runs
// before a pushed or fetched config is cached (a refused config is acknowledged failed and never
// replaces the running one) and again in every callback, whatever the config's origin. The error
// names the config path and the rule, e.g. "labels: dynamic[0].command: policy: commands: ...".
// A config that does not decode passes here: the type's callback reports it (a push is then cached and
// acknowledged failed, as any failing apply).
func checkPolicy(pol *policy.Policy, configType string, data json.RawMessage) error {
	switch configType {
	case agentconfig.Labels:
		c, err := labels.Parse(data)
		if err != nil {
			return nil
		}
		return labels.Check(pol, c)
	case agentconfig.Intervals:
		var c agentconfig.IntervalsConfig
		if decode(data, &c) != nil {
			return nil
		}
		for _, iv := range []struct {
			name string
			d    agentconfig.Duration
		}{{"metrics", c.Metrics}, {"inventory", c.Inventory}, {"heartbeat", c.Heartbeat}, {"processes", c.Processes}} {
			if err := pol.CheckInterval(iv.d.Std()); err != nil {
				return fmt.Errorf("intervals: %s: %w", iv.name, err)
			}
		}
	case agentconfig.Collectors:
		cs, err := metrics.ParseCollectors(data)
		if err != nil {
			return nil
		}
		return metrics.CheckCollectors(pol, cs)
	case agentconfig.ChangeDetection:
		c, _, err := changedetect.Parse(data)
		if err != nil {
			return nil
		}
		return changedetect.Check(pol, c)
	case agentconfig.WatchFiles:
		c, err := watchfiles.Parse(data)
		if err != nil {
			return nil
		}
		return watchfiles.Check(pol, c)
	case agentconfig.Healthcheck:
		var c agentconfig.HealthcheckConfig
		if decode(data, &c) != nil {
			return nil
		}
		if err := pol.CheckInterval(time.Duration(c.IntervalSeconds) * time.Second); err != nil {
			return fmt.Errorf("healthcheck: interval_seconds: %w", err)
		}
	case agentconfig.LogCollection:
		c, err := logcollect.Parse(data)
		if err != nil {
			return nil
		}
		return logcollect.Check(pol, c)
	}
	return nil
}
