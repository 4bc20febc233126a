package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LagBuckets are the histogram buckets (seconds) of message lags.
var LagBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// Consumers is the jsconsumer.Observer of a process: messages settled by consumer and outcome, batch
// sizes, handler durations and message lags, by durable consumer name.
type Consumers struct {
	messages *prometheus.CounterVec
	batch    *prometheus.HistogramVec
	duration *prometheus.HistogramVec
	lag      *prometheus.HistogramVec
}

// ConsumerObserver is jsconsumer.Observer (declared here so this package does not import jsconsumer).
type ConsumerObserver interface {
	Handled(consumer string, size int, lags []time.Duration, elapsed time.Duration)
	Settled(consumer, outcome string, failed bool)
}

// Consumers returns the process's jsconsumer observer, registering its families on first use; a nil
// interface for a nil m, so jsconsumer skips observing (and reading message metadata) altogether.
func (m *Metrics) Consumers() ConsumerObserver {
	if m == nil {
		return nil
	}
	return once(m, &m.consumers, newConsumers)
}

// newConsumers builds the consumer families, with the collectors to register.
func newConsumers() (*Consumers, []prometheus.Collector) {
	c := &Consumers{
		messages: counterVec("consumer", "messages_total",
			"JetStream messages settled, by durable consumer, outcome (ack, retry, terminate) and result (ok, or error when settling failed).",
			"consumer", "outcome", "result"),
		batch: histogramVec("consumer", "batch_size", "Messages handed to one handler call.", SizeBuckets, "consumer"),
		duration: histogramVec("consumer", "handle_duration_seconds",
			"Time one handler call took (for ack-ingest: decoding and committing a batch).", DurationBuckets, "consumer"),
		lag: histogramVec("consumer", "lag_seconds",
			"Time from a message's JetStream timestamp to its handler call.", LagBuckets, "consumer"),
	}
	return c, []prometheus.Collector{c.messages, c.batch, c.duration, c.lag}
}

// Handled implements jsconsumer.Observer.
func (c *Consumers) Handled(consumer string, size int, lags []time.Duration, elapsed time.Duration) {
	if c == nil {
		return
	}
	c.batch.WithLabelValues(consumer).Observe(float64(size))
	c.duration.WithLabelValues(consumer).Observe(elapsed.Seconds())
	lag := c.lag.WithLabelValues(consumer)
	for _, l := range lags {
		lag.Observe(max(l, 0).Seconds())
	}
}

// Settled implements jsconsumer.Observer.
func (c *Consumers) Settled(consumer, outcome string, failed bool) {
	if c == nil {
		return
	}
	result := "ok"
	if failed {
		result = "error"
	}
	c.messages.WithLabelValues(consumer, outcome, result).Inc()
}
