package webui

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/applystatus"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/fault"
)

// scope is the level a config page addresses: an environment default or a host override.
type scope struct {
	name  string // protocol.ScopeEnvironment or protocol.ScopeHost
	path  string // route prefix, with its wildcard
	param string
}

var (
	scopeEnvironment = scope{name: protocol.ScopeEnvironment, path: "/environments/{envID}", param: "envID"}
	scopeHost        = scope{name: protocol.ScopeHost, path: "/hosts/{hostID}", param: "hostID"}
)

// target is the environment or host a config page is about, as the caller may see it.
type target struct {
	Scope      string
	ID         uuid.UUID
	Name       string // environment name or hostname
	EnvID      uuid.UUID
	ConfigType string
	Base       string // the page's URL
}

func (c *Console) target(r *http.Request, req *request, s scope) (target, error) {
	id, err := pathID(r, s.param)
	if err != nil {
		return target{}, err
	}
	configType := r.PathValue("configType")
	if !agentconfig.Known(configType) {
		return target{}, fault.NotFoundf("unknown config type %q", configType)
	}
	t := target{Scope: s.name, ID: id, ConfigType: configType}
	if s.name == protocol.ScopeHost {
		h, err := c.svc.Hosts.Get(r.Context(), req.p, id)
		if err != nil {
			return target{}, err
		}
		t.Name, t.EnvID = h.Hostname, h.EnvironmentID
		t.Base = Prefix + "/hosts/" + id.String() + "/configs/" + configType
	} else {
		env, err := c.svc.Tenants.Environment(r.Context(), req.p, id)
		if err != nil {
			return target{}, err
		}
		t.Name, t.EnvID = env.Name, env.ID
		t.Base = Prefix + "/environments/" + id.String() + "/configs/" + configType
	}
	return t, nil
}

func (t target) ref() configs.Ref {
	return configs.Ref{Scope: t.Scope, ID: t.ID, ConfigType: t.ConfigType}
}

// current is the stored config a page shows: the environment default, or the host's own override, and
// the version an If-Match must name (for a host, its effective version, as in the API).
type current struct {
	Exists  bool
	Data    json.RawMessage
	Version int64 // 0: nothing to match (no config at all)
}

func (c *Console) current(r *http.Request, req *request, t target) (current, error) {
	if t.Scope == protocol.ScopeEnvironment {
		rec, err := c.svc.Configs.EnvironmentConfig(r.Context(), req.p, t.ID, t.ConfigType)
		if fault.Is(err, fault.NotFound) {
			return current{}, nil
		}
		if err != nil {
			return current{}, err
		}
		return current{Exists: true, Data: rec.Data, Version: rec.Version}, nil
	}
	var cur current
	revs, err := c.svc.Configs.Revisions(r.Context(), req.p, t.ref(), 1)
	if err != nil {
		return current{}, err
	}
	if len(revs) > 0 && revs[0].NewData != nil {
		cur.Exists, cur.Data = true, revs[0].NewData
	}
	ec, err := c.svc.Configs.Effective(r.Context(), req.p, t.ID, t.ConfigType, false)
	switch {
	case err == nil:
		cur.Version = ec.Version
	case !fault.Is(err, fault.NotFound):
		return current{}, err
	}
	return cur, nil
}

type editorData struct {
	T        target
	Types    []string
	Text     string
	Version  string // the version loaded, sent back as If-Match ("" when there was no config)
	Exists   bool
	Reviewed string // digest of the text the last dry run showed
	Error    string
	DryRun   *dryRunView
	Conflict *conflictView
	Saved    string
	// Rollout is the active staged rollout of this environment config (its writes are refused while
	// it runs); Plan the editor's staged-rollout plan fields.
	Rollout *rolloutLink
	Plan    planForm
	// Active are the environment's active rollouts by config type (the type list links them).
	Active map[string]*rolloutLink
}

type dryRunView struct {
	Total int
	Hosts []dryRunHostView
}

type dryRunHostView struct {
	HostID   uuid.UUID
	Hostname string
	Source   string
	Changed  bool
	Diff     []diffLine
}

type conflictView struct {
	Version int64
	Exists  bool
	Diff    []diffLine // theirs (stored now) -> yours
}

func (c *Console) editorFor(r *http.Request, req *request, t target) (editorData, error) {
	cur, err := c.current(r, req, t)
	if err != nil {
		return editorData{}, err
	}
	d := editorData{T: t, Types: agentconfig.TypeNames(), Exists: cur.Exists, Text: prettyJSON(cur.Data)}
	if t.Scope == protocol.ScopeEnvironment {
		active, err := c.activeRollouts(r, req, t.ID)
		if err != nil {
			return editorData{}, err
		}
		d.Active = active[t.ID]
		d.Rollout = d.Active[t.ConfigType]
	}
	if cur.Version > 0 {
		d.Version = strconv.FormatInt(cur.Version, 10)
	}
	return d, nil
}

