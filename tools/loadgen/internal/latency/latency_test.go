package latency

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestPercentileNearestRank(t *testing.T) {
	// 1..100 ms: the p-th percentile of a 100-sample set is exactly p ms.
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, ms(i))
	}
	sum := Summarize(s)
	want := Summary{Count: 100, Min: ms(1), Mean: 50500 * time.Microsecond, P50: ms(50), P95: ms(95), P99: ms(99), Max: ms(100)}
	if sum != want {
		t.Fatalf("Summarize(1..100ms) = %+v, want %+v", sum, want)
	}
}

func TestPercentileSmallSets(t *testing.T) {
	cases := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 99, 0},
		{"one sample is every percentile", []time.Duration{ms(7)}, 1, ms(7)},
		{"one sample p99", []time.Duration{ms(7)}, 99, ms(7)},
		{"two samples p50 is the lower", []time.Duration{ms(1), ms(9)}, 50, ms(1)},
		{"two samples p51 is the upper", []time.Duration{ms(1), ms(9)}, 51, ms(9)},
		{"ten samples p95 is the max", []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 95, 10},
		{"ten samples p90", []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
		{"p100 is the max", []time.Duration{3, 1, 2}, 100, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sorted := append([]time.Duration(nil), c.samples...)
			Summarize(sorted) // sorts in place
			if got := Percentile(sorted, c.p); got != c.want {
				t.Fatalf("Percentile(%v, %v) = %v, want %v", c.samples, c.p, got, c.want)
			}
		})
	}
}

func TestSummaryOfNothingIsZero(t *testing.T) {
	var r Recorder
	if s := r.Summary(); s != (Summary{}) {
		t.Fatalf("empty summary = %+v", s)
	}
}

func TestRecorderConcurrentAndOrderIndependent(t *testing.T) {
	var r Recorder
	var wg sync.WaitGroup
	perm := rand.Perm(1000)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(perm); i += 8 {
				r.Record(time.Duration(perm[i]+1) * time.Microsecond)
			}
		}()
	}
	wg.Wait()
	s := r.Summary()
	if s.Count != 1000 || r.Count() != 1000 {
		t.Fatalf("count = %d / %d, want 1000", s.Count, r.Count())
	}
	if s.Min != time.Microsecond || s.Max != 1000*time.Microsecond {
		t.Fatalf("min/max = %v/%v", s.Min, s.Max)
	}
	if s.P50 != 500*time.Microsecond || s.P95 != 950*time.Microsecond || s.P99 != 990*time.Microsecond {
		t.Fatalf("percentiles = %v/%v/%v", s.P50, s.P95, s.P99)
	}
	// Summary must not reorder or consume what the recorder holds.
	r.Record(time.Hour)
	if s2 := r.Summary(); s2.Count != 1001 || s2.Max != time.Hour {
		t.Fatalf("after another sample: %+v", s2)
	}
}
