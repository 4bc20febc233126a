package report

import (
	"fmt"
	"strings"

	"github.com/configsync/configsync/tools/loadgen/internal/scenario"
)

// rolloutChecks are the staged rollout scenarios' rows: the clean rollout completes; with agents
// refusing the config it pauses before its last stage; neither sends the version to a host outside
// its started stages.
func rolloutChecks(r *scenario.Result) []Check {
	var out []Check
	if ro := r.Rollout; ro != nil {
		c := Check{Scenario: "rollout", Metric: fmt.Sprintf("staged rollout to %d agents (%s): POST returned → completed", r.Agents, stagesOf(ro)),
			Target: "completes"}
		if ro.State == "" {
			c.Measured, c.Verdict = "incomplete", "MISS"
		} else {
			c.Measured = fmt.Sprintf("%s in %s (server %s; %s)", ro.State, dur(ro.Elapsed), dur(ro.ServerElapsed), stageDurations(ro))
			if ro.AllAcked > 0 {
				c.Measured += fmt.Sprintf("; every ack persisted %s after the start", dur(ro.AllAcked))
			}
			c.Verdict = verdict(ro.State == "completed")
		}
		out = append(out, c, reachCheck("rollout", ro))
	}
	if ro := r.RolloutFail; ro != nil {
		c := Check{Scenario: "rollout-fail", Metric: fmt.Sprintf("staged rollout to %d agents, %d (%.0f%%) refusing the config: the gate pauses it before the last stage",
			r.Agents, ro.FailingAgents, ro.FailRatio*100), Target: fmt.Sprintf("paused at a stage < %d", ro.LastStage)}
		if ro.State == "" {
			c.Measured, c.Verdict = "incomplete", "MISS"
		} else {
			c.Measured = fmt.Sprintf("%s at stage %d, %s after the start (server %s)", ro.State, ro.CurrentStage, dur(ro.Elapsed), dur(ro.ServerElapsed))
			if ro.CurrentStage >= 0 && ro.CurrentStage < len(ro.Stages) {
				s := ro.Stages[ro.CurrentStage]
				c.Measured += fmt.Sprintf("; stage %d: %d/%d applied, %d failed, %d pending", s.Index, s.Applied, s.Targeted, s.Failed, s.Pending)
			}
			if ro.Reason != "" {
				c.Measured += "; " + ro.Reason
			}
			c.Verdict = verdict(ro.State == "paused" && ro.CurrentStage < ro.LastStage)
		}
		out = append(out, c, reachCheck("rollout-fail", ro))
		if ab := ro.Abort; ab != nil {
			out = append(out, Check{Scenario: "rollout-fail", Metric: "abort: the reached agents receive the previous config again (a newer version)",
				Measured: fmt.Sprintf("%d/%d, the last %s after the abort answered (%s)", ab.Reverted, ab.Reached, dur(ab.RevertedAfter), ab.State),
				Target:   "all of them", Verdict: verdict(ab.Reverted >= ab.Reached)})
		}
	}
	return out
}

// reachCheck: no agent outside the started stages was sent the rollout's version.
func reachCheck(name string, ro *scenario.RolloutRun) Check {
	c := Check{Scenario: name, Metric: "agents that received the version beyond the hosts of the started stages", Target: "0"}
	if ro.State == "" {
		c.Measured = "not measured"
		return c
	}
	extra := max(0, ro.Received-ro.Reached)
	c.Measured = fmt.Sprintf("%d (%d received, %d in started stages)", extra, ro.Received, ro.Reached)
	c.Verdict = verdict(extra == 0)
	return c
}

func stagesOf(ro *scenario.RolloutRun) string {
	plan, _, _ := strings.Cut(ro.Plan, "; gate")
	return plan
}

func stageDurations(ro *scenario.RolloutRun) string {
	parts := make([]string, 0, len(ro.Stages))
	for _, s := range ro.Stages {
		if s.Passed >= 0 && s.Started >= 0 {
			parts = append(parts, fmt.Sprintf("stage %d %s", s.Index, dur(s.Duration)))
		} else {
			parts = append(parts, fmt.Sprintf("stage %d %s", s.Index, s.State))
		}
	}
	return strings.Join(parts, ", ")
}

// rolloutText renders a rollout's stages as a table.
func rolloutText(p func(string, ...any), name string, ro *scenario.RolloutRun) {
	if ro == nil {
		return
	}
	p("")
	final := ""
	if ro.FinalVersion > 0 {
		final = fmt.Sprintf(", final version %d", ro.FinalVersion)
	}
	p("%s: rollout %s of %s, version %d (previous %d%s); plan %s. POST %s; %s after %d polls%s.", strings.ToUpper(name[:1])+name[1:], ro.ID, ro.ConfigType,
		ro.Version, ro.PreviousVersion, final, ro.Plan, dur(ro.StartLatency), ro.State, ro.Polls, reasonText(ro.Reason))
	p("| stage | hosts | state | targeted | applied | failed | pending | offline | unhealthy | started (server, from created_at) | stage took (server) | seen passed (from POST) |")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range ro.Stages {
		started, took, seen := "—", "—", "—"
		if s.Started >= 0 {
			started = "+" + dur(s.Started)
		}
		if s.Started >= 0 && s.Passed >= 0 {
			took = dur(s.Duration)
		}
		if s.SeenPassed > 0 {
			seen = dur(s.SeenPassed)
		}
		p("| %d | %s | %s | %d | %d | %d | %d | %d | %d | %s | %s | %s |", s.Index, s.What, s.State, s.Targeted, s.Applied, s.Failed, s.Pending,
			s.Offline, s.Unhealthy, started, took, seen)
	}
	for _, s := range ro.Stages {
		for _, e := range s.TopErrors {
			p("  stage %d: %d host(s) failed: %s", s.Index, e.Hosts, e.Error)
		}
	}
	p("  config_updates the agents received meanwhile: %d, of which %d carried a version the agent already held; %d agents reached.", ro.Commands, ro.Repeated, ro.Reached)
	if ab := ro.Abort; ab != nil {
		p("  abort: %s in %s; %d config_updates until the %d reached agents had the previous config back (version %d), %s after the abort answered.",
			ab.State, dur(ab.Latency), ab.Commands, ab.Reached, ab.Version, dur(ab.RevertedAfter))
	}
	p("  CPU: %s", cpuLine(ro.CPU, int64(ro.Received), "agent reached"))
}

func reasonText(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}
