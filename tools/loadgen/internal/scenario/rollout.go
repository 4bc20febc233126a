package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/configsync/configsync/tools/loadgen/internal/configapi"
)

// The rollout scenarios: a staged rollout of the labels config (1-host canary, 5%, 100%, zero bake
// time, the default gate) started through the API over the whole fleet. Rollout expects it to complete
// and measures each stage and the whole; RolloutFail has a share of the agents refuse the new config
// (their simulated policy refuses its command label, as a real agent's does) and expects the gate to
// pause the rollout before its last stage; it then aborts it and measures the revert.
const (
	Rollout     = "rollout"
	RolloutFail = "rollout-fail"
)

// RolloutConfigType is the config type the rollout scenarios roll out.
const RolloutConfigType = "labels"

// CanaryLabel and CanaryValue mark the failing variant's canary host (agent 0, which never refuses).
const (
	CanaryLabel = "ring"
	CanaryValue = "canary"
)

// RolloutRun is one staged rollout.
type RolloutRun struct {
	ID              string `json:"id"`
	ConfigType      string `json:"config_type"`
	Version         int64  `json:"version"`
	PreviousVersion int64  `json:"previous_version"`
	// FinalVersion is the version the whole environment got when the rollout completed (0 otherwise).
	FinalVersion int64 `json:"final_version,omitempty"`
	// Plan describes the stages, bake time and gate.
	Plan string `json:"plan"`
	// FailRatio is the share of agents asked to refuse the config; FailingAgents how many that is.
	FailRatio     float64 `json:"fail_ratio,omitempty"`
	FailingAgents int     `json:"failing_agents,omitempty"`
	// StartLatency is the POST's round trip.
	StartLatency time.Duration `json:"start_latency_ns"`
	// State, Reason and CurrentStage are the rollout's when it stopped running; LastStage is the
	// index of its last stage.
	State        string `json:"state"`
	Reason       string `json:"reason,omitempty"`
	CurrentStage int    `json:"current_stage"`
	LastStage    int    `json:"last_stage"`
	// Elapsed runs from the POST's answer to the first poll that showed the rollout no longer running
	// (an upper bound, by the poll interval); ServerElapsed from its created_at to the last stage's
	// passed_at (completed) or its updated_at (otherwise).
	Elapsed       time.Duration `json:"elapsed_ns"`
	ServerElapsed time.Duration `json:"server_elapsed_ns"`
	Polls         int           `json:"polls"`
	// Commands is how many config_updates the agents received from the start until the rollout stopped
	// running (completed: until every ack was persisted); Repeated how many of them carried a version
	// the agent already held (a push to a host whose config did not change).
	Commands int64      `json:"commands"`
	Repeated int64      `json:"repeated"`
	Stages   []StageRun `json:"stages"`
	// Received is how many agents had received the rollout's version when it stopped running; Reached
	// the hosts of the started stages (the sum of their targeted counts). Received > Reached means a
	// host outside every started stage was sent the version.
	Received int `json:"received"`
	Reached  int `json:"reached"`
	// AllAcked runs from the POST's answer until every agent's ack of the version was persisted
	// (completed rollouts only: the last stage may pass at min_applied_ratio).
	AllAcked time.Duration `json:"all_acked_ns,omitempty"`
	Abort    *AbortRun     `json:"abort,omitempty"`
	// CPU used from the POST until the rollout stopped running.
	CPU CPU `json:"cpu_ns"`
}

// StageRun is one stage of a rollout as it stood when the rollout stopped running.
type StageRun struct {
	Index     int                  `json:"index"`
	What      string               `json:"what"`
	State     string               `json:"state"`
	Targeted  int                  `json:"targeted"`
	Applied   int                  `json:"applied"`
	Failed    int                  `json:"failed"`
	Pending   int                  `json:"pending"`
	Offline   int                  `json:"offline"`
	Unhealthy int                  `json:"unhealthy"`
	TopErrors []configapi.TopError `json:"top_errors,omitempty"`
	// Started and Passed are the server's stage times from the rollout's created_at (-1: not yet);
	// Duration is Passed - Started.
	Started  time.Duration `json:"started_ns"`
	Passed   time.Duration `json:"passed_ns"`
	Duration time.Duration `json:"duration_ns"`
	// SeenPassed is from the POST's answer to the first poll that showed the stage passed (0: never).
	SeenPassed time.Duration `json:"seen_passed_ns"`
}

// AbortRun is the abort of a paused rollout: the hosts it reached get the previous config back.
type AbortRun struct {
	State   string        `json:"state"`
	Latency time.Duration `json:"latency_ns"`
	// Version is the rollout's final_version after the abort (the previous config, written again).
	Version int64 `json:"version,omitempty"`
	// Reverted is how many of the Reached agents received a version newer than the rollout's, and
	// RevertedAfter when the last of them did, from the abort's answer.
	Reached       int           `json:"reached"`
	Reverted      int           `json:"reverted"`
	RevertedAfter time.Duration `json:"reverted_after_ns"`
	// Commands is how many config_updates the agents received from the abort until the last reached
	// agent had the previous config back.
	Commands int64 `json:"commands"`
}

