package scenario

import (
	"fmt"
	"runtime/metrics"
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
	fmt.Fprintf(&b, "\n  loadgen's own GC cycles that ended during the herd: %d", h.LoadgenGCs)
	r.logf("%s", b.String())
}

// gcCycles is the number of GC cycles this process has completed.
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond)) }
