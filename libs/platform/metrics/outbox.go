package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Backlogger reports an outbox's backlog (outbox.Relay implements it).
type Backlogger interface {
	Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error)
}

// OutboxObserver is outbox.Observer (declared here so this package does not import outbox).
type OutboxObserver interface {
	Published(duplicate bool, err error)
}

// Outbox is the outbox.Observer of a process: rows published by result, plus a collector of the
// backlog (pending rows, age of the oldest) read once per scrape.
type Outbox struct {
	published *prometheus.CounterVec
	backlog   *backlogCollector
}

// Outbox returns the process's outbox observer, registering its families on first use with b as the
// source of the backlog gauges (the first caller's b: relays of one process share one database).
// A nil m gives a nil interface (the relay then observes nothing).
func (m *Metrics) Outbox(b Backlogger) OutboxObserver {
	if m == nil {
		return nil
	}
	return once(m, &m.outbox, func() (*Outbox, []prometheus.Collector) { return newOutbox(b) })
}

// newOutbox builds the outbox families over b, with the collectors to register.
func newOutbox(b Backlogger) (*Outbox, []prometheus.Collector) {
	o := &Outbox{
		published: counterVec("outbox", "published_total",
			"Outbox rows relayed to JetStream, by result (ok, duplicate when the stream already held it, error).",
			"result"),
		backlog: &backlogCollector{src: b,
			pending: prometheus.NewDesc(Namespace+"_outbox_pending", "Outbox rows not yet published.", nil, nil),
			oldest: prometheus.NewDesc(Namespace+"_outbox_oldest_age_seconds",
				"Age of the oldest unpublished outbox row (0 when none).", nil, nil),
			up: prometheus.NewDesc(Namespace+"_outbox_backlog_up",
				"1 when the last scrape could read the outbox backlog, else 0.", nil, nil),
		},
	}
	for _, r := range []string{"ok", "duplicate", "error"} {
		o.published.WithLabelValues(r)
	}
	return o, []prometheus.Collector{o.published, o.backlog}
}

// Published implements outbox.Observer.
func (o *Outbox) Published(duplicate bool, err error) {
	if o == nil {
		return
	}
	switch {
	case err != nil:
		o.published.WithLabelValues("error").Inc()
	case duplicate:
		o.published.WithLabelValues("duplicate").Inc()
	default:
		o.published.WithLabelValues("ok").Inc()
	}
}

// scrapeTimeout bounds the queries a collector runs during a scrape.
const scrapeTimeout = 3 * time.Second

type backlogCollector struct {
	src                 Backlogger
	pending, oldest, up *prometheus.Desc
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.oldest
	ch <- c.up
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	pending, oldest, err := c.src.Backlog(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, oldest.Seconds())
}