// onTarget is a config page of scope s: fn runs for the environment or host the request addresses, as
// the caller may see it (another client's is a 404).
func (c *Console) onTarget(s scope, fn func(w http.ResponseWriter, r *http.Request, req *request, t target) error) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, req *request) error {
		t, err := c.target(r, req, s)
		if err != nil {
			return err
		}
		return fn(w, r, req, t)
	}
}

// onEditorPost is an editor form post of scope s: fn runs with the posted form read.
func (c *Console) onEditorPost(s scope, fn func(w http.ResponseWriter, r *http.Request, req *request, d editorData) error) handlerFunc {
	return c.onTarget(s, func(w http.ResponseWriter, r *http.Request, req *request, t target) error {
		d, err := c.posted(r, t)
		if err != nil {
			return err
		}
		return fn(w, r, req, d)
	})
}

func (c *Console) editor(s scope) handlerFunc {
	return c.onTarget(s, func(w http.ResponseWriter, r *http.Request, req *request, t target) error {
		d, err := c.editorFor(r, req, t)
		if err != nil {
			return err
		}
		c.render(w, http.StatusOK, "editor", req, t.ConfigType+" of "+t.Name, d)
		return nil
	})
}

// posted reads the editor form: the text, the version it was loaded at and the reviewed digest.
func (c *Console) posted(r *http.Request, t target) (editorData, error) {
	if err := parseForm(r); err != nil {
		return editorData{}, err
	}
	d := editorData{T: t, Types: agentconfig.TypeNames(), Text: r.PostForm.Get("config_data"), Version: r.PostForm.Get("version"),
		Reviewed: r.PostForm.Get("reviewed"), Exists: r.PostForm.Get("exists") == "true",
		Plan: planForm{Stages: r.PostForm.Get("stages"), BakeSeconds: r.PostForm.Get("bake_seconds"), AutoRevert: r.PostForm.Get("auto_revert") == "yes"}}
	if d.Version != "" {
		if _, err := strconv.ParseInt(d.Version, 10, 64); err != nil {
			return editorData{}, fault.Invalidf("version must be a config version")
		}
	}
	return d, nil
}

// precondition is the If-Match of a write from the editor: the version it was loaded at.
func (d editorData) precondition() configs.Precondition {
	if d.Version == "" {
		return configs.Precondition{}
	}
	v, _ := strconv.ParseInt(d.Version, 10, 64)
	return configs.Precondition{Versions: []int64{v}}
}

// digest names a text that went through a dry run, so that saving requires a dry run of that text.
func digest(text string) string {
	sum := sha256.Sum256([]byte(text))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// document parses the editor's text as one JSON document, naming the line and column of a syntax error.
// reviewed is the document of the editor's text when a dry run of exactly that text was shown first:
// the diff per host is shown before anything is done (saved, rolled out).
func reviewed(d editorData, done string) (json.RawMessage, error) {
	if d.Reviewed == "" || d.Reviewed != digest(d.Text) {
		return nil, fault.Invalidf("run a dry run of this text first: the diff per host is shown before anything is %s", done)
	}
	return document(d.Text)
}

func document(text string) (json.RawMessage, error) {
	if strings.TrimSpace(text) == "" {
		return nil, fault.Invalidf("config_data is required")
	}
	var raw json.RawMessage
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			line, col := position(text, int(syn.Offset))
			return nil, fault.Invalidf("config_data is not valid JSON: line %d, column %d: %s", line, col, syn.Error())
		}
		return nil, fault.Invalidf("config_data is not valid JSON")
	}
	return raw, nil
}

