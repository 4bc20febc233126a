package scenario

import (
	"runtime"
	"testing"
)

// TestGCCyclesCountsThisProcess: the count the herd reports as loadgen's own GC cycles grows with a
// collection of this process.
func TestGCCyclesCountsThisProcess(t *testing.T) {
	before := gcCycles()
	runtime.GC()
	if after := gcCycles(); after <= before {
		t.Errorf("GC cycles %d after runtime.GC, %d before", after, before)
	}
}
