// Package rollouts is staged rollouts (issue 18): an environment-level change of one config type that
// reaches the environment's hosts stage by stage (a count of hosts, or a cumulative percentage of the
// hosts an inventory-label selector picks), each stage gated, after its bake time, on the apply acks and
// heartbeats of its hosts. The gate advances the rollout, pauses it, or reverts the hosts it reached.
//
// Which hosts a stage holds is libs/protocol/rollout (StageOf); when a stage starts, the hosts it holds
// join the rollout at a version of their own, and from then on the database's one rule (rollout_layers,
// migration 00014) gives them the new revision as their environment layer: the resolver, anti-entropy,
// apply status and drift all read it. The rollout's state lives in its row, so a controller that dies
// mid-stage is replaced by any other replica's, which resumes where it was.
package rollouts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol/rollout"
	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/services/config-api/internal/applystatus"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/fault"
)

// Rollout states.
const (
	StateRunning   = "running"
	StatePaused    = "paused"
	StateCompleted = "completed"
	StateAborted   = "aborted"
	StateReverted  = "reverted"
)

// Stage states.
const (
	StagePending = "pending"
	StageBaking  = "baking"
	StagePassed  = "passed"
	StageFailed  = "failed"
)

// Defaults of a plan that leaves them out.
const (
	DefaultBakeSeconds     = 300
	DefaultMinAppliedRatio = 0.95
	// MaxBakeSeconds bounds a stage's bake time (a week).
	MaxBakeSeconds = 7 * 24 * 3600
)

// Gate is when a stage passes: at most MaxFailed failed acks and, when MaxFailedRatio > 0, at most
// that share of the stage's targets; at most MaxUnhealthy hosts that applied and then stopped
// heartbeating; and at least MinAppliedRatio of its online targets applied.
type Gate struct {
	MaxFailed       int     `json:"max_failed"`
	MaxFailedRatio  float64 `json:"max_failed_ratio"`
	MaxUnhealthy    int     `json:"max_unhealthy"`
	MinAppliedRatio float64 `json:"min_applied_ratio"`
}

// StagePlan is one stage as the operator gives it: Hosts (a count) or Percent (cumulative, of the
// hosts Selector matches), and optionally its own bake time.
type StagePlan struct {
	Hosts       int     `json:"hosts"`
	Percent     float64 `json:"percent"`
	Selector    string  `json:"selector"`
	BakeSeconds *int    `json:"bake_seconds,omitempty"`
}

// Plan is a rollout's stages, bake time, gate and whether a failed gate reverts. As stored and shown
// every default is filled in (Normalize).
type Plan struct {
	Stages      []StagePlan `json:"stages"`
	BakeSeconds *int        `json:"bake_seconds,omitempty"`
	Gate        *Gate       `json:"gate,omitempty"`
	AutoRevert  bool        `json:"auto_revert"`
}

// DefaultPlan is the plan of a rollout that names none: 1 host, 5%, 25%, 100%, 300 s bake, no failure
// allowed, 95% applied, no automatic revert.
func DefaultPlan() Plan {
	var p Plan
	for _, s := range rollout.DefaultStages() {
		p.Stages = append(p.Stages, StagePlan{Hosts: s.Hosts, Percent: s.Percent})
	}
	return p
}

// Normalize fills in p's defaults and checks it; errors are Invalid faults naming the field
// (plan.stages[2].percent).
func (p Plan) Normalize() (Plan, error) {
	if len(p.Stages) == 0 {
		p.Stages = DefaultPlan().Stages
	}
	if p.BakeSeconds == nil {
		b := DefaultBakeSeconds
		p.BakeSeconds = &b
	}
	if *p.BakeSeconds < 0 || *p.BakeSeconds > MaxBakeSeconds {
		return Plan{}, fault.Invalidf("plan.bake_seconds must be in [0, %d]", MaxBakeSeconds)
	}
	if p.Gate == nil {
		p.Gate = &Gate{MinAppliedRatio: DefaultMinAppliedRatio}
	}
	g := *p.Gate
	switch {
	case g.MaxFailed < 0:
		return Plan{}, fault.Invalidf("plan.gate.max_failed must not be negative")
	case g.MaxFailedRatio < 0 || g.MaxFailedRatio > 1:
		return Plan{}, fault.Invalidf("plan.gate.max_failed_ratio must be in [0, 1]")
	case g.MaxUnhealthy < 0:
		return Plan{}, fault.Invalidf("plan.gate.max_unhealthy must not be negative")
	case g.MinAppliedRatio < 0 || g.MinAppliedRatio > 1:
		return Plan{}, fault.Invalidf("plan.gate.min_applied_ratio must be in [0, 1]")
	}
	stages := make([]StagePlan, len(p.Stages))
	copy(stages, p.Stages)
	for i, s := range stages {
		if _, err := selector.Parse(s.Selector); err != nil {
			return Plan{}, fault.Invalidf("plan.stages[%d].selector: %v", i, err)
		}
		if s.BakeSeconds != nil && (*s.BakeSeconds < 0 || *s.BakeSeconds > MaxBakeSeconds) {
			return Plan{}, fault.Invalidf("plan.stages[%d].bake_seconds must be in [0, %d]", i, MaxBakeSeconds)
		}
		if s.Hosts == 0 && s.Percent == 0 {
			return Plan{}, fault.Invalidf("plan.stages[%d]: give hosts or percent", i)
		}
	}
	p.Stages = stages
	if _, err := p.placement(nil); err != nil {
		return Plan{}, err
	}
	return p, nil
}

