package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/gorilla/mux"

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

func (a *API) startRollout(w http.ResponseWriter, r *http.Request, p principal) error {
	ref, err := scopeEnvironment.ref(r)
	if err != nil {
		return err
	}
	var req startRolloutRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	cond, err := ifMatch(r)
	if err != nil {
		return err
	}
	var plan rollouts.Plan
	if req.Plan != nil {
		plan = *req.Plan
	}
	v, err := a.svc.Rollouts.Start(r.Context(), p, ref.ID, ref.ConfigType, req.ConfigData, plan, cond)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusCreated, viewRollout(v))
}

func (a *API) listRollouts(w http.ResponseWriter, r *http.Request, p principal) error {
	ref, err := scopeEnvironment.ref(r)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit")
	if err != nil {
		return err
	}
	vs, err := a.svc.Rollouts.List(r.Context(), p, ref.ID, ref.ConfigType, limit)
	if err != nil {
		return err
	}
	out := make([]rolloutView, len(vs))
	for i, v := range vs {
		out[i] = viewRollout(v)
	}
	return writeData(w, http.StatusOK, out)
}

func (a *API) getRollout(w http.ResponseWriter, r *http.Request, p principal) error {
	ref, err := scopeEnvironment.ref(r)
	if err != nil {
		return err
	}
	id, err := pathID(r, "rolloutID")
	if err != nil {
		return err
	}
	v, err := a.svc.Rollouts.Get(r.Context(), p, ref.ID, ref.ConfigType, id)
	if err != nil {
		return err
	}
	return writeData(w, http.StatusOK, viewRollout(v))
}

// rolloutAction is the handler of one action route (pause, resume, promote, abort).
func (a *API) rolloutAction(action string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p principal) error {
		ref, err := scopeEnvironment.ref(r)
		if err != nil {
			return err
		}
		id, err := pathID(r, "rolloutID")
		if err != nil {
			return err
		}
		svc := a.svc.Rollouts
		do := map[string]func() (rollouts.View, error){
			"pause":   func() (rollouts.View, error) { return svc.Pause(r.Context(), p, ref.ID, ref.ConfigType, id) },
			"resume":  func() (rollouts.View, error) { return svc.Resume(r.Context(), p, ref.ID, ref.ConfigType, id) },
			"promote": func() (rollouts.View, error) { return svc.Promote(r.Context(), p, ref.ID, ref.ConfigType, id) },
			"abort":   func() (rollouts.View, error) { return svc.Abort(r.Context(), p, ref.ID, ref.ConfigType, id) },
		}[action]
		if do == nil || mux.Vars(r)["configType"] == "" {
			return errRouteNotFound
		}
		v, err := do()
		if err != nil {
			return err
		}
		return writeData(w, http.StatusOK, viewRollout(v))
	}
}
