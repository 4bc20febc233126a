package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PoolStat is what the pool collector reads of a connection pool: *pgxpool.Stat has these methods
// (this package does not import pgx, so services without a database do not link it).
type PoolStat interface {
	AcquiredConns() int32
	IdleConns() int32
	TotalConns() int32
	MaxConns() int32
	ConstructingConns() int32
	AcquireCount() int64
	AcquireDuration() time.Duration
	EmptyAcquireCount() int64
	CanceledAcquireCount() int64
}

// RegisterPool registers a collector over the statistics stat returns at each scrape (for a pgx pool:
// func() metrics.PoolStat { return pool.Stat() }); a pool (key) registered before is ignored, since
// the services of one process share one pool.
func (m *Metrics) RegisterPool(key any, stat func() PoolStat) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pools[key] {
		return
	}
	m.pools[key] = true
	m.Registry.MustRegister(newPoolCollector(stat))
}

type poolCollector struct {
	stat                                      func() PoolStat
	acquired, idle, total, max, constructing  *prometheus.Desc
	acquires, acquireSeconds, empty, canceled *prometheus.Desc
}

func newPoolCollector(stat func() PoolStat) *poolCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(Namespace+"_db_pool_"+name, help, nil, nil)
	}
	return &poolCollector{
		stat:           stat,
		acquired:       d("acquired_conns", "PostgreSQL pool connections currently in use."),
		idle:           d("idle_conns", "PostgreSQL pool connections currently idle."),
		total:          d("total_conns", "PostgreSQL pool connections open (acquired, idle and being opened)."),
		max:            d("max_conns", "Most connections the PostgreSQL pool opens."),
		constructing:   d("constructing_conns", "PostgreSQL pool connections being opened."),
		acquires:       d("acquires_total", "Connections acquired from the PostgreSQL pool."),
		acquireSeconds: d("acquire_duration_seconds_total", "Total time spent acquiring PostgreSQL pool connections."),
		empty:          d("empty_acquires_total", "Acquires that had to wait for a connection (the pool had none idle)."),
		canceled:       d("canceled_acquires_total", "Acquires cancelled by their context before getting a connection."),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.acquired, c.idle, c.total, c.max, c.constructing, c.acquires, c.acquireSeconds, c.empty, c.canceled} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stat()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	n := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	g(c.acquired, float64(s.AcquiredConns()))
	g(c.idle, float64(s.IdleConns()))
	g(c.total, float64(s.TotalConns()))
	g(c.max, float64(s.MaxConns()))
	g(c.constructing, float64(s.ConstructingConns()))
	n(c.acquires, float64(s.AcquireCount()))
	n(c.acquireSeconds, s.AcquireDuration().Seconds())
	n(c.empty, float64(s.EmptyAcquireCount()))
	n(c.canceled, float64(s.CanceledAcquireCount()))
}
