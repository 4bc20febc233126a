package scenario

import (
	"fmt"
	"strings"
	"time"
)

const (
	// timelineBucket is the width of the herd's timeline buckets.
	timelineBucket = 500 * time.Millisecond
	// wakeupProbeInterval is the sleep of loadgen's own scheduling probe during the herd.
	wakeupProbeInterval = 5 * time.Millisecond
)

// logTimeline prints the herd's fetches by when they began, next to loadgen's own wake-up delay in
// the same half second: where in the window the slow fetches were, and whether loadgen was stalled.
func (r *Runner) logTimeline(h *HerdResult) {
	var b strings.Builder
	b.WriteString("herd timeline (by when the fetch began): from    fetches    p50      p99      max  | loadgen wake-up delay max")
	for i, bk := range h.Timeline {
		var wake time.Duration
		if i < len(h.Wakeups) {
			wake = h.Wakeups[i].Summary.Max
		}
		fmt.Fprintf(&b, "\n  %5.1f s %8d %8s %8s %8s | %8s", bk.At.Seconds(), bk.Summary.Count, ms(bk.Summary.P50), ms(bk.Summary.P99),
			ms(bk.Summary.Max), ms(wake))
	}
	r.logf("%s", b.String())
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond)) }
