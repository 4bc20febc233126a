package webui

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/rollouts"
)

// Staged rollouts (issue 18) in the console: the list and detail pages of an environment config type's
// rollouts, the operator's actions on one, and starting one from the environment config editor. Every
// rule (plan defaults and checks, which state allows which action, one active rollout per type) is the
// rollouts service's; the console only shows what it answers.

// rolloutLink names an active rollout of a config type, for links and the 409 of a refused write.
type rolloutLink struct {
	ID         uuid.UUID
	EnvID      uuid.UUID
	ConfigType string
	State      string
	Stage      int // current stage index
	Stages     int
}

// URL is the rollout's detail page.
func (l rolloutLink) URL() string {
	return Prefix + "/environments/" + l.EnvID.String() + "/configs/" + l.ConfigType + "/rollouts/" + l.ID.String()
}

func linkOf(r rollouts.Rollout) rolloutLink {
	return rolloutLink{ID: r.ID, EnvID: r.EnvironmentID, ConfigType: r.ConfigType, State: r.State, Stage: r.CurrentStage, Stages: len(r.Stages)}
}

// activeRollouts lists the active rollouts of the environments, by environment id and config type.
func (c *Console) activeRollouts(r *http.Request, req *request, envIDs ...uuid.UUID) (map[uuid.UUID]map[string]*rolloutLink, error) {
	rs, err := c.svc.Rollouts.Active(r.Context(), req.p, envIDs)
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]map[string]*rolloutLink, len(rs))
	for _, ro := range rs {
		if out[ro.EnvironmentID] == nil {
			out[ro.EnvironmentID] = map[string]*rolloutLink{}
		}
		l := linkOf(ro)
		out[ro.EnvironmentID][ro.ConfigType] = &l
	}
	return out, nil
}

// activeRollout is the active rollout of the environment config a page addresses, nil when none.
func (c *Console) activeRollout(r *http.Request, req *request, t target) (*rolloutLink, error) {
	if t.Scope != protocol.ScopeEnvironment {
		return nil, nil
	}
	m, err := c.activeRollouts(r, req, t.ID)
	if err != nil {
		return nil, err
	}
	return m[t.ID][t.ConfigType], nil
}

type rolloutListData struct {
	T        target
	Rollouts []rolloutRow
}

type rolloutRow struct {
	rolloutLink
	Reason          string
	PreviousVersion int64
	Version         int64
	FinalVersion    int64
	CreatedBy       string
	CreatedAt       string
}

func (c *Console) rolloutList(w http.ResponseWriter, r *http.Request, req *request) error {
	t, err := c.target(r, req, scopeEnvironment)
	if err != nil {
		return err
	}
	rs, err := c.svc.Rollouts.History(r.Context(), req.p, t.ID, t.ConfigType, rollouts.DefaultListLimit)
	if err != nil {
		return err
	}
	d := rolloutListData{T: t}
	for _, v := range rs {
		d.Rollouts = append(d.Rollouts, rolloutRow{rolloutLink: linkOf(v), Reason: v.Reason, PreviousVersion: v.PreviousVersion,
			Version: v.Version, FinalVersion: v.FinalVersion, CreatedBy: v.CreatedBy, CreatedAt: formatTime(v.CreatedAt)})
	}
	c.render(w, http.StatusOK, "rollouts", req, "Rollouts of "+t.ConfigType+" in "+t.Name, d)
	return nil
}

type rolloutData struct {
	T        target
	R        rolloutRow
	Active   bool
	Stages   []stageRow
	Gate     rollouts.Gate
	Auto     bool
	Fragment string     // the URL the page polls while the rollout is active
	Diff     []diffLine // previous revision -> the rollout's data
	Error    string     // a refused action (409), shown on the page
	Done     string
	// Which actions the state allows (the service refuses the others with 409 anyway).
	CanPause, CanResume, CanPromote, CanAbort bool
}

type stageRow struct {
	Index       int
	Current     bool
	Hosts       int
	Percent     string
	Selector    string
	BakeSeconds int
	State       string
	StartedAt   string
	PassedAt    string
	Version     int64
	Counts      rollouts.Counts
}

