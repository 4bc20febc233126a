package rollouts

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/configsync/configsync/services/config-api/internal/fault"
)

// Transition results, the label values of the controller's transitions counter.
const (
	ResultStageStarted = "stage_started"
	ResultCompleted    = "completed"
	ResultPaused       = "paused"
	ResultReverted     = "reverted"
	ResultPlaced       = "hosts_placed"
	ResultError        = "error"
)

// ControllerOptions tune a Controller.
type ControllerOptions struct {
	// Interval between ticks; 0 means a second.
	Interval time.Duration
	// OnlineWindow is config-api's online window.
	OnlineWindow time.Duration
	// Transitions, if set, counts each transition by result.
	Transitions func(result string)
}

// Controller advances rollouts: at each tick it leads every active rollout no other replica is
// leading (Repository.Lead, one transaction per rollout) and places hosts a started stage holds that
// joined since, then, once the current stage has baked (or was promoted), evaluates its gate:
// advance or complete when it passes, pause (or, with auto_revert, revert) when it fails. Every step
// is one transaction on the rollout's locked row, so a controller that dies mid-stage leaves the
// rollout exactly at its last committed step for the next leader.
type Controller struct {
	repo Repository
	opts ControllerOptions
	log  *zap.Logger
	now  func() time.Time
}

// NewController returns a Controller over repo.
func NewController(repo Repository, opts ControllerOptions, log *zap.Logger) *Controller {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Transitions == nil {
		opts.Transitions = func(string) {}
	}
	return &Controller{repo: repo, opts: opts, log: log, now: time.Now}
}

// Run ticks until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	for {
		c.Tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Tick leads each active rollout once. Failures are logged; the next tick tries again.
func (c *Controller) Tick(ctx context.Context) {
	ids, err := c.repo.ActiveIDs(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("rollout controller: list active rollouts failed", zap.Error(err))
		}
		return
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		var results []string
		_, err := c.repo.Lead(ctx, id, func(tx Tx, r *Rollout) error {
			var err error
			results, err = c.step(ctx, tx, r)
			return err
		})
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				c.log.Warn("rollout controller: step failed", zap.Stringer("rollout_id", id), zap.Error(err))
				c.opts.Transitions(ResultError)
			}
			continue
		}
		for _, res := range results {
			c.opts.Transitions(res)
		}
	}
}

// step is one tick of one running rollout, in its transaction; it returns the transitions made.
func (c *Controller) step(ctx context.Context, tx Tx, r *Rollout) ([]string, error) {
	if r.State != StateRunning {
		return nil, nil
	}
	var out []string
	now := c.now()
	placed, err := placeLate(ctx, tx, r, ControllerActor)
	if err != nil {
		return nil, err
	}
	if placed > 0 {
		out = append(out, ResultPlaced)
	}
	i := r.CurrentStage
	st := &r.Stages[i]
	if st.StartedAt == nil { // a stage always starts in the transaction that makes it current
		return out, fault.Conflictf("rollout %s: current stage %d never started", r.ID, i)
	}
	if !r.Promoted && now.Before(st.StartedAt.Add(r.Plan.bake(i))) {
		return out, nil
	}
	members, err := tx.Members(ctx)
	if err != nil {
		return nil, err
	}
	counts := count(r, members, now, c.opts.OnlineWindow)
	verdict, reason := r.Plan.Gate.Evaluate(i, counts[i])
	switch verdict {
	case Wait:
		return out, nil
	case Fail:
		decided := counts[i]
		st.State, st.Decided = StageFailed, &decided
		if err := tx.Audit(ctx, r, ControllerActor, ActionGateFailed, map[string]any{"stage": i, "reason": reason,
			"failed": counts[i].Failed, "unhealthy": counts[i].Unhealthy, "applied": counts[i].Applied, "targeted": counts[i].Targeted}); err != nil {
			return nil, err
		}
		if r.Plan.AutoRevert {
			if err := revert(ctx, tx, r, StateReverted, reason, ControllerActor); err != nil {
				return nil, err
			}
			c.log.Info("rollout reverted", zap.Stringer("rollout_id", r.ID), zap.Int("stage", i), zap.String("reason", reason))
			return append(out, ResultReverted), nil
		}
		r.State, r.Reason, r.Promoted = StatePaused, reason, false
		if err := tx.Save(ctx, r); err != nil {
			return nil, err
		}
		if err := tx.Audit(ctx, r, ControllerActor, ActionPaused, map[string]any{"stage": i, "reason": reason}); err != nil {
			return nil, err
		}
		c.log.Info("rollout paused by its gate", zap.Stringer("rollout_id", r.ID), zap.Int("stage", i), zap.String("reason", reason))
		return append(out, ResultPaused), nil
	}
	at := now.UTC()
	decided := counts[i]
	st.State, st.PassedAt, st.Decided = StagePassed, &at, &decided
	if err := tx.Audit(ctx, r, ControllerActor, ActionStagePassed, map[string]any{"stage": i,
		"applied": counts[i].Applied, "targeted": counts[i].Targeted, "offline": counts[i].Offline}); err != nil {
		return nil, err
	}
	if i == len(r.Stages)-1 {
		v, err := tx.Complete(ctx, r, ControllerActor)
		if err != nil {
			return nil, err
		}
		r.State, r.FinalVersion, r.Promoted = StateCompleted, v, false
		if err := tx.Save(ctx, r); err != nil {
			return nil, err
		}
		if err := tx.Audit(ctx, r, ControllerActor, ActionCompleted, map[string]any{"version": v}); err != nil {
			return nil, err
		}
		c.log.Info("rollout completed", zap.Stringer("rollout_id", r.ID), zap.Int64("version", v))
		return append(out, ResultCompleted), nil
	}
	if err := startStage(ctx, tx, r, i+1, now, c.opts.OnlineWindow, ControllerActor); err != nil {
		return nil, err
	}
	if err := tx.Save(ctx, r); err != nil {
		return nil, err
	}
	c.log.Info("rollout stage started", zap.Stringer("rollout_id", r.ID), zap.Int("stage", i+1))
	return append(out, ResultStageStarted), nil
}
