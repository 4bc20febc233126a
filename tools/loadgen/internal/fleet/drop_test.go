package fleet

import (
	"fmt"
	"testing"
)

func TestDropFirstLosesOnlyTheFirstPushOfAVersion(t *testing.T) {
	a := newAgent("a-1", nil, nil)
	if !a.dropFirst("labels", 5, 1) {
		t.Fatal("p=1: the first push of v5 was not lost")
	}
	if a.dropFirst("labels", 5, 1) {
		t.Fatal("the repair of v5 was lost too")
	}
	if a.dropFirst("labels", 4, 1) {
		t.Fatal("an older version counted as a first push")
	}
	if !a.dropFirst("labels", 6, 1) || a.dropFirst("collectors", 6, 0) {
		t.Fatal("p decides per (type, version)")
	}
	// About the requested share of a fleet loses a given push.
	lost := 0
	for i := range 10000 {
		if newAgent(fmt.Sprintf("agent-%d", i), nil, nil).dropFirst("collectors", 7, 0.1) {
			lost++
		}
	}
	if lost < 800 || lost > 1200 {
		t.Fatalf("%d of 10000 agents lost the push, want about 1000", lost)
	}
}
