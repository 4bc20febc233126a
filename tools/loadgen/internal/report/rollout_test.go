package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/configsync/configsync/tools/loadgen/internal/configapi"
	"github.com/configsync/configsync/tools/loadgen/internal/scenario"
)

// TestRolloutChecks: the clean rollout passes when it completed; the failing one when it paused before
// its last stage; an agent sent the version outside the started stages, a pause at the last stage, an
// incomplete abort or a rollout that never started are misses.
func TestRolloutChecks(t *testing.T) {
	stages := func(states ...string) []scenario.StageRun {
		out := make([]scenario.StageRun, len(states))
		for i, s := range states {
			out[i] = scenario.StageRun{Index: i, What: []string{"1 host", "5%", "100%"}[i], State: s, Targeted: 10, Applied: 10,
				Started: time.Duration(i) * time.Second, Passed: -1}
			if s == "passed" {
				out[i].Passed, out[i].Duration = out[i].Started+500*time.Millisecond, 500*time.Millisecond
			}
		}
		return out
	}
	r := &scenario.Result{Agents: 30,
		Rollout: &scenario.RolloutRun{Plan: "1 host → 5% → 100%; bake 0 s; gate max_failed 0", State: "completed", CurrentStage: 2, LastStage: 2,
			Stages: stages("passed", "passed", "passed"), Received: 30, Reached: 30, Elapsed: 2 * time.Second},
		RolloutFail: &scenario.RolloutRun{State: "paused", CurrentStage: 1, LastStage: 2, FailRatio: 0.05, FailingAgents: 2,
			Reason: "gate failed at stage 1: 1 failed acks > max_failed 0", Stages: stages("passed", "failed", "pending"), Received: 20, Reached: 20,
			Abort: &scenario.AbortRun{State: configapi.RolloutReverted, Reached: 20, Reverted: 20}},
	}
	verdicts := func() []string {
		var out []string
		for _, c := range rolloutChecks(r) {
			out = append(out, c.Scenario+":"+c.Verdict)
		}
		return out
	}
	want := "rollout:pass rollout:pass rollout-fail:pass rollout-fail:pass rollout-fail:pass"
	if got := strings.Join(verdicts(), " "); got != want {
		t.Fatalf("verdicts %s, want %s", got, want)
	}
	if c := rolloutChecks(r)[0]; !strings.Contains(c.Measured, "stage 0 500.0 ms") || !strings.Contains(c.Metric, "1 host → 5% → 100%; bake 0 s") {
		t.Errorf("clean check = %+v", c)
	}
	var out bytes.Buffer
	Text(&out, r, "test")
	if !strings.Contains(out.String(), "| 1 | 5% | failed | 10 | 10 |") || !strings.Contains(out.String(), "Rollout-fail: rollout") {
		t.Errorf("text:\n%s", out.String())
	}

	r.Rollout.Received = 31           // one agent beyond the started stages
	r.RolloutFail.CurrentStage = 2    // paused at the last stage: the gate let the failures through
	r.RolloutFail.Abort.Reverted = 19 // one reached agent never got the previous config back
	want = "rollout:pass rollout:MISS rollout-fail:MISS rollout-fail:pass rollout-fail:MISS"
	if got := strings.Join(verdicts(), " "); got != want {
		t.Fatalf("verdicts %s, want %s", got, want)
	}
	r.Rollout = &scenario.RolloutRun{} // the start failed
	if got := verdicts()[0]; got != "rollout:MISS" {
		t.Fatalf("a rollout that never started: %s", got)
	}
}
