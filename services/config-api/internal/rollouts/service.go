package rollouts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// Environments finds an environment the caller can see (auditing cross-tenant attempts).
type Environments interface {
	Environment(ctx context.Context, p tenancy.Principal, id uuid.UUID) (tenants.Environment, error)
}

// DefaultListLimit and MaxListLimit bound a list of rollouts.
const (
	DefaultListLimit = 20
	MaxListLimit     = 500
)

// Service is the operators' rollout use cases: start, read, pause, resume, promote, abort.
type Service struct {
	repo         Repository
	environments Environments
	guard        *tenancy.Guard
	onlineWindow time.Duration
	now          func() time.Time
}

// NewService returns a Service; onlineWindow is config-api's online window (placement puts online hosts
// first in count stages; counts call offline hosts unreached).
func NewService(repo Repository, environments Environments, guard *tenancy.Guard, onlineWindow time.Duration) *Service {
	return &Service{repo: repo, environments: environments, guard: guard, onlineWindow: onlineWindow, now: time.Now}
}

// Start starts a rollout of data (validated exactly as a PUT of the environment config is) with plan.
// Its first stage starts at once. cond is the If-Match on the environment's row, as on a PUT.
func (s *Service) Start(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, configType string, data json.RawMessage, plan Plan, cond configs.Precondition) (View, error) {
	if err := configs.Validate(configType, data); err != nil {
		return View{}, err
	}
	plan, err := plan.Normalize()
	if err != nil {
		return View{}, err
	}
	now := s.now()
	r, err := s.repo.Create(ctx, p.Filter(), environmentID, configType, p.Name, func(env EnvironmentRow) (*Rollout, error) {
		if env.Active.Valid {
			return nil, configs.RolloutActive(env.Active.UUID)
		}
		var version int64
		live := env.Row.Live()
		if env.Row != nil {
			version = env.Row.Version
		}
		if err := cond.Check(version, live); err != nil {
			return nil, err
		}
		r := &Rollout{
			ClientID: env.ClientID, EnvironmentID: environmentID, ConfigType: configType, State: StateRunning,
			Plan: plan, ConfigData: data, CreatedBy: p.Name,
		}
		if live {
			r.PreviousVersion, r.PreviousData = env.Row.Version, env.Row.Data
		}
		for i := range plan.Stages {
			r.Stages = append(r.Stages, Stage{Index: i, State: StagePending})
		}
		return r, nil
	}, func(tx Tx, r *Rollout) error {
		if err := tx.Audit(ctx, r, p.Name, ActionStarted, map[string]any{"version": r.Version, "previous_version": r.PreviousVersion}); err != nil {
			return err
		}
		if err := startStage(ctx, tx, r, 0, now, s.onlineWindow, p.Name); err != nil {
			return err
		}
		return tx.Save(ctx, r)
	})
	if errors.Is(err, ErrNoEnvironment) {
		return View{}, s.guard.Missing(ctx, p, tenancy.KindEnvironment, environmentID)
	}
	if err != nil {
		return View{}, fmt.Errorf("rollouts: start: %w", err)
	}
	return s.view(ctx, r)
}

// Get returns a rollout with its per-stage counts.
func (s *Service) Get(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, configType string, id uuid.UUID) (View, error) {
	if err := s.authorize(ctx, p, environmentID, configType); err != nil {
		return View{}, err
	}
	r, err := s.repo.Get(ctx, p.Filter(), environmentID, configType, id)
	if err != nil {
		return View{}, s.missing(err, id)
	}
	return s.view(ctx, r)
}

