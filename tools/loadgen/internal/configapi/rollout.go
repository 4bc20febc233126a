package configapi

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Rollout states (the rollout REST contract): running and paused are active, the others final.
const (
	RolloutRunning   = "running"
	RolloutPaused    = "paused"
	RolloutCompleted = "completed"
	RolloutAborted   = "aborted"
	RolloutReverted  = "reverted"
)

// RolloutStagePlan is one stage of a plan: a host count or a cumulative percentage of the hosts
// matching Selector.
type RolloutStagePlan struct {
	Hosts    int     `json:"hosts,omitempty"`
	Percent  float64 `json:"percent,omitempty"`
	Selector string  `json:"selector,omitempty"`
	// BakeSeconds overrides the plan's for this stage when set.
	BakeSeconds *int64 `json:"bake_seconds,omitempty"`
}

// RolloutGate is what a stage's online hosts must satisfy before the next stage starts.
type RolloutGate struct {
	MaxFailed       int     `json:"max_failed"`
	MaxFailedRatio  float64 `json:"max_failed_ratio"`
	MaxUnhealthy    int     `json:"max_unhealthy"`
	MinAppliedRatio float64 `json:"min_applied_ratio"`
}

// RolloutPlan is a rollout's stages, bake time, gate and revert policy.
type RolloutPlan struct {
	Stages      []RolloutStagePlan `json:"stages"`
	BakeSeconds int64              `json:"bake_seconds"`
	Gate        RolloutGate        `json:"gate"`
	AutoRevert  bool               `json:"auto_revert"`
}

// RolloutStage is one stage of a rollout with its counts.
type RolloutStage struct {
	Index       int        `json:"index"`
	Hosts       int        `json:"hosts"`
	Percent     float64    `json:"percent"`
	Selector    string     `json:"selector"`
	BakeSeconds int64      `json:"bake_seconds"`
	State       string     `json:"state"`
	StartedAt   *time.Time `json:"started_at"`
	PassedAt    *time.Time `json:"passed_at"`
	// Version is the version the stage's hosts joined the rollout at (0 before it starts).
	Version   int64      `json:"version"`
	Targeted  int        `json:"targeted"`
	Applied   int        `json:"applied"`
	Failed    int        `json:"failed"`
	Pending   int        `json:"pending"`
	Offline   int        `json:"offline"`
	Unhealthy int        `json:"unhealthy"`
	TopErrors []TopError `json:"top_errors"`
}

// TopError is an error text and how many hosts reported it.
type TopError struct {
	Error string `json:"error"`
	Hosts int    `json:"hosts"`
}

// Rollout is a staged rollout of one environment config.
type Rollout struct {
	ID              string `json:"id"`
	EnvironmentID   string `json:"environment_id"`
	ConfigType      string `json:"config_type"`
	State           string `json:"state"`
	Reason          string `json:"reason"`
	PreviousVersion *int64 `json:"previous_version"`
	Version         int64  `json:"version"`
	// FinalVersion is the version the whole environment got when the rollout completed or reverted.
	FinalVersion int64          `json:"final_version"`
	CurrentStage int            `json:"current_stage"`
	Stages       []RolloutStage `json:"stages"`
	CreatedAt    time.Time      `json:"created_at"`
	UpdatedAt    time.Time      `json:"updated_at"`
}

// NewestVersion is the newest version the rollout has given hosts so far.
func (r Rollout) NewestVersion() int64 {
	v := max(r.Version, r.FinalVersion)
	for _, s := range r.Stages {
		v = max(v, s.Version)
	}
	return v
}

// Active reports whether the rollout is running or paused.
func (r Rollout) Active() bool { return r.State == RolloutRunning || r.State == RolloutPaused }

func rolloutsPath(environmentID, configType string) string {
	return "/api/v1/environments/" + url.PathEscape(environmentID) + "/agent-configs/" + url.PathEscape(configType) + "/rollouts"
}

// StartRollout starts a staged rollout of data as the environment's new config of configType (plan nil:
// the API's default plan).
func (c *Client) StartRollout(ctx context.Context, environmentID, configType string, data any, plan *RolloutPlan) (Rollout, error) {
	body := map[string]any{"config_data": data}
	if plan != nil {
		body["plan"] = plan
	}
	var out Rollout
	err := c.do(ctx, http.MethodPost, rolloutsPath(environmentID, configType), body, &out)
	return out, err
}

// GetRollout reads a rollout with its per-stage counts.
func (c *Client) GetRollout(ctx context.Context, environmentID, configType, id string) (Rollout, error) {
	var out Rollout
	err := c.do(ctx, http.MethodGet, rolloutsPath(environmentID, configType)+"/"+url.PathEscape(id), nil, &out)
	return out, err
}

// RolloutAction posts pause, resume, promote or abort and returns the rollout answered.
func (c *Client) RolloutAction(ctx context.Context, environmentID, configType, id, action string) (Rollout, error) {
	var out Rollout
	err := c.do(ctx, http.MethodPost, rolloutsPath(environmentID, configType)+"/"+url.PathEscape(id)+"/"+action, nil, &out)
	return out, err
}
