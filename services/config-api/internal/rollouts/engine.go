package rollouts

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/protocol/rollout"
	"github.com/configsync/configsync/services/config-api/internal/applystatus"
)

// Audit actions of rollout transitions.
const (
	ActionStarted      = "rollout_started"
	ActionStageStarted = "rollout_stage_started"
	ActionStagePassed  = "rollout_stage_passed"
	ActionHostsPlaced  = "rollout_hosts_placed"
	ActionPaused       = "rollout_paused"
	ActionResumed      = "rollout_resumed"
	ActionPromoted     = "rollout_promoted"
	ActionCompleted    = "rollout_completed"
	ActionReverted     = "rollout_reverted"
	ActionAborted      = "rollout_aborted"
	ActionGateFailed   = "rollout_gate_failed"
)

// ControllerActor is the actor of the controller's transitions in history and the audit log.
const ControllerActor = "rollout-controller"

// startStage starts stage i of r at now: a count stage chooses its members (online hosts first, in
// bucket order, among the hosts its selector matches that no earlier stage holds), every host the
// stages up to i hold and the rollout has not reached joins at the stage's version (stage 0: the
// rollout's version), and the stage's version is announced so those hosts are pushed.
func startStage(ctx context.Context, tx Tx, r *Rollout, i int, now time.Time, window time.Duration, actor string) error {
	fleet, err := tx.Fleet(ctx)
	if err != nil {
		return err
	}
	st := &r.Stages[i]
	if n := r.Plan.Stages[i].Hosts; n > 0 {
		st.Members = chooseMembers(r, i, n, fleet, now, window)
	}
	version := r.Version
	if i > 0 {
		if version, err = tx.NextVersion(ctx); err != nil {
			return err
		}
	}
	at := now.UTC()
	st.State, st.StartedAt, st.Version = StageBaking, &at, version
	r.CurrentStage, r.Promoted = i, false
	joined, err := placeable(r, fleet)
	if err != nil {
		return err
	}
	if err := tx.Join(ctx, version, joined); err != nil {
		return err
	}
	if err := tx.Announce(ctx, r, version, actor); err != nil {
		return err
	}
	return tx.Audit(ctx, r, actor, ActionStageStarted, map[string]any{"stage": i, "version": version, "hosts": len(joined)})
}

// chooseMembers picks the n hosts of count stage i: among the hosts not yet reached that stage i's
// selector matches and whose bucket no earlier percentage stage holds, online hosts first, then by
// bucket (stable for the rollout).
func chooseMembers(r *Rollout, i, n int, fleet []FleetHost, now time.Time, window time.Duration) []string {
	stages, err := r.Plan.placement(r.Stages)
	if err != nil {
		return nil
	}
	id := r.ID.String()
	type cand struct {
		id     string
		online bool
		bucket uint64
	}
	var cands []cand
	for _, h := range fleet {
		if h.Stage >= 0 || !stages[i].Selector.Matches(h.Labels) {
			continue
		}
		// A host an earlier stage holds is not a candidate.
		if s := rollout.StageOf(id, stages[:i], h.ID.String(), h.Labels); s >= 0 {
			continue
		}
		cands = append(cands, cand{h.ID.String(), protocol.Online(now, h.LastHeartbeatAt, window, h.HeartbeatInterval), rollout.Bucket(id, h.ID.String())})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		switch {
		case a.online != b.online:
			if a.online {
				return -1
			}
			return 1
		case a.bucket < b.bucket:
			return -1
		case a.bucket > b.bucket:
			return 1
		}
		return 0
	})
	out := make([]string, 0, n)
	for _, c := range cands[:min(n, len(cands))] {
		out = append(out, c.id)
	}
	return out
}

// placeable is the hosts of fleet the rollout has not reached that a started stage holds.
func placeable(r *Rollout, fleet []FleetHost) ([]Joined, error) {
	stages, err := r.Plan.placement(r.Stages)
	if err != nil {
		return nil, err
	}
	id := r.ID.String()
	var out []Joined
	for _, h := range fleet {
		if h.Stage >= 0 {
			continue
		}
		if s := rollout.StageOf(id, stages, h.ID.String(), h.Labels); s >= 0 && s <= r.CurrentStage {
			out = append(out, Joined{HostID: h.ID, Stage: s})
		}
	}
	return out, nil
}

// placeLate joins the hosts a started stage holds that the rollout has not reached yet (registered or
// relabelled since their stage started) at a new version, announced. It returns how many joined.
func placeLate(ctx context.Context, tx Tx, r *Rollout, actor string) (int, error) {
	fleet, err := tx.Fleet(ctx)
	if err != nil {
		return 0, err
	}
	joined, err := placeable(r, fleet)
	if err != nil || len(joined) == 0 {
		return 0, err
	}
	version, err := tx.NextVersion(ctx)
	if err != nil {
		return 0, err
	}
	if err := tx.Join(ctx, version, joined); err != nil {
		return 0, err
	}
	if err := tx.Announce(ctx, r, version, actor); err != nil {
		return 0, err
	}
	return len(joined), tx.Audit(ctx, r, actor, ActionHostsPlaced, map[string]any{"hosts": len(joined), "version": version})
}

