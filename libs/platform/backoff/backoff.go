// Package backoff holds the one context-aware wait that every retry loop of the services uses.
package backoff

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends; it reports whether the whole of d passed (false: ctx ended first).
// Its timer is released either way.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
