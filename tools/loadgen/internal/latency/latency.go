// Package latency records durations and summarises them as count, mean and nearest-rank percentiles.
// A fleet run records at most a few samples per simulated agent, so every sample is kept and the
// percentiles are exact rather than bucketed.
package latency

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Recorder collects durations. It is safe for concurrent use; the zero value is ready.
type Recorder struct {
	mu      sync.Mutex
	samples []time.Duration
}

// Record adds one sample.
func (r *Recorder) Record(d time.Duration) {
	r.mu.Lock()
	r.samples = append(r.samples, d)
	r.mu.Unlock()
}

// Count is the number of samples recorded so far.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.samples)
}

// Summary describes the samples recorded so far.
func (r *Recorder) Summary() Summary {
	r.mu.Lock()
	s := slices.Clone(r.samples)
	r.mu.Unlock()
	return Summarize(s)
}

// Summary is the distribution of a set of durations. Percentiles use the nearest-rank method: P99 is
// the smallest sample that at least 99% of the samples do not exceed. All fields are zero without
// samples.
type Summary struct {
	Count int           `json:"count"`
	Min   time.Duration `json:"min_ns"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P95   time.Duration `json:"p95_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Summarize computes the Summary of samples, sorting samples in place.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	slices.Sort(samples)
	var sum float64
	for _, d := range samples {
		sum += float64(d)
	}
	return Summary{
		Count: len(samples),
		Min:   samples[0],
		Mean:  time.Duration(sum / float64(len(samples))),
		P50:   Percentile(samples, 50),
		P95:   Percentile(samples, 95),
		P99:   Percentile(samples, 99),
		Max:   samples[len(samples)-1],
	}
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of sorted samples, or 0 when
// there are none.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Timeline records durations by when the operation began, relative to a start, so that a run's slow
// operations can be placed in time (a tail that comes from a few stalled seconds looks different from
// one spread over the whole window). It is safe for concurrent use; Begin must be called before Record.
type Timeline struct {
	mu      sync.Mutex
	start   time.Time
	samples []timedSample
}

type timedSample struct {
	at, d time.Duration
}

// Begin sets the moment offsets are measured from and drops earlier samples.
func (t *Timeline) Begin(start time.Time) {
	t.mu.Lock()
	t.start, t.samples = start, nil
	t.mu.Unlock()
}

// Record adds one operation that began at began and took d.
func (t *Timeline) Record(began time.Time, d time.Duration) {
	t.mu.Lock()
	t.samples = append(t.samples, timedSample{at: began.Sub(t.start), d: d})
	t.mu.Unlock()
}

// Bucket summarises the operations that began in [At, At+Width).
type Bucket struct {
	At      time.Duration `json:"at_ns"`
	Width   time.Duration `json:"width_ns"`
	Summary Summary       `json:"summary"`
}

// Buckets summarises the samples in consecutive buckets of width from the start, up to the last one
// that holds a sample (empty buckets in between are kept, with a zero Summary).
func (t *Timeline) Buckets(width time.Duration) []Bucket {
	if width <= 0 {
		return nil
	}
	t.mu.Lock()
	samples := slices.Clone(t.samples)
	t.mu.Unlock()
	if len(samples) == 0 {
		return nil
	}
	var last time.Duration
	for _, s := range samples {
		last = max(last, s.at)
	}
	groups := make([][]time.Duration, int(max(0, last)/width)+1)
	for _, s := range samples {
		i := max(0, int(s.at/width)) // a sample recorded before the start counts in the first bucket
		groups[i] = append(groups[i], s.d)
	}
	out := make([]Bucket, len(groups))
	for i, g := range groups {
		out[i] = Bucket{At: time.Duration(i) * width, Width: width, Summary: Summarize(g)}
	}
	return out
}