// rolloutPlan is the plan of both scenarios: a 1-host canary, 5%, 100%, no bake time, the default gate.
// The failing variant takes its canary among the hosts labelled ring=canary (one host, which never
// refuses), so the refusals meet the gate of the 5% stage.
func rolloutPlan(failing bool) configapi.RolloutPlan {
	canary := configapi.RolloutStagePlan{Hosts: 1}
	if failing {
		canary.Selector = CanaryLabel + "=" + CanaryValue
	}
	return configapi.RolloutPlan{
		Stages:      []configapi.RolloutStagePlan{canary, {Percent: 5}, {Percent: 100}},
		BakeSeconds: 0,
		Gate:        configapi.RolloutGate{MaxFailed: 0, MaxFailedRatio: 0, MaxUnhealthy: 0, MinAppliedRatio: 0.95},
	}
}

func describePlan(p configapi.RolloutPlan) string {
	parts := make([]string, len(p.Stages))
	for i, s := range p.Stages {
		parts[i] = stageWhat(s.Hosts, s.Percent, s.Selector)
	}
	g := p.Gate
	return fmt.Sprintf("%s; bake %d s; gate max_failed %d, max_failed_ratio %g, max_unhealthy %d, min_applied_ratio %g; auto_revert %t",
		strings.Join(parts, " → "), p.BakeSeconds, g.MaxFailed, g.MaxFailedRatio, g.MaxUnhealthy, g.MinAppliedRatio, p.AutoRevert)
}

func stageWhat(hosts int, percent float64, selector string) string {
	var w string
	switch {
	case hosts == 1:
		w = "1 host"
	case hosts > 1:
		w = fmt.Sprintf("%d hosts", hosts)
	default:
		w = strconv.FormatFloat(percent, 'f', -1, 64) + "%"
	}
	if selector != "" {
		w += " of " + selector
	}
	return w
}

// rolloutConfig is the labels config a rollout writes: new static labels, and for the failing variant a
// command label, which the refusing agents' policy does not allow.
func (r *Runner) rolloutConfig(failing bool) map[string]any {
	cfg := map[string]any{"static": map[string]string{"bench": "loadgen", "run": r.opts.RunID, "rollout": "clean"}}
	if failing {
		cfg["static"] = map[string]string{"bench": "loadgen", "run": r.opts.RunID, "rollout": "kernel-label"}
		cfg["dynamic"] = []map[string]any{{"name": "kernel", "source": "command", "command": []string{"uname", "-r"}, "interval": "1h"}}
	}
	return cfg
}

// failingAgents picks round(ratio × (n-1)) agents spread evenly over indexes 1..n-1: agent 0 is the
// failing variant's canary and never refuses.
func failingAgents(ids []string, ratio float64) map[string]bool {
	out := map[string]bool{}
	if ratio <= 0 || len(ids) < 2 {
		return out
	}
	for i := 1; i < len(ids); i++ {
		if int(float64(i)*ratio+0.5) > int(float64(i-1)*ratio+0.5) {
			out[ids[i]] = true
		}
	}
	return out
}

// refusal plays the local policy of the refusing agents: a labels config with a command label is
// refused with the text the agent's policy gives (commands are off by default).
func (r *Runner) refusal(agentID, configType string, payload json.RawMessage) string {
	if configType != RolloutConfigType || !r.failing[agentID] {
		return ""
	}
	var labels struct {
		Dynamic []struct {
			Source  string   `json:"source"`
			Command []string `json:"command"`
		} `json:"dynamic"`
	}
	if json.Unmarshal(payload, &labels) != nil {
		return ""
	}
	for i, d := range labels.Dynamic {
		if d.Source == "command" && len(d.Command) > 0 {
			return fmt.Sprintf("labels: dynamic[%d].command: policy: commands: %s: command labels are off (policy.commands is empty)", i, d.Command[0])
		}
	}
	return ""
}

