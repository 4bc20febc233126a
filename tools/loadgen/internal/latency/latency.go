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
