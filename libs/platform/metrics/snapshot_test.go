package metrics_test

import (
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/configsync/configsync/libs/platform/metrics"
)

// TestCounterSnapshotFollowsTheCounters: each scrape reads the component's counters, so the family
// moves as they do; a nil *Metrics registers nothing.
func TestCounterSnapshotFollowsTheCounters(t *testing.T) {
	m := metrics.New()
	var requested, closed atomic.Int64
	metrics.RegisterCounterSnapshot(m, "test_repairs_total", "Repairs by result.", "result", func() map[string]int64 {
		return map[string]int64{"requested": requested.Load(), "closed": closed.Load()}
	})
	if n := testutil.CollectAndCount(m.Registry, "configsync_test_repairs_total"); n != 2 {
		t.Fatalf("%d series, want 2", n)
	}
	requested.Add(3)
	closed.Add(1)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "configsync_test_repairs_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			got[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
		}
	}
	if got["requested"] != 3 || got["closed"] != 1 {
		t.Fatalf("scraped %v, want requested 3, closed 1", got)
	}
	metrics.RegisterCounterSnapshot(nil, "x_total", "x", "l", func() map[string]int64 { t.Fatal("read without a registry"); return nil })
}
