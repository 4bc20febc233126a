package metrics

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// StreamTarget is a JetStream stream a service consumes and its durable consumers of it, whose state
// the stream collector reads at each scrape.
type StreamTarget struct {
	Stream    string
	Consumers []string
}

// RegisterStreams exports, read from JetStream at each scrape, the state of the targets' streams
// (messages, bytes, max bytes) and of their durable consumers (messages not yet delivered, delivered
// and not yet acknowledged). The collector is registered on first use; later calls add their targets
// to it (services sharing a process share its first caller's js). A nil m registers nothing.
//
// A scrape asks JetStream once per stream (STREAM.INFO) and once per consumer (CONSUMER.INFO), all
// at once and bounded by scrapeTimeout together. A read that fails (stream or consumer missing, no
// permission, NATS unreachable, timeout) never fails the scrape: configsync_stream_info_up or
// configsync_consumer_info_up is 0 for it, and its values are left out.
func (m *Metrics) RegisterStreams(js jetstream.JetStream, targets ...StreamTarget) {
	if m == nil {
		return
	}
	c := once(m, &m.streams, func() (*streamCollector, []prometheus.Collector) {
		c := newStreamCollector(js)
		return c, []prometheus.Collector{c}
	})
	c.add(targets)
}

type streamCollector struct {
	js jetstream.JetStream

	mu      sync.Mutex
	targets []StreamTarget // one per stream, consumers deduplicated
	timeout time.Duration

	messages, bytes, maxBytes, streamUp *prometheus.Desc
	pending, ackPending, consumerUp     *prometheus.Desc
}

func newStreamCollector(js jetstream.JetStream) *streamCollector {
	stream := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(Namespace+"_stream_"+name, help, []string{"stream"}, nil)
	}
	consumer := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(Namespace+"_consumer_"+name, help, []string{"consumer"}, nil)
	}
	return &streamCollector{
		js:      js,
		timeout: scrapeTimeout,
		messages: stream("messages",
			"Messages stored in the JetStream stream."),
		bytes: stream("bytes",
			"Bytes stored in the JetStream stream."),
		maxBytes: stream("max_bytes",
			"The stream's MaxBytes limit (left out when unlimited): when bytes reach it, JetStream discards the oldest messages."),
		streamUp: stream("info_up",
			"1 when the last scrape read the stream's info from JetStream, else 0 (stream missing, no permission, timeout)."),
		pending: consumer("pending_messages",
			"Messages of the stream the durable consumer has not delivered yet (its backlog)."),
		ackPending: consumer("ack_pending_messages",
			"Messages the durable consumer delivered and that are not acknowledged yet."),
		consumerUp: consumer("info_up",
			"1 when the last scrape read the durable consumer's info from JetStream, else 0 (consumer or stream missing, no permission, timeout)."),
	}
}

// add merges targets into the collector's, by stream.
func (c *streamCollector) add(targets []StreamTarget) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range targets {
		i := slices.IndexFunc(c.targets, func(have StreamTarget) bool { return have.Stream == t.Stream })
		if i < 0 {
			c.targets = append(c.targets, StreamTarget{Stream: t.Stream})
			i = len(c.targets) - 1
		}
		for _, cons := range t.Consumers {
			if !slices.Contains(c.targets[i].Consumers, cons) {
				c.targets[i].Consumers = append(c.targets[i].Consumers, cons)
			}
		}
	}
}

func (c *streamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.messages, c.bytes, c.maxBytes, c.streamUp, c.pending, c.ackPending, c.consumerUp} {
		ch <- d
	}
}

func (c *streamCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	targets := make([]StreamTarget, len(c.targets))
	for i, t := range c.targets {
		targets[i] = StreamTarget{Stream: t.Stream, Consumers: slices.Clone(t.Consumers)}
	}
	timeout := c.timeout
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Every read at once: a scrape waits for the slowest, never for their sum.
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		out []prometheus.Metric
	)
	emit := func(ms ...prometheus.Metric) {
		mu.Lock()
		out = append(out, ms...)
		mu.Unlock()
	}
	gauge := func(d *prometheus.Desc, v float64, label string) prometheus.Metric {
		return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, label)
	}
	up := func(err error) float64 {
		if err != nil {
			return 0
		}
		return 1
	}
	for _, t := range targets {
		wg.Go(func() {
			s, err := c.js.Stream(ctx, t.Stream)
			emit(gauge(c.streamUp, up(err), t.Stream))
			if err != nil {
				return
			}
			info := s.CachedInfo()
			emit(gauge(c.messages, float64(info.State.Msgs), t.Stream), gauge(c.bytes, float64(info.State.Bytes), t.Stream))
			if info.Config.MaxBytes > 0 {
				emit(gauge(c.maxBytes, float64(info.Config.MaxBytes), t.Stream))
			}
		})
		for _, name := range t.Consumers {
			wg.Go(func() {
				cons, err := c.js.Consumer(ctx, t.Stream, name)
				emit(gauge(c.consumerUp, up(err), name))
				if err != nil {
					return
				}
				info := cons.CachedInfo()
				emit(gauge(c.pending, float64(info.NumPending), name), gauge(c.ackPending, float64(info.NumAckPending), name))
			})
		}
	}
	wg.Wait()
	for _, m := range out {
		ch <- m
	}
}
