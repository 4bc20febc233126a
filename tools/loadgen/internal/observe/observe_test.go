package observe

import (
	"testing"

	"github.com/configsync/configsync/tools/loadgen/internal/fleet"
)

func TestHeartbeatSeqRoundTrip(t *testing.T) {
	for _, n := range []int64{1, 42, 1 << 40} {
		if got := HeartbeatSeq(fleet.HeartbeatVersion("loadgen/1.0.0", n)); got != n {
			t.Errorf("HeartbeatSeq(HeartbeatVersion(%d)) = %d", n, got)
		}
	}
	for _, v := range []string{"", "1.0.0", "loadgen/1.0.0+hb.", "x+hb.-3", "x+hb.12a"} {
		if got := HeartbeatSeq(v); got != 0 {
			t.Errorf("HeartbeatSeq(%q) = %d, want 0", v, got)
		}
	}
}