func (c *Console) rolloutFor(r *http.Request, req *request) (rolloutData, error) {
	t, err := c.target(r, req, scopeEnvironment)
	if err != nil {
		return rolloutData{}, err
	}
	id, err := pathID(r, "rolloutID")
	if err != nil {
		return rolloutData{}, err
	}
	v, err := c.svc.Rollouts.Get(r.Context(), req.p, t.ID, t.ConfigType, id)
	if err != nil {
		return rolloutData{}, err
	}
	return rolloutDataOf(t, v), nil
}

func rolloutDataOf(t target, v rollouts.View) rolloutData {
	d := rolloutData{T: t, Active: v.Active(), Auto: v.Plan.AutoRevert,
		R: rolloutRow{rolloutLink: linkOf(v.Rollout), Reason: v.Reason, PreviousVersion: v.PreviousVersion, Version: v.Version,
			FinalVersion: v.FinalVersion, CreatedBy: v.CreatedBy, CreatedAt: formatTime(v.CreatedAt)},
		Fragment:  Prefix + "/fragments/rollouts/" + t.ID.String() + "/" + t.ConfigType + "/" + v.ID.String(),
		CanPause:  v.State == rollouts.StateRunning,
		CanResume: v.State == rollouts.StatePaused, CanPromote: v.State == rollouts.StateRunning, CanAbort: v.Active(),
	}
	if v.Plan.Gate != nil {
		d.Gate = *v.Plan.Gate
	}
	d.Diff = diffLines(prettyJSON(v.PreviousData), prettyJSON(v.ConfigData))
	for i, sp := range v.Plan.Stages {
		row := stageRow{Index: i, Current: d.Active && i == v.CurrentStage, Hosts: sp.Hosts, Selector: sp.Selector,
			State: rollouts.StagePending, StartedAt: "—", PassedAt: "—"}
		if sp.Percent > 0 {
			row.Percent = strconv.FormatFloat(sp.Percent, 'f', -1, 64)
		}
		switch {
		case sp.BakeSeconds != nil:
			row.BakeSeconds = *sp.BakeSeconds
		case v.Plan.BakeSeconds != nil:
			row.BakeSeconds = *v.Plan.BakeSeconds
		}
		if i < len(v.Stages) {
			st := v.Stages[i]
			row.State, row.Version = st.State, st.Version
			if st.StartedAt != nil {
				row.StartedAt = formatTime(st.StartedAt)
			}
			if st.PassedAt != nil {
				row.PassedAt = formatTime(st.PassedAt)
			}
		}
		if i < len(v.Counts) {
			row.Counts = v.Counts[i]
		}
		d.Stages = append(d.Stages, row)
	}
	return d
}

func (c *Console) rolloutDetail(w http.ResponseWriter, r *http.Request, req *request) error {
	d, err := c.rolloutFor(r, req)
	if err != nil {
		return err
	}
	if r.URL.Query().Get("done") != "" {
		d.Done = "Done: the rollout is " + d.R.State + "."
	}
	c.render(w, http.StatusOK, "rollout", req, "Rollout of "+d.T.ConfigType+" in "+d.T.Name, d)
	return nil
}

func (c *Console) rolloutFragment(w http.ResponseWriter, r *http.Request, req *request) error {
	d, err := c.rolloutFor(r, req)
	if err != nil {
		return err
	}
	c.execute(w, http.StatusOK, "rollout", "rollout-body", c.view(req, "", d))
	return nil
}

// rolloutAct is an operator's action on a rollout: a redirect back to its page, or the page with the
// service's refusal (409 when the state does not allow it) as a message.
func (c *Console) rolloutAct(act func(r *http.Request, req *request, t target, id uuid.UUID) (rollouts.View, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, req *request) error {
		t, err := c.target(r, req, scopeEnvironment)
		if err != nil {
			return err
		}
		id, err := pathID(r, "rolloutID")
		if err != nil {
			return err
		}
		_, err = act(r, req, t, id)
		if fault.Is(err, fault.Conflict) {
			d, gerr := c.rolloutFor(r, req)
			if gerr != nil {
				return gerr
			}
			d.Error = message(err)
			c.renderPart(w, req, http.StatusConflict, "rollout", "rollout-body", "Rollout of "+t.ConfigType+" in "+t.Name, d)
			return nil
		}
		if err != nil {
			return err
		}
		seeOther(w, r, req, t.Base+"/rollouts/"+id.String()+"?done=1")
		return nil
	}
}