// bake is how long stage i bakes.
func (p Plan) bake(i int) time.Duration {
	if b := p.Stages[i].BakeSeconds; b != nil {
		return time.Duration(*b) * time.Second
	}
	if p.BakeSeconds != nil {
		return time.Duration(*p.BakeSeconds) * time.Second
	}
	return DefaultBakeSeconds * time.Second
}

// placement is the plan's stages as the placement rule takes them, with the members of the count stages
// that have started.
func (p Plan) placement(stages []Stage) ([]rollout.Stage, error) {
	out := make([]rollout.Stage, len(p.Stages))
	for i, s := range p.Stages {
		sel, err := selector.Parse(s.Selector)
		if err != nil {
			return nil, fault.Invalidf("plan.stages[%d].selector: %v", i, err)
		}
		out[i] = rollout.Stage{Selector: sel, Percent: s.Percent, Hosts: s.Hosts}
		if i < len(stages) {
			out[i].Members = stages[i].Members
		}
	}
	if err := rollout.Validate(out); err != nil {
		return nil, fault.Invalidf("plan.%v", err)
	}
	return out, nil
}

// Stage is the state of one stage of a rollout.
type Stage struct {
	Index     int        `json:"index"`
	State     string     `json:"state"`
	StartedAt *time.Time `json:"started_at"`
	PassedAt  *time.Time `json:"passed_at"`
	// Version is the version the hosts it placed at its start joined at (0 before it starts).
	Version int64 `json:"version"`
	// Members are a count stage's hosts, chosen at its start.
	Members []string `json:"members,omitempty"`
	// Decided are the counts the gate passed or failed the stage on. Once the rollout has ended they
	// are what it shows: later acks (a revert's, or the next change's) would otherwise rewrite the
	// stage's history, say a canary that failed shown as applied once the revert it caused applied.
	Decided *Counts `json:"decided,omitempty"`
}

