package latency

import (
	"context"
	"testing"
	"time"
)

// TestTimelineBuckets: samples fall in the bucket of when they began, empty buckets in between are kept,
// and each bucket is summarised on its own samples.
func TestTimelineBuckets(t *testing.T) {
	var tl Timeline
	start := time.Unix(1000, 0)
	tl.Begin(start)
	ms := time.Millisecond
	tl.Record(start.Add(10*ms), 5*ms)
	tl.Record(start.Add(490*ms), 7*ms)
	tl.Record(start.Add(1600*ms), 900*ms) // bucket 3; bucket 2 stays empty
	tl.Record(start.Add(-ms), 1*ms)       // before the start: the first bucket
	got := tl.Buckets(500 * ms)
	if len(got) != 4 {
		t.Fatalf("%d buckets, want 4: %+v", len(got), got)
	}
	for i, want := range []struct {
		at        time.Duration
		count     int
		p50, maxD time.Duration
	}{
		{0, 3, 5 * ms, 7 * ms},
		{500 * ms, 0, 0, 0},
		{1000 * ms, 0, 0, 0},
		{1500 * ms, 1, 900 * ms, 900 * ms},
	} {
		b := got[i]
		if b.At != want.at || b.Width != 500*ms || b.Summary.Count != want.count || b.Summary.P50 != want.p50 || b.Summary.Max != want.maxD {
			t.Errorf("bucket %d = at %v width %v count %d p50 %v max %v, want at %v count %d p50 %v max %v",
				i, b.At, b.Width, b.Summary.Count, b.Summary.P50, b.Summary.Max, want.at, want.count, want.p50, want.maxD)
		}
	}
	tl.Begin(start.Add(time.Hour))
	if got := tl.Buckets(500 * ms); got != nil {
		t.Errorf("after Begin: %+v, want no buckets", got)
	}
	if got := tl.Buckets(0); got != nil {
		t.Errorf("width 0: %+v, want none", got)
	}
}

// TestProbeWakeupsRecordsUntilCancelled: the probe records one non-negative delay per sleep and returns
// once its context is done.
func TestProbeWakeupsRecordsUntilCancelled(t *testing.T) {
	var tl Timeline
	tl.Begin(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ProbeWakeups(ctx, time.Millisecond, &tl) }()
	for count(tl.Buckets(time.Hour)) < 5 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	n := count(tl.Buckets(time.Hour))
	if got := tl.Buckets(time.Hour); got[0].Summary.Min < 0 {
		t.Errorf("negative wake-up delay %v", got[0].Summary.Min)
	}
	time.Sleep(5 * time.Millisecond)
	if after := count(tl.Buckets(time.Hour)); after != n {
		t.Errorf("probe recorded %d samples after it returned", after-n)
	}
}

func count(bs []Bucket) int {
	n := 0
	for _, b := range bs {
		n += b.Summary.Count
	}
	return n
}
