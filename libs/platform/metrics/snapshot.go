package metrics

import "github.com/prometheus/client_golang/prometheus"

// RegisterCounterSnapshot exposes counters a component already keeps (atomics behind a Stats()
// method) as one counter family with one label: at each scrape, read returns the value of every label
// value. Nothing is counted twice and the hot path does not change.
func RegisterCounterSnapshot(m *Metrics, name, help, label string, read func() map[string]int64) {
	if m == nil {
		return
	}
	Register(m, &snapshotCollector{desc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, []string{label}, nil), read: read})
}

type snapshotCollector struct {
	desc *prometheus.Desc
	read func() map[string]int64
}

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	for v, n := range c.read() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), v)
	}
}
