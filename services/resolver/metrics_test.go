package resolver

import (
	"testing"

	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// The environment cache's counters are read from the resolver at each scrape.
func TestEnvCacheMetrics(t *testing.T) {
	m := metrics.New()
	stats := resolve.EnvCacheStats{Hits: 7, Misses: 2, Entries: 3}
	registerEnvCacheMetrics(m, func() resolve.EnvCacheStats { return stats })
	got := map[string]float64{}
	read := func() {
		families, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			for _, s := range f.GetMetric() {
				if c := s.GetCounter(); c != nil {
					got[f.GetName()] = c.GetValue()
				} else if g := s.GetGauge(); g != nil {
					got[f.GetName()] = g.GetValue()
				}
			}
		}
	}
	read()
	if got["configsync_resolver_env_cache_hits_total"] != 7 || got["configsync_resolver_env_cache_misses_total"] != 2 || got["configsync_resolver_env_cache_entries"] != 3 {
		t.Fatalf("scrape %v", got)
	}
	stats.Hits = 9
	read()
	if got["configsync_resolver_env_cache_hits_total"] != 9 {
		t.Fatalf("hits after more requests: %v", got["configsync_resolver_env_cache_hits_total"])
	}
}
