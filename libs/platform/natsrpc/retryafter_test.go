package natsrpc

import (
	"context"
	"testing"
	"time"
)

// The retry delay is the time to work off the queue and the recent refusals at the measured rate,
// within the bounds, jittered over [d, 2d).
func TestRetryAfter(t *testing.T) {
	cases := []struct {
		name            string
		queued          int
		refused, served float64
		lo              time.Duration
	}{
		{"queue and refusals at the rate", 1000, 1000, 2000, time.Second},
		{"no rate yet: half the timeout", 4096, 0, 0, 5 * time.Second},
		{"fast drain: the floor", 10, 0, 100000, MinRetryAfter},
		{"slow drain: the ceiling", 4096, 100000, 10, MaxRetryAfter},
	}
	for _, c := range cases {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := retryAfter(c.queued, c.refused, c.served, 10*time.Second)
			if d < c.lo || d >= 2*c.lo {
				t.Fatalf("%s: %v, want in [%v, %v)", c.name, d, c.lo, 2*c.lo)
			}
			seen[d] = true
		}
		if len(seen) < 100 {
			t.Errorf("%s: %d distinct delays in 200, want them spread", c.name, len(seen))
		}
	}
}

// A rate meter reports the last complete window, or the current one once it is long enough.
func TestRateMeter(t *testing.T) {
	var m rateMeter
	t0 := time.Unix(1000, 0)
	if r := m.perSecond(t0); r != 0 {
		t.Fatalf("empty meter: %v", r)
	}
	m.add(500, t0)
	if r := m.perSecond(t0.Add(500 * time.Millisecond)); r != 1000 {
		t.Fatalf("half a window with 500: %v/s, want 1000", r)
	}
	m.add(500, t0.Add(time.Second)) // completes the first window (500 in 1 s)
	if r := m.perSecond(t0.Add(time.Second + time.Millisecond)); r != 500 {
		t.Fatalf("after one window: %v/s, want 500", r)
	}
}

// Beyond the fixed queue a request is queued only when the measured rate answers it within half the
// timeout.
func TestAdmitQueued(t *testing.T) {
	cases := []struct {
		queued int
		served float64
		want   bool
	}{
		{4096, 0, false},      // no measured rate
		{4096, 2000, true},    // 4,097 at 2,000/s: 2.05 s of 5 s
		{9998, 2000, true},    // 9,999 at 2,000/s: 5.0 s
		{9999, 2000, false},   // 10,000 at 2,000/s: not within 5 s
		{4096, 500, false},    // 8.2 s at 500/s
		{30000, 10000, true},  // 3 s at 10,000/s
		{60000, 10000, false}, // 6 s
	}
	for _, c := range cases {
		if got := admitQueued(c.queued, c.served, 10*time.Second); got != c.want {
			t.Errorf("%d queued at %v/s: admitted %v, want %v", c.queued, c.served, got, c.want)
		}
	}
}

// A Batcher whose answering rate works off more than its fixed queue within the timeout queues
// beyond it (up to queueGrowth times), and refuses the rest.
func TestBatcherQueuesBeyondQueueAtMeasuredRate(t *testing.T) {
	b := NewBatcher(BatchOptions{Workers: 1, Batch: 1, Queue: 2, Timeout: 10 * time.Second}, func(context.Context, []*Request) {})
	admitted := func() int {
		n := 0
		for range 100 {
			if b.dispatch(&Request{}) == nil {
				n++
			}
		}
		return n
	}
	if n := admitted(); n != 2 {
		t.Fatalf("without a measured rate %d queued, want the fixed 2", n)
	}
	for len(b.queue) > 0 {
		<-b.queue
	}
	b.served.mu.Lock()
	b.served.last, b.served.start = 1, time.Now() // 1 answered per second: 5 within the 5 s
	b.served.mu.Unlock()
	if n := admitted(); n != 4 {
		t.Fatalf("at 1/s %d queued, want 4 (a 5th would wait 5 s)", n)
	}
	for len(b.queue) > 0 {
		<-b.queue
	}
	b.served.mu.Lock()
	b.served.last, b.served.start = 1000, time.Now()
	b.served.mu.Unlock()
	if n := admitted(); n != 2*queueGrowth {
		t.Fatalf("at 1000/s %d queued, want the cap %d", n, 2*queueGrowth)
	}
}
