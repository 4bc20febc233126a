package resolve

import (
	"sync"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// DefaultEnvCacheEntries bounds the environment cache: one entry per environment, config type (and,
// with staged rollouts, stage). Far more than a deployment has; reaching it empties the cache.
const DefaultEnvCacheEntries = 65536

// envKey is everything that decides an environment-level effective config besides its row's version.
type envKey struct {
	EnvironmentID string
	ConfigType    string
	// Stage is the slot of a staged rollout's layer (its version, stagedCacheKey): hosts in a started
	// stage resolve another environment-level config, cached under its own key; "" for the
	// environment's row.
	Stage string
}

// envEntry is one environment's row of one type at one version, with the effective config a host
// without a row of its own gets from it (merged once, not per host or per batch).
type envEntry struct {
	layer     agentconfig.Layer
	effective protocol.EffectiveConfig
}

// envCache keeps environments' rows and effective configs by envKey, each at the newest version the
// resolver has seen. It never decides freshness on its own: a batch of fetches reads the current
// version of every row it needs from the database (FetchRows) and takes an entry only when its
// version is that one; any other version is read again. So every replica serves a write from its
// next batch on, with no invalidation message to miss.
type envCache struct {
	mu  sync.Mutex
	max int
	m   map[envKey]envEntry
}

func newEnvCache(max int) *envCache {
	if max <= 0 {
		max = DefaultEnvCacheEntries
	}
	return &envCache{max: max, m: map[envKey]envEntry{}}
}

// get returns the entry of k at version, if the cache holds that version.
func (c *envCache) get(k envKey, version int64) (envEntry, bool) {
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if !ok || e.layer.Version != version {
		return envEntry{}, false
	}
	return e, true
}

// put stores e under k unless the cache already holds a newer version (versions come from one
// sequence, so a smaller one is older).
func (c *envCache) put(k envKey, e envEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[k]; ok && old.layer.Version > e.layer.Version {
		return
	}
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[k] = e
}

// len is the number of entries (tests, metrics).
func (c *envCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