// rollout runs one staged rollout over the fleet (failing: the variant where some agents refuse it).
func (r *Runner) rollout(ctx context.Context, failing bool) (*RolloutRun, error) {
	plan := rolloutPlan(failing)
	run := &RolloutRun{ConfigType: RolloutConfigType, Plan: describePlan(plan), LastStage: len(plan.Stages) - 1}
	if failing {
		run.FailRatio, run.FailingAgents = r.opts.FailRatio, len(r.failing)
		r.logf("rollout-fail: %d of %d agents refuse the new %s config; plan %s", run.FailingAgents, r.opts.Agents, RolloutConfigType, run.Plan)
	} else {
		r.logf("rollout: %s config to %d agents; plan %s", RolloutConfigType, r.opts.Agents, run.Plan)
	}
	cpu0 := r.cpuSnapshot()
	fleet0 := r.fleet.Stats()
	countCommands := func() {
		s := r.fleet.Stats()
		run.Commands, run.Repeated = s.Commands-fleet0.Commands, s.Repeated-fleet0.Repeated
	}
	sent := time.Now()
	ro, err := r.backend.API.StartRollout(ctx, r.envID, RolloutConfigType, r.rolloutConfig(failing), &plan)
	if err != nil {
		return run, fmt.Errorf("start: %w", err)
	}
	returned := time.Now()
	run.ID, run.Version, run.StartLatency = ro.ID, ro.Version, returned.Sub(sent)
	if ro.PreviousVersion != nil {
		run.PreviousVersion = *ro.PreviousVersion
	}
	seen := map[int]time.Duration{}
	final, err := r.watchRollout(ctx, ro.ID, r.pollInterval(), func(ro configapi.Rollout) bool {
		run.Polls++
		for _, s := range ro.Stages {
			if _, ok := seen[s.Index]; !ok && s.State == "passed" {
				seen[s.Index] = time.Since(returned)
			}
		}
		return ro.State != configapi.RolloutRunning
	})
	run.CPU = r.cpuSince(cpu0)
	if err != nil {
		return run, err
	}
	run.Elapsed = time.Since(returned)
	countCommands()
	received := r.receivedAtLeast(final.Version)
	summarizeRollout(run, final, seen)
	run.Received = len(received)
	r.logf("%s: %s after %s (server %s), stage %d of 0-%d%s; %d agents received version %d, %d hosts in started stages; %d commands (%d of a version the agent held)",
		map[bool]string{false: Rollout, true: RolloutFail}[failing], run.State, run.Elapsed.Round(time.Millisecond),
		run.ServerElapsed.Round(time.Millisecond), run.CurrentStage, run.LastStage, reasonSuffix(run.Reason), run.Received, run.Version, run.Reached,
		run.Commands, run.Repeated)
	for _, s := range run.Stages {
		r.logf("  stage %d (%s) %s: %d/%d applied, %d failed, %d pending, %d offline, %d unhealthy; %s",
			s.Index, s.What, s.State, s.Applied, s.Targeted, s.Failed, s.Pending, s.Offline, s.Unhealthy, stageTimes(s))
	}
	if run.Received > run.Reached {
		r.note("%s: %d agents received version %d but the started stages hold %d hosts", map[bool]string{false: Rollout, true: RolloutFail}[failing],
			run.Received, run.Version, run.Reached)
	}
	if final.State == configapi.RolloutCompleted {
		// The last stage may pass at min_applied_ratio: wait for the rest of the fleet's acks too.
		doneAt, err := r.waitFor(ctx, "rollout acks", r.pollInterval(), func(ctx context.Context) (bool, string, error) {
			p, err := r.backend.Observer.Acks(ctx, r.envID, RolloutConfigType, final.Version)
			return p.Applied+p.Failed >= r.opts.Agents, fmt.Sprintf("%d/%d acks persisted", p.Applied+p.Failed, r.opts.Agents), err
		})
		if err != nil {
			return run, err
		}
		run.AllAcked = doneAt.Sub(returned)
		countCommands()
		r.logf("rollout: every agent's ack of version %d persisted %s after the start", final.Version, run.AllAcked.Round(time.Millisecond))
	}
	if final.Active() {
		// Leave the environment config writable: abort, and watch the reached hosts get the previous
		// config back (a newer version).
		if run.Abort, err = r.abortRollout(ctx, final, received); err != nil {
			return run, fmt.Errorf("abort: %w", err)
		}
	}
	return run, nil
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

func stageTimes(s StageRun) string {
	switch {
	case s.Started < 0:
		return "not started"
	case s.Passed < 0:
		return fmt.Sprintf("started at +%s", s.Started.Round(time.Millisecond))
	default:
		return fmt.Sprintf("started at +%s, passed %s later", s.Started.Round(time.Millisecond), s.Duration.Round(time.Millisecond))
	}
}

// receivedAtLeast is the set of agents whose last received command of the rollout's type had version
// or newer.
func (r *Runner) receivedAtLeast(version int64) map[string]bool {
	out := map[string]bool{}
	for id, v := range r.fleet.ReceivedVersions(RolloutConfigType) {
		if v >= version {
			out[id] = true
		}
	}
	return out
}

// watchRollout polls a rollout until stop says so, and returns the rollout stop saw last.
func (r *Runner) watchRollout(ctx context.Context, id string, interval time.Duration, stop func(configapi.Rollout) bool) (configapi.Rollout, error) {
	var last configapi.Rollout
	_, err := r.waitFor(ctx, "rollout "+id, interval, func(ctx context.Context) (bool, string, error) {
		ro, err := r.backend.API.GetRollout(ctx, r.envID, RolloutConfigType, id)
		if err != nil {
			return false, "", err
		}
		last = ro
		return stop(ro), rolloutStatus(ro), nil
	})
	return last, err
}

// rolloutStatus is the progress line of a rollout: its state and the current stage's counts.
func rolloutStatus(ro configapi.Rollout) string {
	out := ro.State
	if ro.CurrentStage >= 0 && ro.CurrentStage < len(ro.Stages) {
		s := ro.Stages[ro.CurrentStage]
		out += fmt.Sprintf(", stage %d %s: %d/%d applied, %d failed, %d pending", s.Index, s.State, s.Applied, s.Targeted, s.Failed, s.Pending)
	}
	return out
}

// summarizeRollout fills run from the rollout as it stopped running and the times polls first saw
// each stage passed.
func summarizeRollout(run *RolloutRun, ro configapi.Rollout, seenPassed map[int]time.Duration) {
	run.State, run.Reason, run.CurrentStage, run.FinalVersion = ro.State, ro.Reason, ro.CurrentStage, ro.FinalVersion
	run.LastStage = len(ro.Stages) - 1
	run.Stages, run.Reached = nil, 0
	var lastPassed time.Time
	since := func(t *time.Time) time.Duration {
		if t == nil || ro.CreatedAt.IsZero() {
			return -1
		}
		return max(0, t.Sub(ro.CreatedAt))
	}
	for _, s := range ro.Stages {
		sr := StageRun{Index: s.Index, What: stageWhat(s.Hosts, s.Percent, s.Selector), State: s.State,
			Targeted: s.Targeted, Applied: s.Applied, Failed: s.Failed, Pending: s.Pending, Offline: s.Offline, Unhealthy: s.Unhealthy,
			TopErrors: s.TopErrors, Started: since(s.StartedAt), Passed: since(s.PassedAt), SeenPassed: seenPassed[s.Index]}
		if sr.Started >= 0 && sr.Passed >= 0 {
			sr.Duration = sr.Passed - sr.Started
		}
		if s.PassedAt != nil && s.PassedAt.After(lastPassed) {
			lastPassed = *s.PassedAt
		}
		if s.State != "pending" {
			run.Reached += s.Targeted
		}
		run.Stages = append(run.Stages, sr)
	}
	end := ro.UpdatedAt
	if ro.State == configapi.RolloutCompleted && !lastPassed.IsZero() {
		end = lastPassed
	}
	if !ro.CreatedAt.IsZero() && !end.IsZero() {
		run.ServerElapsed = max(0, end.Sub(ro.CreatedAt))
	}
}

// abortRollout aborts a rollout that stopped short of completing and waits until every agent it had
// reached received the version that reverts it (the previous config written again as the
// environment's final_version; without one in the answer, any version newer than the rollout's).
func (r *Runner) abortRollout(ctx context.Context, ro configapi.Rollout, reached map[string]bool) (*AbortRun, error) {
	fleet0 := r.fleet.Stats()
	sent := time.Now()
	after, err := r.backend.API.RolloutAction(ctx, r.envID, RolloutConfigType, ro.ID, "abort")
	if err != nil {
		return nil, err
	}
	returned := time.Now()
	ab := &AbortRun{State: after.State, Latency: returned.Sub(sent), Reached: len(reached)}
	if after.Active() {
		if after, err = r.watchRollout(ctx, ro.ID, r.pollInterval(), func(ro configapi.Rollout) bool { return !ro.Active() }); err != nil {
			return ab, err
		}
		ab.State = after.State
	}
	target := ro.NewestVersion() + 1
	if after.FinalVersion > 0 {
		target = after.FinalVersion
	}
	ab.Version = after.FinalVersion
	doneAt, err := r.waitFor(ctx, "revert of the reached hosts", 50*time.Millisecond, func(context.Context) (bool, string, error) {
		ab.Reverted = 0
		for id, v := range r.fleet.ReceivedVersions(RolloutConfigType) {
			if reached[id] && v >= target {
				ab.Reverted++
			}
		}
		return ab.Reverted >= ab.Reached, fmt.Sprintf("%d/%d reached agents received the previous config again", ab.Reverted, ab.Reached), nil
	})
	if err != nil {
		return ab, err
	}
	ab.RevertedAfter = doneAt.Sub(returned)
	ab.Commands = r.fleet.Stats().Commands - fleet0.Commands
	r.logf("rollout-fail: aborted (%s, %s); the %d reached agents received the previous config again %s after the abort",
		ab.State, ab.Latency.Round(time.Millisecond), ab.Reached, ab.RevertedAfter.Round(time.Millisecond))
	return ab, nil
}
