package rollouts

import (
	"strings"
	"testing"
)

func TestGateEvaluate(t *testing.T) {
	g := Gate{MaxFailed: 1, MaxFailedRatio: 0.25, MaxUnhealthy: 0, MinAppliedRatio: 0.9}
	for _, tc := range []struct {
		name   string
		c      Counts
		want   Verdict
		reason string
	}{
		{"all applied", Counts{Targeted: 10, Applied: 10}, Pass, ""},
		{"offline hosts do not block", Counts{Targeted: 10, Applied: 6, Offline: 4}, Pass, ""},
		{"nobody online", Counts{Targeted: 3, Offline: 3}, Pass, ""},
		{"pending below the ratio waits", Counts{Targeted: 10, Applied: 5, Pending: 5}, Wait, ""},
		{"ratio met but a pending ack could still fail it", Counts{Targeted: 20, Applied: 18, Failed: 1, Pending: 1}, Wait, ""},
		{"ratio met and the pending acks cannot break a limit", Counts{Targeted: 20, Applied: 19, Pending: 1}, Pass, ""},
		{"too many failed", Counts{Targeted: 10, Applied: 8, Failed: 2}, Fail, "2 failed acks > max_failed 1"},
		{"failed ratio", Counts{Targeted: 3, Applied: 2, Failed: 1}, Fail, "1 of 3 targets failed > max_failed_ratio 0.25"},
		{"unhealthy", Counts{Targeted: 10, Applied: 10, Unhealthy: 1}, Fail, "1 hosts stopped heartbeating after applying > max_unhealthy 0"},
		{"answered below the ratio", Counts{Targeted: 20, Applied: 17, Failed: 1, Offline: 1, Pending: 0}, Fail, "17 of 19 online targets applied < min_applied_ratio 0.9"},
	} {
		got, reason := g.Evaluate(2, tc.c)
		if got != tc.want || !strings.Contains(reason, tc.reason) || (tc.reason != "" && !strings.HasPrefix(reason, "gate failed at stage 2: ")) {
			t.Errorf("%s: Evaluate(%+v) = %v %q, want %v %q", tc.name, tc.c, got, reason, tc.want, tc.reason)
		}
	}
}

func TestPlanNormalize(t *testing.T) {
	p, err := Plan{}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Stages) != 4 || p.Stages[0].Hosts != 1 || p.Stages[3].Percent != 100 || *p.BakeSeconds != DefaultBakeSeconds ||
		p.Gate == nil || p.Gate.MinAppliedRatio != DefaultMinAppliedRatio || p.AutoRevert {
		t.Fatalf("default plan: %+v", p)
	}
	neg := -1
	for _, tc := range []struct {
		plan  Plan
		field string
	}{
		{Plan{Stages: []StagePlan{{Percent: 5}, {Percent: 150}}}, "plan.stages[1].percent"},
		{Plan{Stages: []StagePlan{{Percent: 50}}}, "plan.stages[0]"},
		{Plan{Stages: []StagePlan{{Hosts: 1, Selector: "a in ("}, {Percent: 100}}}, "plan.stages[0].selector"},
		{Plan{Stages: []StagePlan{{Hosts: 1, BakeSeconds: &neg}, {Percent: 100}}}, "plan.stages[0].bake_seconds"},
		{Plan{BakeSeconds: &neg}, "plan.bake_seconds"},
		{Plan{Gate: &Gate{MinAppliedRatio: 2}}, "plan.gate.min_applied_ratio"},
		{Plan{Gate: &Gate{MaxFailed: -1}}, "plan.gate.max_failed"},
	} {
		if _, err := tc.plan.Normalize(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Normalize(%+v) = %v, want an error naming %s", tc.plan, err, tc.field)
		}
	}
}

// An ended rollout shows each decided stage as its gate saw it; an active one shows live counts.
func TestShownCountsOfAnEndedRollout(t *testing.T) {
	decided := Counts{Targeted: 1, Failed: 1}
	live := func() []Counts { return []Counts{{Targeted: 1, Applied: 1}, {Targeted: 3, Applied: 3}} }
	r := Rollout{State: StateReverted, Stages: []Stage{{State: StageFailed, Decided: &decided}, {State: StagePending}}}
	got := shown(&r, live())
	if got[0].Failed != 1 || got[0].Applied != 0 || got[1].Applied != 3 {
		t.Fatalf("ended rollout shows %+v, want stage 0 as decided (1 failed) and stage 1 live", got)
	}
	r.State = StatePaused
	if got := shown(&r, live()); got[0].Applied != 1 || got[0].Failed != 0 {
		t.Fatalf("active rollout shows %+v, want live counts", got)
	}
}
