package latency

import (
	"context"
	"time"
)

// ProbeWakeups measures this process's own scheduling delay until ctx is done: one goroutine sleeps
// interval over and over and records, by when each sleep began, how much later than asked it woke.
// A client that measures round trips counts its own stalls (GC assists and pauses, a starved CPU)
// as the server's latency; this says how large they were and when. It returns when ctx is done.
func ProbeWakeups(ctx context.Context, interval time.Duration, into *Timeline) {
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		began := time.Now()
		t.Reset(interval)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// Read the clock once running again: the delay includes waiting for a CPU.
			into.Record(began, max(0, time.Since(began)-interval))
		}
	}
}