func (c *Console) rolloutPause(r *http.Request, req *request, t target, id uuid.UUID) (rollouts.View, error) {
	return c.svc.Rollouts.Pause(r.Context(), req.p, t.ID, t.ConfigType, id)
}

func (c *Console) rolloutResume(r *http.Request, req *request, t target, id uuid.UUID) (rollouts.View, error) {
	return c.svc.Rollouts.Resume(r.Context(), req.p, t.ID, t.ConfigType, id)
}

func (c *Console) rolloutPromote(r *http.Request, req *request, t target, id uuid.UUID) (rollouts.View, error) {
	return c.svc.Rollouts.Promote(r.Context(), req.p, t.ID, t.ConfigType, id)
}

func (c *Console) rolloutAbort(r *http.Request, req *request, t target, id uuid.UUID) (rollouts.View, error) {
	return c.svc.Rollouts.Abort(r.Context(), req.p, t.ID, t.ConfigType, id)
}

// planOf reads the editor's plan fields: stages as "1,5%,25%,100%" (a number is a count of hosts, a
// number with % a cumulative percentage), bake seconds and auto-revert. Empty fields keep the default
// plan's; the service fills in and checks the rest, naming the field it refuses.
func planOf(form url.Values) (rollouts.Plan, error) {
	var p rollouts.Plan
	if s := strings.TrimSpace(form.Get("stages")); s != "" {
		for i, part := range strings.Split(s, ",") {
			part = strings.TrimSpace(part)
			if pct, ok := strings.CutSuffix(part, "%"); ok {
				n, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
				if err != nil {
					return rollouts.Plan{}, fault.Invalidf("plan.stages[%d]: %q is not a percentage", i, part)
				}
				p.Stages = append(p.Stages, rollouts.StagePlan{Percent: n})
				continue
			}
			n, err := strconv.Atoi(part)
			if err != nil {
				return rollouts.Plan{}, fault.Invalidf("plan.stages[%d]: %q is neither a host count nor a percentage (like 5%%)", i, part)
			}
			p.Stages = append(p.Stages, rollouts.StagePlan{Hosts: n})
		}
	}
	if s := strings.TrimSpace(form.Get("bake_seconds")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return rollouts.Plan{}, fault.Invalidf("plan.bake_seconds must be a whole number of seconds")
		}
		p.BakeSeconds = &n
	}
	p.AutoRevert = form.Get("auto_revert") == "yes"
	return p, nil
}

// startRollout starts a staged rollout of the editor's text (dry-run first, like Save), with the
// editor's If-Match; the browser goes to the new rollout's page.
func (c *Console) startRollout(w http.ResponseWriter, r *http.Request, req *request) error {
	return c.onEditorPost(scopeEnvironment, func(w http.ResponseWriter, r *http.Request, req *request, d editorData) error {
		data, err := reviewed(d, "rolled out")
		if err != nil {
			return c.invalid(w, req, d, err)
		}
		plan, err := planOf(r.PostForm)
		if err != nil {
			return c.invalid(w, req, d, err)
		}
		v, err := c.svc.Rollouts.Start(r.Context(), req.p, d.T.ID, d.T.ConfigType, data, plan, d.precondition())
		if err != nil {
			return c.refused(w, r, req, d, err)
		}
		seeOther(w, r, req, linkOf(v.Rollout).URL())
		return nil
	})(w, r, req)
}

// refused shows a write the use case refused inside the editor, keeping the text: a lost update as the
// conflict, an active rollout (409) with a link to it, anything invalid at its path.
func (c *Console) refused(w http.ResponseWriter, r *http.Request, req *request, d editorData, err error) error {
	switch {
	case fault.Is(err, fault.PreconditionFailed):
		return c.conflict(w, r, req, d, err)
	case fault.Is(err, fault.Conflict):
		link, lerr := c.activeRollout(r, req, d.T)
		if lerr != nil {
			return lerr
		}
		d.Error, d.Rollout, d.Reviewed = message(err), link, ""
		c.renderEditor(w, req, http.StatusConflict, d)
		return nil
	}
	return c.invalid(w, req, d, err)
}

// planForm is the editor's staged-rollout plan fields, kept across a refused post.
type planForm struct {
	Stages      string
	BakeSeconds string
	AutoRevert  bool
}
