package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/rollouts"
)

// The rollout routes (ROLLOUT_API.md): start, list and read the staged rollouts of an environment's
// config type, and act on one.

type startRolloutRequest struct {
	ConfigData json.RawMessage `json:"config_data"`
	Plan       *rollouts.Plan  `json:"plan"`
}

type stageView struct {
	Index       int                   `json:"index"`
	Hosts       int                   `json:"hosts"`
	Percent     float64               `json:"percent"`
	Selector    string                `json:"selector"`
	BakeSeconds int                   `json:"bake_seconds"`
	State       string                `json:"state"`
	StartedAt   *time.Time            `json:"started_at"`
	PassedAt    *time.Time            `json:"passed_at"`
	Version     int64                 `json:"version"`
	Targeted    int                   `json:"targeted"`
	Applied     int                   `json:"applied"`
	Failed      int                   `json:"failed"`
	Pending     int                   `json:"pending"`
	Offline     int                   `json:"offline"`
	Unhealthy   int                   `json:"unhealthy"`
	TopErrors   []applyErrorCountView `json:"top_errors"`
}

type applyErrorCountView struct {
	Error string `json:"error"`
	Hosts int    `json:"hosts"`
}

type rolloutView struct {
	ID              string          `json:"id"`
	EnvironmentID   string          `json:"environment_id"`
	ConfigType      string          `json:"config_type"`
	State           string          `json:"state"`
	Reason          string          `json:"reason"`
	PreviousVersion int64           `json:"previous_version"`
	Version         int64           `json:"version"`
	FinalVersion    int64           `json:"final_version,omitempty"`
	CurrentStage    int             `json:"current_stage"`
	ConfigData      json.RawMessage `json:"config_data"`
	Plan            rollouts.Plan   `json:"plan"`
	Stages          []stageView     `json:"stages"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	CreatedBy       string          `json:"created_by"`
}

func viewRollout(v rollouts.View) rolloutView {
	out := rolloutView{
		ID: v.ID.String(), EnvironmentID: v.EnvironmentID.String(), ConfigType: v.ConfigType, State: v.State,
		Reason: v.Reason, PreviousVersion: v.PreviousVersion, Version: v.Version, FinalVersion: v.FinalVersion,
		CurrentStage: v.CurrentStage, ConfigData: v.ConfigData, Plan: v.Plan, CreatedAt: v.CreatedAt.UTC(),
		UpdatedAt: v.UpdatedAt.UTC(), CreatedBy: v.CreatedBy, Stages: make([]stageView, len(v.Stages)),
	}
	for i, st := range v.Stages {
		sp := v.Plan.Stages[i]
		bake := 0
		switch {
		case sp.BakeSeconds != nil:
			bake = *sp.BakeSeconds
		case v.Plan.BakeSeconds != nil:
			bake = *v.Plan.BakeSeconds
		}
		sv := stageView{Index: i, Hosts: sp.Hosts, Percent: sp.Percent, Selector: sp.Selector, BakeSeconds: bake,
			State: st.State, StartedAt: st.StartedAt, PassedAt: st.PassedAt, Version: st.Version, TopErrors: []applyErrorCountView{}}
		if i < len(v.Counts) {
			c := v.Counts[i]
			sv.Targeted, sv.Applied, sv.Failed, sv.Pending, sv.Offline, sv.Unhealthy = c.Targeted, c.Applied, c.Failed, c.Pending, c.Offline, c.Unhealthy
			for _, e := range c.TopErrors {
				sv.TopErrors = append(sv.TopErrors, applyErrorCountView{Error: e.Error, Hosts: e.Hosts})
			}
		}
		out.Stages[i] = sv
	}
	return out
}

func (a *API) startRollout() handlerFunc {
	return answer(ifMatched(withBody[startRolloutRequest](scopeEnvironment.ref)), func(ctx context.Context, p principal, in matched[idBody[configs.Ref, startRolloutRequest]]) (rollouts.View, error) {
		var plan rollouts.Plan
		if in.In.Req.Plan != nil {
			plan = *in.In.Req.Plan
		}
		return a.svc.Rollouts.Start(ctx, p, in.In.ID.ID, in.In.ID.ConfigType, in.In.Req.ConfigData, plan, in.Cond)
	}, http.StatusCreated, viewRollout)
}

func (a *API) listRollouts() handlerFunc {
	return answer(scopeEnvironment.withLimit, func(ctx context.Context, p principal, in refLimit) ([]rollouts.View, error) {
		return a.svc.Rollouts.List(ctx, p, in.ID, in.ConfigType, in.Limit)
	}, http.StatusOK, each(viewRollout))
}

// rolloutRef names one rollout: its environment's config type and its id.
type rolloutRef struct {
	configs.Ref
	RolloutID uuid.UUID
}

func readRolloutRef(w http.ResponseWriter, r *http.Request, p principal) (rolloutRef, error) {
	ref, err := scopeEnvironment.ref(w, r, p)
	if err != nil {
		return rolloutRef{}, err
	}
	id, err := pathID(r, "rolloutID")
	return rolloutRef{Ref: ref, RolloutID: id}, err
}

// rolloutRoute is the handler of the routes that read one rollout or act on it (Get, Pause, Resume,
// Promote, Abort): all take the rollout's ref and answer the rollout.
func rolloutRoute(call func(ctx context.Context, p principal, environmentID uuid.UUID, configType string, id uuid.UUID) (rollouts.View, error)) handlerFunc {
	return answer(readRolloutRef, func(ctx context.Context, p principal, in rolloutRef) (rollouts.View, error) {
		return call(ctx, p, in.ID, in.ConfigType, in.RolloutID)
	}, http.StatusOK, viewRollout)
}
