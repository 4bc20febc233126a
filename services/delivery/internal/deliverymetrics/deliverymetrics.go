// Package deliverymetrics holds delivery's own Prometheus metrics: commands published to agents by
// result and the fetch queue depth. Fetches (by result, duration from arrival to reply, batch sizes)
// are counted by the natsrpc observer, fan-outs (one per config-change event: duration, outcome) by the
// jsconsumer observer of libs/platform/metrics.
package deliverymetrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/services/delivery/internal/deliver"
)

// Commands returns pub counting every publish into m (pub itself when m is nil).
func Commands(pub deliver.CommandPublisher, m *metrics.Metrics) deliver.CommandPublisher {
	if m == nil {
		return pub
	}
	c := &commands{CommandPublisher: pub, published: metrics.RegisterCounterVec(m, "delivery", "commands_published_total",
		"Commands published to agents (pushes), by result (ok, error), and flushes that failed (flush_error).", "result")}
	for _, r := range []string{"ok", "error", "flush_error"} {
		c.published.WithLabelValues(r)
	}
	return c
}

type commands struct {
	deliver.CommandPublisher
	published *prometheus.CounterVec
}

func (c *commands) Publish(ctx context.Context, agentID string, command []byte) error {
	err := c.CommandPublisher.Publish(ctx, agentID, command)
	c.published.WithLabelValues(metrics.Result(err)).Inc()
	return err
}

func (c *commands) Flush(ctx context.Context) error {
	err := c.CommandPublisher.Flush(ctx)
	if err != nil {
		c.published.WithLabelValues("flush_error").Inc()
	}
	return err
}

// QueueDepth registers configsync_delivery_fetch_queue_depth, read from queued at each scrape.
func QueueDepth(m *metrics.Metrics, queued func() int) {
	metrics.RegisterGaugeFunc(m, "delivery", "fetch_queue_depth", "Agent fetches received and waiting for a batch.",
		func() float64 { return float64(queued()) })
}

// Repairs exposes the Repairer's counters (deliver.RepairStats) as
// configsync_delivery_repair_received_total{unit} (requests, hosts) and
// configsync_delivery_repair_commands_total{result} (published, withheld, failed).
func Repairs(m *metrics.Metrics, stats func() deliver.RepairStats) {
	metrics.RegisterCounterSnapshot(m, "delivery_repair_received_total",
		"Repair requests from anti-entropy and the hosts they named.", "unit",
		func() map[string]int64 {
			s := stats()
			return map[string]int64{"requests": s.Requests, "hosts": s.Hosts}
		})
	metrics.RegisterCounterSnapshot(m, "delivery_repair_commands_total",
		"Repairs by result: published (a config_update sent), withheld (the type cannot be delivered whole), failed (host not resolved or publish refused).", "result",
		func() map[string]int64 {
			s := stats()
			return map[string]int64{"published": s.Published, "withheld": s.Withheld, "failed": s.Failed}
		})
}
