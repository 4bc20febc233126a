// Package rollout holds the one rule that places a host in a stage of a staged rollout (issue 18). Every
// component that decides what a host should hold during a rollout (the resolver, anti-entropy repair,
// drift, a cache of effective configs) is to ask StageOf / Started, so they can never disagree about a
// host; a cache keys on the rollout id and the index of the last started stage. Not wired into
// resolution yet: today no rollout exists and every host resolves the environment's current revision.
//
// Assignment is per host and needs no view of the rest of the fleet: a host's bucket is a hash of the
// rollout id and the host id, so the same host lands in the same stage for the same rollout, a different
// rollout reshuffles the fleet (the same hosts are not always the canaries), and a host registered
// mid-rollout is placed by the same rule. Count-based stages ("1 host") are the exception: which hosts
// they hold depends on the fleet, so they are materialized once, when the stage starts, into Members.
package rollout

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/configsync/configsync/libs/protocol/selector"
)

// Stage is one step of a plan. A host belongs to the first stage whose Selector matches its inventory
// labels and that takes it: by Members (a count stage, materialized at its start) or by Percent (its
// bucket is below Percent of the fleet). Percentages are cumulative: 5 then 25 means the second stage
// adds the hosts between 5% and 25%.
type Stage struct {
	Selector selector.Selector
	// Percent of the hosts matching Selector, in (0, 100]; 0 for a count stage.
	Percent float64
	// Hosts is a count stage's size; Members are the host ids it holds once started.
	Hosts   int
	Members []string
}

// bucketScale is the resolution of buckets: 1/1,000,000 of the fleet.
const bucketScale = 1_000_000

// Bucket is a host's stable position in [0, bucketScale) for one rollout.
func Bucket(rolloutID, hostID string) uint64 {
	h := sha256.New()
	h.Write([]byte(rolloutID))
	h.Write([]byte{0}) // no id contains NUL, so (a, bc) and (ab, c) never collide
	h.Write([]byte(hostID))
	return binary.BigEndian.Uint64(h.Sum(nil)[:8]) % bucketScale
}

// StageOf returns the index of the stage that holds the host, or -1 when none does (the host keeps the
// previous revision until the rollout completes).
func StageOf(rolloutID string, stages []Stage, hostID string, labels selector.Labels) int {
	b := Bucket(rolloutID, hostID)
	for i, s := range stages {
		if !s.Selector.Matches(labels) {
			continue
		}
		if s.Hosts > 0 {
			if slices.Contains(s.Members, hostID) {
				return i
			}
			continue
		}
		if float64(b) < s.Percent*bucketScale/100 {
			return i
		}
	}
	return -1
}

// Started reports whether the host should resolve the rollout's new revision when the stages up to
// and including current have started.
func Started(rolloutID string, stages []Stage, current int, hostID string, labels selector.Labels) bool {
	i := StageOf(rolloutID, stages, hostID, labels)
	return i >= 0 && i <= current
}

// DefaultStages is the plan used when a rollout names none: 1 host, then 5%, 25% and 100%.
func DefaultStages() []Stage {
	return []Stage{{Hosts: 1}, {Percent: 5}, {Percent: 25}, {Percent: 100}}
}

// Validate checks a plan's stages; errors name the stage (stages[i]).
func Validate(stages []Stage) error {
	if len(stages) == 0 || len(stages) > 20 {
		return fmt.Errorf("stages must list 1 to 20 stages, not %d", len(stages))
	}
	for i, s := range stages {
		switch {
		case s.Hosts < 0:
			return fmt.Errorf("stages[%d].hosts must not be negative", i)
		case s.Hosts > 0 && s.Percent != 0:
			return fmt.Errorf("stages[%d]: give hosts or percent, not both", i)
		case s.Hosts == 0 && (s.Percent <= 0 || s.Percent > 100):
			return fmt.Errorf("stages[%d].percent must be in (0, 100]", i)
		}
	}
	last := stages[len(stages)-1]
	if !last.Selector.Empty() || last.Percent != 100 {
		// Without it, hosts matching no stage would keep the previous revision after "completion".
		return fmt.Errorf("stages[%d]: the last stage must take every host (percent 100, no selector)", len(stages)-1)
	}
	return nil
}