// Rollout is one staged rollout of an environment's config type.
type Rollout struct {
	ID              uuid.UUID
	ClientID        uuid.UUID
	EnvironmentID   uuid.UUID
	ConfigType      string
	State           string
	Reason          string
	Plan            Plan
	Stages          []Stage
	CurrentStage    int
	Promoted        bool
	ConfigData      json.RawMessage
	PreviousVersion int64
	PreviousData    json.RawMessage // nil: no live environment row when it started
	Version         int64
	FinalVersion    int64
	CreatedBy       string
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// Active reports whether the rollout still runs (running or paused).
func (r *Rollout) Active() bool { return r.State == StateRunning || r.State == StatePaused }

// Counts are how a stage's hosts stand, by applystatus.Tally (Targeted = Applied + Failed + Pending +
// Offline), plus Unhealthy: hosts that applied and have stopped heartbeating since.
type Counts struct {
	Targeted, Applied, Failed, Pending, Offline, Unhealthy int
	TopErrors                                              []applystatus.ErrorCount
}

// View is a rollout with its per-stage counts.
type View struct {
	Rollout
	Counts []Counts
}

// FleetHost is an active host of the rollout's environment as placement sees it.
type FleetHost struct {
	ID                uuid.UUID
	Labels            selector.Labels
	LastHeartbeatAt   *time.Time
	HeartbeatInterval time.Duration
	// Stage is the stage that holds it already, -1 when the rollout has not reached it.
	Stage int
}

// Joined is a host joining the rollout, placed in Stage.
type Joined struct {
	HostID uuid.UUID
	Stage  int
}

// Member is a host the rollout reached: its stage, and what a tally needs (its environment layer is
// the version it joined at).
type Member struct {
	Stage int
	Host  applystatus.Host
}

// EnvironmentRow is the environment's row of the type when a rollout is asked to start.
type EnvironmentRow struct {
	ClientID uuid.UUID
	Row      *configs.Record // nil: never written
	Active   uuid.NullUUID   // a running or paused rollout of the type
}

// Tx is what a rollout's transaction can do; the rollout's row is locked for its whole length.
type Tx interface {
	// Fleet lists the active hosts of the rollout's environment.
	Fleet(ctx context.Context) ([]FleetHost, error)
	// NextVersion takes a version from config_version_seq.
	NextVersion(ctx context.Context) (int64, error)
	// Join adds hosts to the rollout at version (a host already in it keeps its place).
	Join(ctx context.Context, version int64, hosts []Joined) error
	// Members lists the active hosts the rollout reached.
	Members(ctx context.Context) ([]Member, error)
	// Save stores the rollout's state, stages, current stage, promotion and final version.
	Save(ctx context.Context, r *Rollout) error
	// Complete makes the rollout's data the environment row at a new version and returns it.
	Complete(ctx context.Context, r *Rollout, actor string) (int64, error)
	// Revert writes the rollout's previous data (a tombstone when there was none) as the environment
	// row at a new version, recorded as a rollback and announced, and returns the version.
	Revert(ctx context.Context, r *Rollout, actor string) (int64, error)
	// Announce emits the config-changed event of the rollout's environment and type at version: the
	// hosts whose environment layer resolves to it are pushed.
	Announce(ctx context.Context, r *Rollout, version int64, actor string) error
	// Audit records a transition of the rollout.
	Audit(ctx context.Context, r *Rollout, actor, action string, detail map[string]any) error
}

// Repository stores rollouts. Reads of a rollout the filter hides fail with ErrNotFound.
type Repository interface {
	// Create locks the environment (restricted to filter) and reads its row of configType, calls fn,
	// and stores the rollout fn returns (a new version in r.Version, the revision of its data) before
	// calling start with the transaction, all in one transaction. ErrNoEnvironment when the
	// environment is not found; a second active rollout of the type fails with configs.RolloutActive.
	Create(ctx context.Context, filter uuid.NullUUID, environmentID uuid.UUID, configType, actor string,
		fn func(EnvironmentRow) (*Rollout, error), start func(Tx, *Rollout) error) (Rollout, error)
	// Update locks the rollout (restricted to filter, its environment and type) and runs fn in the
	// transaction.
	Update(ctx context.Context, filter uuid.NullUUID, environmentID uuid.UUID, configType string, id uuid.UUID, fn func(Tx, *Rollout) error) (Rollout, error)
	// Lead locks the rollout if it is active and no one else holds it (SKIP LOCKED) and runs fn in the
	// transaction; false when it was held or is no longer active.
	Lead(ctx context.Context, id uuid.UUID, fn func(Tx, *Rollout) error) (bool, error)
	// ActiveIDs lists the running and paused rollouts.
	ActiveIDs(ctx context.Context) ([]uuid.UUID, error)
	Get(ctx context.Context, filter uuid.NullUUID, environmentID uuid.UUID, configType string, id uuid.UUID) (Rollout, error)
	// List lists an environment type's rollouts, newest first.
	List(ctx context.Context, environmentID uuid.UUID, configType string, limit int) ([]Rollout, error)
	// ActiveIn lists the running and paused rollouts of the environments (restricted to filter), by
	// environment and type, without their per-stage counts.
	ActiveIn(ctx context.Context, filter uuid.NullUUID, environmentIDs []uuid.UUID) ([]Rollout, error)
	// Members lists the active hosts a rollout reached (no lock).
	Members(ctx context.Context, r Rollout) ([]Member, error)
}

// Errors of the repository, mapped by the service.
var (
	ErrNotFound      = errors.New("rollouts: not found")
	ErrNoEnvironment = errors.New("rollouts: environment not found")
)

// notRunning is the refusal of an action the rollout's state does not allow.
func notRunning(r *Rollout, action string) error {
	return &fault.Error{Kind: fault.Conflict, Code: "rollout_not_running",
		Message: fmt.Sprintf("rollout %s is %s: cannot %s", r.ID, r.State, action)}
}

func notFound(id uuid.UUID) error { return fault.NotFoundf("rollout %s not found", id) }