func position(text string, offset int) (line, col int) {
	line, col = 1, 1
	for i, r := range text {
		if i >= offset-1 {
			break
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// renderEditor answers an editor form post: the editor fragment for htmx, the page otherwise.
func (c *Console) renderEditor(w http.ResponseWriter, req *request, status int, d editorData) {
	c.renderPart(w, req, status, "editor", "editor-form", d.T.ConfigType+" of "+d.T.Name, d)
}

// invalid shows a 400-class failure inside the editor, keeping the operator's text.
func (c *Console) invalid(w http.ResponseWriter, req *request, d editorData, err error) error {
	if fault.Is(err, fault.Invalid) {
		d.Error = message(err)
		d.Reviewed = ""
		c.renderEditor(w, req, http.StatusBadRequest, d)
		return nil
	}
	return err
}

func (c *Console) dryRun(s scope) handlerFunc {
	return c.onEditorPost(s, func(w http.ResponseWriter, r *http.Request, req *request, d editorData) error {
		data, err := document(d.Text)
		if err != nil {
			return c.invalid(w, req, d, err)
		}
		out, err := c.svc.Configs.DryRunPut(r.Context(), req.p, d.T.ref(), data)
		if err != nil {
			return c.invalid(w, req, d, err)
		}
		view := &dryRunView{Total: out.TotalHosts}
		for _, h := range out.Hosts {
			diff := diffLines(prettyJSON(h.Before), prettyJSON(h.ConfigData))
			view.Hosts = append(view.Hosts, dryRunHostView{HostID: h.HostID, Hostname: h.Hostname, Source: h.Source, Changed: changed(diff), Diff: diff})
		}
		d.DryRun, d.Reviewed = view, digest(d.Text)
		c.renderEditor(w, req, http.StatusOK, d)
		return nil
	})
}

func (c *Console) save(s scope) handlerFunc {
	return c.onEditorPost(s, func(w http.ResponseWriter, r *http.Request, req *request, d editorData) error {
		data, err := reviewed(d, "saved")
		if err != nil {
			return c.invalid(w, req, d, err)
		}
		rec, err := c.svc.Configs.Put(r.Context(), req.p, d.T.ref(), data, d.precondition())
		return c.written(w, r, req, d, err, func() string { return fmt.Sprintf("Saved as version %d.", rec.Version) })
	})
}

func (c *Console) deleteConfig(s scope) handlerFunc {
	return c.onEditorPost(s, func(w http.ResponseWriter, r *http.Request, req *request, d editorData) error {
		if r.PostForm.Get("confirm") != "yes" {
			return c.invalid(w, req, d, fault.Invalidf("tick the confirmation box to delete this config"))
		}
		rec, err := c.svc.Configs.Delete(r.Context(), req.p, d.T.ref(), d.precondition())
		if fault.Is(err, fault.NotFound) {
			// Nothing to delete is a mistake in the form, shown in the editor.
			err = fault.Invalidf("%s", message(err))
		}
		return c.written(w, r, req, d, err, func() string { return fmt.Sprintf("Deleted (version %d).", rec.Version) })
	})
}

// written answers a save or delete from the editor: a lost update shows the conflict, another refusal
// the error in the editor (keeping the text), success the editor reloaded with done's message.
func (c *Console) written(w http.ResponseWriter, r *http.Request, req *request, d editorData, err error, done func() string) error {
	if err != nil {
		return c.refused(w, r, req, d, err)
	}
	fresh, err := c.editorFor(r, req, d.T)
	if err != nil {
		return err
	}
	fresh.Saved = done()
	c.renderEditor(w, req, http.StatusOK, fresh)
	return nil
}

// conflict shows a lost update: what is stored now against the operator's text, which is kept but not
// saved. The operator reloads to build on the newer version.
func (c *Console) conflict(w http.ResponseWriter, r *http.Request, req *request, d editorData, cause error) error {
	cur, err := c.current(r, req, d.T)
	if err != nil {
		return err
	}
	d.Error = message(cause) + ". Someone else changed this config since you loaded it; nothing was saved. " +
		"Review their version below, then reload the editor to edit it."
	d.Conflict = &conflictView{Version: cur.Version, Exists: cur.Exists, Diff: diffLines(prettyJSON(cur.Data), d.Text)}
	d.Reviewed = ""
	c.renderEditor(w, req, http.StatusPreconditionFailed, d)
	return nil
}

type revisionsData struct {
	T         target
	Revisions []configs.Revision
	A, B      *configs.Revision
	Diff      []diffLine
	Version   string // current version, the rollback's If-Match
	Error     string
	Done      string
	Rollout   *rolloutLink // the active rollout that refused a rollback (409)
}

func (c *Console) revisionsFor(r *http.Request, req *request, t target, a, b int64) (revisionsData, error) {
	revs, err := c.svc.Configs.Revisions(r.Context(), req.p, t.ref(), 100)
	if err != nil {
		return revisionsData{}, err
	}
	cur, err := c.current(r, req, t)
	if err != nil {
		return revisionsData{}, err
	}
	d := revisionsData{T: t, Revisions: revs}
	if cur.Version > 0 {
		d.Version = strconv.FormatInt(cur.Version, 10)
	}
	find := func(v int64) *configs.Revision {
		for i := range revs {
			if revs[i].Version == v {
				return &revs[i]
			}
		}
		return nil
	}
	if a > 0 || b > 0 {
		d.A, d.B = find(a), find(b)
	} else if len(revs) > 0 {
		d.B = &revs[0]
		if len(revs) > 1 {
			d.A = &revs[1]
		}
	}
	if d.A != nil || d.B != nil {
		var before, after json.RawMessage
		if d.A != nil {
			before = d.A.NewData
		}
		if d.B != nil {
			after = d.B.NewData
		}
		d.Diff = diffLines(prettyJSON(before), prettyJSON(after))
	}
	return d, nil
}

func (c *Console) revisions(s scope) handlerFunc {
	return c.onTarget(s, func(w http.ResponseWriter, r *http.Request, req *request, t target) error {
		a, _ := strconv.ParseInt(r.URL.Query().Get("a"), 10, 64)
		b, _ := strconv.ParseInt(r.URL.Query().Get("b"), 10, 64)
		d, err := c.revisionsFor(r, req, t, a, b)
		if err != nil {
			return err
		}
		if v := r.URL.Query().Get("rolled_back"); v != "" {
			d.Done = "Rolled back: the config is now at version " + v + "."
		}
		c.render(w, http.StatusOK, "revisions", req, "History of "+t.ConfigType+" of "+t.Name, d)
		return nil
	})
}

func (c *Console) rollback(s scope) handlerFunc {
	return c.onTarget(s, func(w http.ResponseWriter, r *http.Request, req *request, t target) error {
		if err := parseForm(r); err != nil {
			return err
		}
		rev, err := strconv.ParseInt(r.PostForm.Get("revision"), 10, 64)
		if err != nil || rev <= 0 {
			return fault.Invalidf("revision must be a positive revision number")
		}
		cond := configs.Precondition{}
		if v := r.PostForm.Get("version"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fault.Invalidf("version must be a config version")
			}
			cond.Versions = []int64{n}
		}
		rec, err := c.svc.Configs.Rollback(r.Context(), req.p, t.ref(), rev, cond)
		if fault.Is(err, fault.PreconditionFailed) || fault.Is(err, fault.Invalid) || fault.Is(err, fault.Conflict) {
			d, lerr := c.revisionsFor(r, req, t, 0, 0)
			if lerr != nil {
				return lerr
			}
			d.Error = message(err)
			if fault.Is(err, fault.Conflict) {
				if d.Rollout, lerr = c.activeRollout(r, req, t); lerr != nil {
					return lerr
				}
			}
			if fault.Is(err, fault.PreconditionFailed) {
				d.Error += ". The config changed since this page was loaded; nothing was rolled back. The list below is current."
			}
			c.render(w, statusOf(err), "revisions", req, "History of "+t.ConfigType+" of "+t.Name, d)
			return nil
		}
		if err != nil {
			return err
		}
		http.Redirect(w, r, t.Base+"/revisions?rolled_back="+url.QueryEscape(strconv.FormatInt(rec.Version, 10)), http.StatusSeeOther)
		return nil
	})
}

type progressData struct {
	T        target
	Exists   bool
	Progress applystatus.Status
	Fragment string // the URL the page polls
}

// progressFor is the apply progress of the latest change at a scope, as the apply-status API answers
// it (package applystatus): an environment's current version over its target hosts, or a host's
// effective version on that host.
func (c *Console) progressFor(r *http.Request, req *request, s scope) (progressData, error) {
	t, err := c.target(r, req, s)
	if err != nil {
		return progressData{}, err
	}
	d := progressData{T: t, Fragment: Prefix + "/fragments/progress/" + t.ID.String() + "/" + t.ConfigType}
	if s.name == protocol.ScopeHost {
		d.Fragment = Prefix + "/fragments/progress/hosts/" + t.ID.String() + "/" + t.ConfigType
		d.Progress, err = c.svc.ApplyStatus.Host(r.Context(), req.p, t.ID, t.ConfigType)
	} else {
		d.Progress, err = c.svc.ApplyStatus.Environment(r.Context(), req.p, t.ID, t.ConfigType)
	}
	if fault.Is(err, fault.NotFound) {
		return d, nil
	}
	if err != nil {
		return progressData{}, err
	}
	d.Exists = true
	return d, nil
}

func (c *Console) progress(s scope) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, req *request) error {
		d, err := c.progressFor(r, req, s)
		if err != nil {
			return err
		}
		c.render(w, http.StatusOK, "progress", req, "Apply progress of "+d.T.ConfigType, d)
		return nil
	}
}

func (c *Console) progressFragment(s scope) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, req *request) error {
		d, err := c.progressFor(r, req, s)
		if err != nil {
			return err
		}
		c.execute(w, http.StatusOK, "progress", "progress-body", c.view(req, "", d))
		return nil
	}
}