// List returns the rollouts of an environment's type, newest first, with their per-stage counts.
func (s *Service) List(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, configType string, limit int) ([]View, error) {
	if err := s.authorize(ctx, p, environmentID, configType); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	rs, err := s.repo.List(ctx, environmentID, configType, limit)
	if err != nil {
		return nil, fmt.Errorf("rollouts: list: %w", err)
	}
	out := make([]View, 0, len(rs))
	for _, r := range rs {
		v, err := s.view(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// History lists the rollouts of an environment's type, newest first, without their per-stage counts
// (List counts each one's hosts): what a page listing them needs.
func (s *Service) History(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, configType string, limit int) ([]Rollout, error) {
	if err := s.authorize(ctx, p, environmentID, configType); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	rs, err := s.repo.List(ctx, environmentID, configType, min(limit, MaxListLimit))
	if err != nil {
		return nil, fmt.Errorf("rollouts: list: %w", err)
	}
	return rs, nil
}

// Active lists the running and paused rollouts of environments the caller can see (another client's
// are left out), without per-stage counts: what a page listing many environments links to.
func (s *Service) Active(ctx context.Context, p tenancy.Principal, environmentIDs []uuid.UUID) ([]Rollout, error) {
	if len(environmentIDs) == 0 {
		return nil, nil
	}
	rs, err := s.repo.ActiveIn(ctx, p.Filter(), environmentIDs)
	if err != nil {
		return nil, fmt.Errorf("rollouts: active: %w", err)
	}
	return rs, nil
}

// Pause stops a running rollout where it is (no stage advances, reached hosts keep the new revision).
func (s *Service) Pause(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, configType string, id uuid.UUID) (View, error) {
	return s.act(ctx, p, environmentID, configType, id, operatorAction(ctx, p, StateRunning, "pause", ActionPaused, func(r *Rollout) {
		r.State, r.Reason = StatePaused, "paused by "+p.Name
	}))
}

// Resume runs a paused rollout again; a stage whose gate failed is evaluated again (it fails again
// unless its hosts changed their answers).
func (s *Service) Resume(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, configType string, id uuid.UUID) (View, error) {
	return s.act(ctx, p, environmentID, configType, id, operatorAction(ctx, p, StatePaused, "resume", ActionResumed, func(r *Rollout) {
		r.State, r.Reason = StateRunning, ""
		if st := &r.Stages[r.CurrentStage]; st.State == StageFailed {
			st.State = StageBaking
		}
	}))
}

// Promote skips the rest of the current stage's bake time; its gate is still evaluated.
func (s *Service) Promote(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, configType string, id uuid.UUID) (View, error) {
	return s.act(ctx, p, environmentID, configType, id, operatorAction(ctx, p, StateRunning, "promote", ActionPromoted, func(r *Rollout) {
		r.Promoted = true
	}))
}

// operatorAction is the change of an operator's pause, resume or promote (verb): on a rollout in state
// from, apply changes it, and it is saved and audited as action with the current stage.
func operatorAction(ctx context.Context, p tenancy.Principal, from, verb, action string, apply func(*Rollout)) func(Tx, *Rollout) error {
	return func(tx Tx, r *Rollout) error {
		if r.State != from {
			return notRunning(r, verb)
		}
		apply(r)
		if err := tx.Save(ctx, r); err != nil {
			return err
		}
		return tx.Audit(ctx, r, p.Name, action, map[string]any{"stage": r.CurrentStage})
	}
}

// Abort ends a running or paused rollout: the hosts it reached get the previous revision back (a new
// version, pushed). A rollout that reached no host ends aborted without any write.
func (s *Service) Abort(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, configType string, id uuid.UUID) (View, error) {
	return s.act(ctx, p, environmentID, configType, id, func(tx Tx, r *Rollout) error {
		if !r.Active() {
			return notRunning(r, "abort")
		}
		return revert(ctx, tx, r, StateAborted, "aborted by "+p.Name, p.Name)
	})
}

func (s *Service) act(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, configType string, id uuid.UUID, fn func(Tx, *Rollout) error) (View, error) {
	if err := s.authorize(ctx, p, environmentID, configType); err != nil {
		return View{}, err
	}
	r, err := s.repo.Update(ctx, p.Filter(), environmentID, configType, id, fn)
	if err != nil {
		return View{}, s.missing(err, id)
	}
	return s.view(ctx, r)
}

func (s *Service) authorize(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, configType string) error {
	if err := configs.CheckType(configType); err != nil {
		return err
	}
	_, err := s.environments.Environment(ctx, p, environmentID)
	return err
}

func (s *Service) missing(err error, id uuid.UUID) error {
	if errors.Is(err, ErrNotFound) {
		return notFound(id)
	}
	return err
}

// view adds the per-stage counts to r.
func (s *Service) view(ctx context.Context, r Rollout) (View, error) {
	members, err := s.repo.Members(ctx, r)
	if err != nil {
		return View{}, fmt.Errorf("rollouts: members: %w", err)
	}
	return View{Rollout: r, Counts: shown(&r, count(&r, members, s.now(), s.onlineWindow))}, nil
}

// shown is what a rollout's stages show: live counts while it is active; once it has ended, each
// decided stage's counts as its gate saw them (Stage.Decided), live ones for the others.
func shown(r *Rollout, live []Counts) []Counts {
	if r.Active() {
		return live
	}
	for i, st := range r.Stages {
		if st.Decided != nil && i < len(live) {
			live[i] = *st.Decided
		}
	}
	return live
}