// count tallies the members of each stage with applystatus.Tally: a member's target is its expected
// version by the one rule (its environment layer is the version it joined at, an override on top), so
// members are tallied per expected version and summed.
func count(r *Rollout, members []Member, now time.Time, window time.Duration) []Counts {
	out := make([]Counts, len(r.Stages))
	byStage := make([]map[int64][]applystatus.Host, len(r.Stages))
	for _, m := range members {
		if m.Stage < 0 || m.Stage >= len(r.Stages) {
			continue
		}
		if byStage[m.Stage] == nil {
			byStage[m.Stage] = map[int64][]applystatus.Host{}
		}
		v := m.Host.Expected().Version
		byStage[m.Stage][v] = append(byStage[m.Stage][v], m.Host)
		if a := m.Host.Ack; a != nil && a.Status == applystatus.Applied && a.Version >= v &&
			!protocol.Online(now, m.Host.LastHeartbeatAt, window, m.Host.HeartbeatInterval) {
			out[m.Stage].Unhealthy++
		}
	}
	for i, groups := range byStage {
		errs := map[string]int{}
		for v, hosts := range groups {
			st := applystatus.Tally(hosts, v, now, window, len(hosts))
			c := &out[i]
			c.Targeted += st.Targets
			c.Applied += st.Applied
			c.Failed += st.Failed
			c.Pending += st.Pending
			c.Offline += st.Offline
			for _, e := range st.TopErrors {
				errs[e.Error] += e.Hosts
			}
		}
		for text, n := range errs {
			out[i].TopErrors = append(out[i].TopErrors, applystatus.ErrorCount{Error: text, Hosts: n})
		}
		slices.SortFunc(out[i].TopErrors, func(a, b applystatus.ErrorCount) int {
			if a.Hosts != b.Hosts {
				return b.Hosts - a.Hosts
			}
			if a.Error < b.Error {
				return -1
			}
			if a.Error > b.Error {
				return 1
			}
			return 0
		})
		if len(out[i].TopErrors) > applystatus.TopErrors {
			out[i].TopErrors = out[i].TopErrors[:applystatus.TopErrors]
		}
	}
	return out
}

// Verdict is a gate's answer.
type Verdict int

// Verdicts.
const (
	// Wait: online targets are still pending below the applied ratio; look again later.
	Wait Verdict = iota
	Pass
	Fail
)

// Evaluate applies g to a stage's counts. Offline targets that never answered do not block it: the
// applied ratio is over the stage's online targets. Pending online targets are waited for as long as
// their acks could still fail the gate, so a stage never passes while the failed acks of its own push
// are in flight. A failure's reason names the limit broken.
func (g Gate) Evaluate(stage int, c Counts) (Verdict, string) {
	if reason := g.failedAcks(stage, c.Failed, c.Targeted); reason != "" {
		return Fail, reason
	}
	if c.Unhealthy > g.MaxUnhealthy {
		return Fail, fmt.Sprintf("gate failed at stage %d: %d hosts stopped heartbeating after applying > max_unhealthy %d", stage, c.Unhealthy, g.MaxUnhealthy)
	}
	online := c.Targeted - c.Offline
	if online <= 0 {
		return Pass, ""
	}
	ratio := float64(c.Applied) / float64(online)
	switch {
	case c.Pending > 0 && (ratio < g.MinAppliedRatio || g.failedAcks(stage, c.Failed+c.Pending, c.Targeted) != ""):
		// The pending acks could still break a limit on failed acks, were they all to fail (or reach
		// the ratio): a stage never passes before the answers that could fail it have landed.
		return Wait, ""
	case ratio >= g.MinAppliedRatio:
		return Pass, ""
	default:
		return Fail, fmt.Sprintf("gate failed at stage %d: %d of %d online targets applied < min_applied_ratio %g", stage, c.Applied, online, g.MinAppliedRatio)
	}
}

// failedAcks is the gate's rule on failed acks: the reason failed of targeted breaks a limit, or "".
func (g Gate) failedAcks(stage, failed, targeted int) string {
	switch {
	case failed > g.MaxFailed:
		return fmt.Sprintf("gate failed at stage %d: %d failed acks > max_failed %d", stage, failed, g.MaxFailed)
	case g.MaxFailedRatio > 0 && targeted > 0 && float64(failed)/float64(targeted) > g.MaxFailedRatio:
		return fmt.Sprintf("gate failed at stage %d: %d of %d targets failed > max_failed_ratio %g", stage, failed, targeted, g.MaxFailedRatio)
	}
	return ""
}

// revert ends r by putting the hosts it reached back on the previous revision (a new version for the
// whole environment, announced) — or, when it reached none, by leaving the environment row as it is.
func revert(ctx context.Context, tx Tx, r *Rollout, state, reason, actor string) error {
	members, err := tx.Members(ctx)
	if err != nil {
		return err
	}
	r.Reason = reason
	if len(members) == 0 && state == StateAborted {
		r.State = StateAborted
		if err := tx.Save(ctx, r); err != nil {
			return err
		}
		return tx.Audit(ctx, r, actor, ActionAborted, map[string]any{"reason": reason})
	}
	v, err := tx.Revert(ctx, r, actor)
	if err != nil {
		return err
	}
	r.State, r.FinalVersion = StateReverted, v
	if err := tx.Save(ctx, r); err != nil {
		return err
	}
	return tx.Audit(ctx, r, actor, ActionReverted, map[string]any{"reason": reason, "version": v})
}
