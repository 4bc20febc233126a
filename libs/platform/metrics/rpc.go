package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RPC is the natsrpc.Observer of a process: requests by service, endpoint and code, their duration
// from arrival to answer, and Batcher batch sizes.
type RPC struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	batch    *prometheus.HistogramVec
}

// RPCObserver is natsrpc.Observer (declared here so this package does not import natsrpc).
type RPCObserver interface {
	Answered(service, endpoint, code string, elapsed time.Duration)
	Batch(service, endpoint string, size int)
}

// RPC returns the process's natsrpc observer, registering its families on first use; a nil
// interface for a nil m, so natsrpc skips observing altogether.
func (m *Metrics) RPC() RPCObserver {
	if m == nil {
		return nil
	}
	return once(m, &m.rpc, newRPC)
}

// newRPC builds the RPC families, with the collectors to register.
func newRPC() (*RPC, []prometheus.Collector) {
	r := &RPC{
		requests: counterVec("rpc", "requests_total",
			"NATS requests answered, by service, endpoint and code (ok, a protocol error code, dropped or expired).",
			"service", "endpoint", "code"),
		duration: histogramVec("rpc", "request_duration_seconds",
			"Time from a NATS request's arrival (queueing included) to its answer.", DurationBuckets, "service", "endpoint"),
		batch: histogramVec("rpc", "batch_size",
			"Requests handed to one call of a batched endpoint's handler.", SizeBuckets, "service", "endpoint"),
	}
	return r, []prometheus.Collector{r.requests, r.duration, r.batch}
}

// Answered implements natsrpc.Observer.
func (r *RPC) Answered(service, endpoint, code string, elapsed time.Duration) {
	if r == nil {
		return
	}
	r.requests.WithLabelValues(service, endpoint, code).Inc()
	r.duration.WithLabelValues(service, endpoint).Observe(elapsed.Seconds())
}

// Batch implements natsrpc.Observer.
func (r *RPC) Batch(service, endpoint string, size int) {
	if r == nil {
		return
	}
	r.batch.WithLabelValues(service, endpoint).Observe(float64(size))
}
