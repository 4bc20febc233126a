package fleet

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/configsync/configsync/libs/protocol"
)

// retryState follows the agents whose startup fetch failed as they retry the way the real agent does
// (protocol.ServerRetryAfter, else protocol.FetchBackoff), so a herd is measured until every agent has
// its config, not only by its first attempts.
type retryState struct {
	boot     time.Time
	deadline time.Time // zero: agents do not retry

	retries, retriedOK, gaveUp atomic.Int64
	serverDelays               atomic.Int64 // retries that waited a backend's retry_after_ms
	mu                         sync.Mutex
	lastConfigured             time.Time
}

func (r *retryState) begin(now time.Time, retryFor time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.boot, r.lastConfigured = now, time.Time{}
	r.deadline = time.Time{}
	if retryFor > 0 {
		r.deadline = now.Add(retryFor)
	}
}

func (r *retryState) configured(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at.After(r.lastConfigured) {
		r.lastConfigured = at
	}
}

// fetchUntilConfigured retries a's startup fetch, which failed with err (nil: it succeeded), as the
// agent does, until it succeeds or the retry deadline passes.
func (f *Fleet) fetchUntilConfigured(a *Agent, err error) {
	r := &f.retry
	if err == nil {
		r.configured(time.Now())
		return
	}
	if r.deadline.IsZero() {
		return
	}
	for attempt := 0; ; attempt++ {
		d, asked := protocol.ServerRetryAfter(err)
		if !asked {
			d = protocol.FetchBackoff(attempt)
		}
		if time.Now().Add(d).After(r.deadline) {
			r.gaveUp.Add(1)
			return
		}
		if asked {
			r.serverDelays.Add(1)
		}
		time.Sleep(d)
		r.retries.Add(1)
		if _, _, err = f.fetchOnce(a); err == nil {
			r.retriedOK.Add(1)
			r.configured(time.Now())
			return
		}
	}
}

// RetryStats is what the agents' retries did during the boot.
type RetryStats struct {
	// Retries are fetches after a failed first one; RetriedOK the agents they configured; ServerDelays
	// the retries that waited a backend's retry_after_ms rather than the agent's own backoff.
	Retries      int64 `json:"retries"`
	RetriedOK    int64 `json:"retried_ok"`
	ServerDelays int64 `json:"server_delays"`
	// GaveUp counts agents left without a config when the retry window closed.
	GaveUp int64 `json:"gave_up"`
	// AllConfigured is how long after the boot began the last agent got its config (the herd's real
	// duration); zero when some agent never did.
	AllConfigured time.Duration `json:"all_configured_ns"`
}

// RetryStats returns the retry counts of the last boot.
func (f *Fleet) RetryStats() RetryStats {
	r := &f.retry
	r.mu.Lock()
	defer r.mu.Unlock()
	s := RetryStats{Retries: r.retries.Load(), RetriedOK: r.retriedOK.Load(), ServerDelays: r.serverDelays.Load(), GaveUp: r.gaveUp.Load()}
	if ok := f.counters.fetchOK.Load() + s.RetriedOK; ok == int64(len(f.agents)) && !r.lastConfigured.IsZero() {
		s.AllConfigured = r.lastConfigured.Sub(r.boot)
	}
	return s
}
