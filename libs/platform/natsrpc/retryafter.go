package natsrpc

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Bounds of the retry delay a Batcher asks refused callers to wait (protocol.Error.RetryAfterMS).
const (
	MinRetryAfter = 200 * time.Millisecond
	MaxRetryAfter = 30 * time.Second
)

// busyError is errBusy with the delay the dispatcher asks the refused caller to wait.
type busyError struct{ retryAfter time.Duration }

func (e *busyError) Error() string        { return errBusy.Error() }
func (e *busyError) Is(target error) bool { return target == errBusy }

// meterWindow is how long a rateMeter counts before it starts over.
const meterWindow = time.Second

// rateMeter measures events per second over the last complete window (and the current one, once it
// is long enough to say something).
type rateMeter struct {
	mu    sync.Mutex
	start time.Time
	n     float64
	last  float64 // events per second over the last complete window
}

func (m *rateMeter) add(n int, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.roll(now)
	m.n += float64(n)
}

// roll starts a new window once the current one is complete; a window that saw nothing for long
// forgets the old rate.
func (m *rateMeter) roll(now time.Time) {
	if m.start.IsZero() {
		m.start = now
		return
	}
	if el := now.Sub(m.start); el >= meterWindow {
		m.last = m.n / el.Seconds()
		m.start, m.n = now, 0
	}
}

// perSecond is the higher of the last window's rate and the current window's so far.
func (m *rateMeter) perSecond(now time.Time) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.roll(now)
	cur := 0.0
	if el := now.Sub(m.start); el >= meterWindow/10 {
		cur = m.n / el.Seconds()
	}
	return max(m.last, cur)
}

// retryAfter is how long a caller refused now should wait: the time this dispatcher needs to work
// off what waits for it — the queue, plus the callers refused over the last second, who come back
// too — at the rate it has been answering, jittered over [d, 2d) so the refused callers come back
// spread over that time rather than together. Without a measured rate (nothing answered yet) it
// assumes the queue drains within the request timeout.
func retryAfter(queued int, refusedPerSecond, servedPerSecond float64, timeout time.Duration) time.Duration {
	backlog := float64(queued) + refusedPerSecond*meterWindow.Seconds()
	var d time.Duration
	if servedPerSecond > 0 {
		d = time.Duration(backlog / servedPerSecond * float64(time.Second))
	} else {
		d = timeout / 2
	}
	d = min(max(d, MinRetryAfter), MaxRetryAfter)
	return d + rand.N(d)
}
