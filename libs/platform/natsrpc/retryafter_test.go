package natsrpc

import (
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
