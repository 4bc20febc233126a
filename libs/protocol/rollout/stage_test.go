package rollout

import (
	"fmt"
	"math"
	"testing"

	"github.com/configsync/configsync/libs/protocol/selector"
)

// syntheticHosts is n hosts with ids and labels: every tenth host role=db, the rest role=web, regions
// round-robin over eu, us, ap.
func syntheticHosts(n int) (ids []string, labels []selector.Labels) {
	for i := range n {
		role := "web"
		if i%10 == 0 {
			role = "db"
		}
		ids = append(ids, fmt.Sprintf("host-%05d", i))
		labels = append(labels, selector.Labels{"role": role, "region": []string{"eu", "us", "ap"}[i%3]})
	}
	return ids, labels
}

// TestStageAssignmentStableAndProportional: over 10,000 synthetic hosts, each percentage stage holds
// its share of the fleet within sampling error (3 standard deviations), the same host is always in the
// same stage of a rollout, stages are cumulative, and another rollout picks other hosts.
func TestStageAssignmentStableAndProportional(t *testing.T) {
	const n = 10_000
	ids, labels := syntheticHosts(n)
	stages := []Stage{{Percent: 5}, {Percent: 25}, {Percent: 100}}
	if err := Validate(stages); err != nil {
		t.Fatal(err)
	}
	counts := make([]int, len(stages))
	first := make([]int, n)
	for i := range ids {
		s := StageOf("r-1", stages, ids[i], labels[i])
		if s < 0 {
			t.Fatalf("host %s is in no stage of a plan ending at 100%%", ids[i])
		}
		counts[s]++
		first[i] = s
	}
	prev := 0.0
	for s, st := range stages {
		p := (st.Percent - prev) / 100
		prev = st.Percent
		want := p * n
		sd := math.Sqrt(n * p * (1 - p))
		if math.Abs(float64(counts[s])-want) > 3*sd+1 {
			t.Errorf("stage %d holds %d hosts, want %.0f ± %.0f", s, counts[s], want, 3*sd)
		}
	}
	// Stable: asked again (any order), every host answers the same stage.
	for i := n - 1; i >= 0; i-- {
		if s := StageOf("r-1", stages, ids[i], labels[i]); s != first[i] {
			t.Fatalf("host %s moved from stage %d to %d", ids[i], first[i], s)
		}
	}
	// Cumulative: growing a stage's percentage only adds hosts to it.
	grown := []Stage{{Percent: 10}, {Percent: 25}, {Percent: 100}}
	for i := range ids {
		if first[i] == 0 && StageOf("r-1", grown, ids[i], labels[i]) != 0 {
			t.Fatalf("host %s left stage 0 when it grew from 5%% to 10%%", ids[i])
		}
	}
	// Another rollout draws its own canaries: the first stages overlap about as chance says (5% of 5%).
	overlap := 0
	for i := range ids {
		if first[i] == 0 && StageOf("r-2", stages, ids[i], labels[i]) == 0 {
			overlap++
		}
	}
	if overlap > counts[0]/4 {
		t.Errorf("rollouts r-1 and r-2 share %d of %d first-stage hosts", overlap, counts[0])
	}
}

// TestStageSelectorsAndCounts: a selector stage takes only matching hosts, a count stage only its
// materialized members, and a host that matches no earlier stage falls to the last one.
func TestStageSelectorsAndCounts(t *testing.T) {
	ids, labels := syntheticHosts(1000)
	stages := []Stage{
		{Hosts: 1, Members: []string{"host-00007"}},
		{Selector: selector.MustParse("role=db"), Percent: 100},
		{Selector: selector.MustParse("region=eu"), Percent: 50},
		{Percent: 100},
	}
	if err := Validate(stages); err != nil {
		t.Fatal(err)
	}
	counts := make([]int, len(stages))
	for i := range ids {
		s := StageOf("r", stages, ids[i], labels[i])
		counts[s]++
		switch {
		case ids[i] == "host-00007" && s != 0:
			t.Fatalf("the canary is in stage %d", s)
		case s == 1 && labels[i]["role"] != "db", s == 2 && labels[i]["region"] != "eu":
			t.Fatalf("host %s %v is in stage %d", ids[i], labels[i], s)
		case labels[i]["role"] == "db" && ids[i] != "host-00007" && s != 1:
			t.Fatalf("db host %s is in stage %d", ids[i], s)
		}
		if Started("r", stages, 1, ids[i], labels[i]) != (s <= 1) {
			t.Fatalf("Started disagrees with StageOf for %s", ids[i])
		}
	}
	if counts[0] != 1 || counts[1] != 100 {
		t.Fatalf("stage sizes %v, want 1 canary and 100 db hosts", counts)
	}
	if counts[2] < 110 || counts[2] > 190 {
		t.Fatalf("stage 2 (half of ~300 eu web hosts) holds %d", counts[2])
	}
}

func TestValidate(t *testing.T) {
	if err := Validate(DefaultStages()); err != nil {
		t.Fatalf("the default plan: %v", err)
	}
	for _, bad := range [][]Stage{
		nil,
		{{Percent: 50}},
		{{Percent: 0}, {Percent: 100}},
		{{Hosts: 1, Percent: 5}, {Percent: 100}},
		{{Percent: 101}},
		{{Selector: selector.MustParse("a=b"), Percent: 100}},
	} {
		if err := Validate(bad); err == nil {
			t.Errorf("Validate(%+v) accepted", bad)
		}
	}
}
