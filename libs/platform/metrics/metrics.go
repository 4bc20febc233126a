// Package metrics holds ConfigSync's Prometheus plumbing: one registry per process (Go and process
// collectors, configsync_build_info, the pgx pool), the /metrics listener on its own address
// (METRICS_ADDR, never on a service's public port), and the Prometheus side of the observer hooks
// libs/platform/natsrpc, libs/platform/jsconsumer, libs/platform/outbox and HTTP routers expose, and
// the state of the JetStream streams and durable consumers a service reads (RegisterStreams).
//
// Several services may share one process (tools/devstack): they share one *Metrics, whose shared
// families (RPC, consumer, HTTP, outbox) are registered once and carry the service in a label, and
// one stream collector reads the streams every service added. No label ever carries a host, agent,
// client or environment id.
//
// A nil *Metrics is valid and records nothing (a service composed without Module): its observers are
// nil pointers whose methods do nothing, so callers never test for it.
package metrics

import (
	"errors"
	"net/http"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every ConfigSync metric.
const Namespace = "configsync"

// Metrics is a process's registry and the shared metric families registered on it.
type Metrics struct {
	// Registry is the process's registry; service-specific collectors register on it.
	Registry *prometheus.Registry

	mu        sync.Mutex
	buildInfo *prometheus.GaugeVec
	rpc       *RPC
	consumers *Consumers
	http      *HTTP
	outbox    *Outbox
	streams   *streamCollector
	pools     map[any]bool
}

// New returns a registry holding the Go and process collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return &Metrics{Registry: reg, pools: map[any]bool{}}
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// version is set at link time (-X .../libs/platform/metrics.version=v1.2.3, as deploy/docker does).
var version string

// Version is the version set at link time, else the main module's version from the build info
// ("(devel)" for a local build).
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "unknown"
}

// BuildInfo sets configsync_build_info{service,version} to 1 for service.
func (m *Metrics) BuildInfo(service string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.buildInfo == nil {
		m.buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "build_info",
			Help: "Always 1, labelled with the service and the version of its binary.",
		}, []string{"service", "version"})
		m.Registry.MustRegister(m.buildInfo)
	}
	m.buildInfo.WithLabelValues(service, Version()).Set(1)
}

// once builds a shared family with mk on first use, registering the collectors mk returns with it,
// and returns it afterwards.
func once[T any](m *Metrics, slot **T, mk func() (*T, []prometheus.Collector)) *T {
	m.mu.Lock()
	defer m.mu.Unlock()
	if *slot == nil {
		f, cs := mk()
		m.Registry.MustRegister(cs...)
		*slot = f
	}
	return *slot
}

// DurationBuckets are the histogram buckets (seconds) of request and processing durations.
var DurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// SizeBuckets are the histogram buckets of batch sizes.
var SizeBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000}

// counterVec is the counter family configsync_<subsystem>_<name> over labels.
func counterVec(subsystem, name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: subsystem, Name: name, Help: help,
	}, labels)
}

// histogramVec is the histogram family configsync_<subsystem>_<name> over labels.
func histogramVec(subsystem, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: subsystem, Name: name, Help: help, Buckets: buckets,
	}, labels)
}

// RegisterCounterVec registers the counter family configsync_<subsystem>_<name> over labels on m
// (see Register; an empty subsystem leaves it out of the name) and returns it.
func RegisterCounterVec(m *Metrics, subsystem, name, help string, labels ...string) *prometheus.CounterVec {
	return Register(m, counterVec(subsystem, name, help, labels...))
}

// RegisterHistogramVec registers the histogram family configsync_<subsystem>_<name> over labels on m
// (see Register) and returns it.
func RegisterHistogramVec(m *Metrics, subsystem, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return Register(m, histogramVec(subsystem, name, help, buckets, labels...))
}

// RegisterGaugeFunc registers the gauge configsync_<subsystem>_<name>, read from read at each scrape,
// on m (see Register).
func RegisterGaugeFunc(m *Metrics, subsystem, name, help string, read func() float64) {
	Register(m, prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts(subsystem, name, help)), read))
}

// RegisterCounterFunc registers the counter configsync_<subsystem>_<name>, read from read at each
// scrape, on m (see Register).
func RegisterCounterFunc(m *Metrics, subsystem, name, help string, read func() float64) {
	Register(m, prometheus.NewCounterFunc(prometheus.CounterOpts(opts(subsystem, name, help)), read))
}

// opts names the metric configsync_<subsystem>_<name>.
func opts(subsystem, name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: Namespace, Subsystem: subsystem, Name: name, Help: help}
}

// Result is the result label of an operation that returned err: "ok" or "error".
func Result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// Register registers c on m's registry and returns it, or returns the equal collector registered
// before (two modules of one process asking for the same family); nil m returns c unregistered. A
// collector clashing with a different one panics, as MustRegister does.
func Register[C prometheus.Collector](m *Metrics, c C) C {
	if m == nil {
		return c
	}
	if err := m.Registry.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
