package metrics

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// descs returns the descriptors c describes, as strings.
func descs(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc, 8)
	c.Describe(ch)
	close(ch)
	var out []string
	for d := range ch {
		out = append(out, d.String())
	}
	return out
}

func sameDescs(t *testing.T, what string, got, want prometheus.Collector) {
	t.Helper()
	g, w := descs(got), descs(want)
	if len(g) != len(w) || len(g) == 0 {
		t.Fatalf("%s: descriptors %q, want %q", what, g, w)
	}
	for i := range g {
		if g[i] != w[i] {
			t.Fatalf("%s: descriptor %q, want %q", what, g[i], w[i])
		}
	}
}

// The Register* helpers build the same families as the prometheus constructors under Namespace.
func TestRegisterHelpers(t *testing.T) {
	m := New()
	sameDescs(t, "counter vec", RegisterCounterVec(m, "sub", "things_total", "Things.", "a", "b"),
		prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "sub", Name: "things_total", Help: "Things."}, []string{"a", "b"}))
	sameDescs(t, "counter vec without subsystem", RegisterCounterVec(m, "", "bare_total", "Bare.", "result"),
		prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "bare_total", Help: "Bare."}, []string{"result"}))
	h := RegisterHistogramVec(m, "sub", "seconds", "Durations.", DurationBuckets, "kind")
	sameDescs(t, "histogram vec", h,
		prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "sub", Name: "seconds", Help: "Durations."}, []string{"kind"}))
	h.WithLabelValues("x").Observe(0.003)
	RegisterGaugeFunc(m, "sub", "depth", "Depth.", func() float64 { return 4 })
	RegisterCounterFunc(m, "sub", "reads_total", "Reads.", func() float64 { return 9 })

	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	buckets := 0
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			switch {
			case mt.GetGauge() != nil:
				got[f.GetName()] = mt.GetGauge().GetValue()
			case mt.GetCounter() != nil:
				got[f.GetName()] = mt.GetCounter().GetValue()
			case mt.GetHistogram() != nil:
				buckets = len(mt.GetHistogram().GetBucket())
			}
		}
	}
	if got["configsync_sub_depth"] != 4 || got["configsync_sub_reads_total"] != 9 {
		t.Fatalf("func metrics read %v, want depth 4 and reads_total 9", got)
	}
	if buckets != len(DurationBuckets) {
		t.Fatalf("histogram has %d buckets, want the %d DurationBuckets", buckets, len(DurationBuckets))
	}

	// A nil *Metrics registers nothing and does not panic.
	RegisterGaugeFunc(nil, "sub", "depth", "Depth.", func() float64 { return 0 })
	RegisterCounterFunc(nil, "sub", "reads_total", "Reads.", func() float64 { return 0 })
	if RegisterCounterVec(nil, "sub", "things_total", "Things.", "a") == nil {
		t.Fatal("RegisterCounterVec(nil) returned nil, want an unregistered family")
	}
}

func TestResult(t *testing.T) {
	if got := Result(nil); got != "ok" {
		t.Fatalf("Result(nil) = %q, want ok", got)
	}
	if got := Result(errors.New("boom")); got != "error" {
		t.Fatalf("Result(err) = %q, want error", got)
	}
}
