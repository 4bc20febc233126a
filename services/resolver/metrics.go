package resolver

import (
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// registerEnvCacheMetrics registers the environment cache's counters, read from stats at each scrape:
// configsync_resolver_env_cache_hits_total and _misses_total (per environment of a resolve_sets
// request: its rows found at their current versions, or read from PostgreSQL) and the entries held.
func registerEnvCacheMetrics(m *metrics.Metrics, stats func() resolve.EnvCacheStats) {
	metrics.RegisterCounterFunc(m, "resolver", "env_cache_hits_total",
		"Environments of resolve_sets requests whose configs were served from the cache at their current row versions.",
		func() float64 { return float64(stats().Hits) })
	metrics.RegisterCounterFunc(m, "resolver", "env_cache_misses_total",
		"Environments of resolve_sets requests whose rows were read from PostgreSQL (first use, or a newer version).",
		func() float64 { return float64(stats().Misses) })
	metrics.RegisterGaugeFunc(m, "resolver", "env_cache_entries",
		"Environment-level configs held by the resolver's cache (one per environment and type).",
		func() float64 { return float64(stats().Entries) })
}
