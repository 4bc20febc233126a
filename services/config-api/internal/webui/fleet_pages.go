package webui

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/services/config-api/internal/drift"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/fleet"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// envRef is an environment with its client, for selectors and headings.
type envRef struct {
	ID         uuid.UUID
	Name       string
	ClientID   uuid.UUID
	ClientName string
}

// environments lists every environment the caller can see, by client.
func (c *Console) environments(r *http.Request, req *request) ([]envRef, error) {
	envs, err := c.svc.Fleet.Environments(r.Context(), req.p)
	if err != nil {
		return nil, err
	}
	out := make([]envRef, len(envs))
	for i, e := range envs {
		out[i] = envRef{ID: e.ID, Name: e.Name, ClientID: e.ClientID, ClientName: e.ClientName}
	}
	return out, nil
}

type overviewData struct {
	Environments []envOverview
	OnlineWindow string
	Types        []string
}

type envOverview struct {
	Env     envRef
	Summary fleet.Summary
	// Rollouts are the environment's active staged rollouts by config type.
	Rollouts map[string]*rolloutLink
}

func (c *Console) overviewData(r *http.Request, req *request) (overviewData, error) {
	sums, err := c.svc.Fleet.Overview(r.Context(), req.p)
	if err != nil {
		return overviewData{}, err
	}
	ids := make([]uuid.UUID, len(sums))
	for i, s := range sums {
		ids[i] = s.Environment.ID
	}
	active, err := c.activeRollouts(r, req, ids...)
	if err != nil {
		return overviewData{}, err
	}
	out := overviewData{OnlineWindow: c.svc.Fleet.OnlineWindow().String(), Types: agentconfig.TypeNames()}
	for _, s := range sums {
		e := s.Environment
		out.Environments = append(out.Environments, envOverview{Env: envRef{ID: e.ID, Name: e.Name, ClientID: e.ClientID, ClientName: s.ClientName},
			Summary: s, Rollouts: active[e.ID]})
	}
	return out, nil
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, req *request) error {
	data, err := c.overviewData(r, req)
	if err != nil {
		return err
	}
	c.render(w, http.StatusOK, "overview", req, "Fleet overview", data)
	return nil
}

// overviewFragment is one environment's summary, which the overview polls.
func (c *Console) overviewFragment(w http.ResponseWriter, r *http.Request, req *request) error {
	envID, err := pathID(r, "envID")
	if err != nil {
		return err
	}
	s, err := c.svc.Fleet.Summary(r.Context(), req.p, envID)
	if err != nil {
		return err
	}
	env := envRef{ID: s.Environment.ID, Name: s.Environment.Name, ClientID: s.Environment.ClientID}
	c.execute(w, http.StatusOK, "overview", "env-summary", c.view(req, "", envOverview{Env: env, Summary: s}))
	return nil
}

type hostListData struct {
	Environments []envRef
	Env          *envRef
	States       []string
	State        string
	Hostname     string
	Selector     string // inventory label selector, as the API's ?selector=
	// DriftAt is when the drifted filter's rows were computed (status=drifted; nil: not yet).
	DriftAt  *time.Time
	Rows     []hostRow
	Types    []string
	NextURL  string
	FirstURL string
}

type hostRow struct {
	Host   hosts.Host
	Online bool
	// Agreement: the drift report's verdict on this host now: "in sync", "drifted", "pending" (acked
	// the expected versions, not reported in a heartbeat yet) or "" (revoked or not checked).
	Agreement string
	Reasons   []string
	Status    []typeStatus
}

type typeStatus struct {
	Type    string
	Version int64
	Status  string // applied, failed or "" (no ack)
	Error   string
}

func (c *Console) hostList(w http.ResponseWriter, r *http.Request, req *request) error {
	envs, err := c.environments(r, req)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	data := hostListData{Environments: envs, States: fleet.States, State: q.Get("status"), Hostname: q.Get("hostname"),
		Selector: strings.TrimSpace(q.Get("selector")), Types: agentconfig.TypeNames()}
	envParam := q.Get("env")
	switch {
	case envParam != "":
		id, err := uuid.Parse(envParam)
		if err != nil {
			return fault.Invalidf("env must be an environment id")
		}
		env, err := c.svc.Tenants.Environment(r.Context(), req.p, id)
		if err != nil {
			return err
		}
		data.Env = &envRef{ID: env.ID, Name: env.Name, ClientID: env.ClientID}
	case len(envs) > 0:
		data.Env = &envs[0]
	}
	if data.Env == nil {
		c.render(w, http.StatusOK, "hosts", req, "Hosts", data)
		return nil
	}
	sel, err := selector.Parse(data.Selector)
	if err != nil {
		return fault.Invalidf("label selector: %v", err)
	}
	search := fleet.Search{Hostname: data.Hostname, State: data.State, Labels: sel}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 {
		search.Limit = n
	}
	if a := q.Get("after_id"); a != "" {
		id, err := uuid.Parse(a)
		if err != nil {
			return fault.Invalidf("after_id must be a host id")
		}
		search.AfterID, search.AfterHostname = uuid.NullUUID{UUID: id, Valid: true}, q.Get("after")
	}
	page, err := c.svc.Fleet.Search(r.Context(), req.p, data.Env.ID, search)
	if err != nil {
		return err
	}
	checked, err := c.svc.Drift.Hosts(r.Context(), req.p, data.Env.ID, page.Hosts)
	if err != nil {
		return err
	}
	if data.State == fleet.StateDrifted {
		if data.DriftAt, err = c.svc.Fleet.DriftComputedAt(r.Context(), req.p, data.Env.ID); err != nil {
			return err
		}
	}
	for _, h := range page.Hosts {
		row := hostRow{Host: h, Online: c.svc.Hosts.Online(h), Status: statusList(h)}
		if d, ok := checked[h.ID]; ok {
			row.Agreement, row.Reasons = agreement(d), d.Reasons
		}
		data.Rows = append(data.Rows, row)
	}
	base := url.Values{"env": {data.Env.ID.String()}}
	for k, v := range map[string]string{"status": data.State, "hostname": data.Hostname, "selector": sel.String()} {
		if v != "" {
			base.Set(k, v)
		}
	}
	if search.Limit > 0 {
		base.Set("limit", strconv.Itoa(search.Limit))
	}
	data.FirstURL = Prefix + "/hosts?" + base.Encode()
	if page.Next != nil {
		base.Set("after", page.Next.Hostname)
		base.Set("after_id", page.Next.ID.String())
		data.NextURL = Prefix + "/hosts?" + base.Encode()
	}
	c.render(w, http.StatusOK, "hosts", req, "Hosts", data)
	return nil
}

// agreement is the drift report's verdict on one host, as the API's drift report would file it: among
// its drifted hosts, its pending ones, or neither.
func agreement(d drift.Host) string {
	switch {
	case len(d.Reasons) > 0:
		return "drifted"
	case len(d.PendingTypes) > 0:
		return "pending"
	}
	return "in sync"
}

// statusList is a host's apply status per registered type, in registry order.
func statusList(h hosts.Host) []typeStatus {
	out := make([]typeStatus, 0, len(h.ApplyStatus))
	for _, t := range agentconfig.TypeNames() {
		if st, ok := h.ApplyStatus[t]; ok {
			out = append(out, typeStatus{Type: t, Version: st.Version, Status: st.Status, Error: st.Error})
		}
	}
	return out
}

type hostDetailData struct {
	Host        hosts.Host
	Env         tenants.Environment
	Online      bool
	Drift       *drift.Host
	Configs     []hostConfig
	Unset       []string // types with no effective config
	CredsNotice string
}

type hostConfig struct {
	Type        string
	Version     int64
	EnvVersion  int64
	HostVersion int64
	Source      string
	Data        string // pretty JSON, secrets as [REDACTED]
	Provenance  []agentconfig.ProvenanceEntry
	Removed     []agentconfig.ProvenanceEntry
	Credentials []credRef
	Apply       *hosts.ApplyStatus
	Reported    *int64
	Notice      string
}

type credRef struct {
	ID, Name string
	Fields   []string
	Missing  bool
}

func (c *Console) hostDetail(w http.ResponseWriter, r *http.Request, req *request) error {
	id, err := pathID(r, "hostID")
	if err != nil {
		return err
	}
	h, err := c.svc.Hosts.Get(r.Context(), req.p, id)
	if err != nil {
		return err
	}
	env, err := c.svc.Tenants.Environment(r.Context(), req.p, h.EnvironmentID)
	if err != nil {
		return err
	}
	ecs, err := c.svc.Configs.ExplainAll(r.Context(), req.p, id)
	if err != nil {
		return err
	}
	data := hostDetailData{Host: h, Env: env, Online: c.svc.Hosts.Online(h)}
	checked, err := c.svc.Drift.Hosts(r.Context(), req.p, h.EnvironmentID, []hosts.Host{h})
	if err != nil {
		return err
	}
	if d, ok := checked[h.ID]; ok {
		data.Drift = &d
	}
	metas := map[string]protocol.CredentialMeta{}
	if needsCredentials(ecs) {
		list, err := c.svc.Credentials.List(r.Context(), req.p, h.ClientID)
		if err != nil {
			if statusOf(err) < 500 {
				return err
			}
			data.CredsNotice = "credential names could not be loaded: " + message(err)
		}
		for _, m := range list {
			metas[m.ID] = m
		}
	}
	seen := map[string]bool{}
	for _, ec := range ecs {
		seen[ec.ConfigType] = true
		hc := hostConfig{Type: ec.ConfigType, Version: ec.Version, EnvVersion: ec.EnvironmentVersion, HostVersion: ec.HostVersion, Source: ec.Source}
		var prov agentconfig.Provenance
		if len(ec.Provenance) > 0 && json.Unmarshal(ec.Provenance, &prov) == nil {
			hc.Provenance, hc.Removed = prov.Entries, prov.Removed
		}
		shown := ec.ConfigData
		if ec.ConfigType == agentconfig.Collectors {
			shown, hc.Credentials, hc.Notice = redactCollectors(ec.ConfigData, metas)
		}
		hc.Data = prettyJSON(shown)
		if st, ok := h.ApplyStatus[ec.ConfigType]; ok {
			hc.Apply = &st
		}
		if v, ok := h.ConfigVersions[ec.ConfigType]; ok {
			hc.Reported = &v
		}
		data.Configs = append(data.Configs, hc)
	}
	for _, t := range agentconfig.TypeNames() {
		if !seen[t] {
			data.Unset = append(data.Unset, t)
		}
	}
	c.render(w, http.StatusOK, "host", req, h.Hostname, data)
	return nil
}

func needsCredentials(ecs []protocol.EffectiveConfig) bool {
	return slices.ContainsFunc(ecs, func(ec protocol.EffectiveConfig) bool { return ec.ConfigType == agentconfig.Collectors })
}

// redactCollectors shows collectors as the agent caches them: every secret field a credential injects
// replaced by "[REDACTED]", and each referenced credential by name.
func redactCollectors(data json.RawMessage, metas map[string]protocol.CredentialMeta) (json.RawMessage, []credRef, string) {
	ids, err := agentconfig.CredentialIDs(data)
	if err != nil || len(ids) == 0 {
		return data, nil, ""
	}
	fields := make(map[string][]string, len(ids))
	refs := make([]credRef, 0, len(ids))
	for _, id := range ids {
		m, ok := metas[id]
		refs = append(refs, credRef{ID: id, Name: m.Name, Fields: m.Fields, Missing: !ok})
		if ok {
			fields[id] = m.Fields
		}
	}
	redacted, _, err := agentconfig.RedactForCache(data, fields)
	if errors.Is(err, agentconfig.ErrCredentialMissing) {
		return data, refs, "these collectors reference a credential that does not exist, so they cannot be delivered"
	}
	if err != nil {
		return data, refs, "the collectors could not be shown redacted"
	}
	return redacted, refs, ""
}

// pathID parses a UUID path wildcard.
func pathID(r *http.Request, name string) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PathValue(name))
	if err != nil {
		// An id that cannot exist is a page that does not exist.
		return uuid.Nil, fault.NotFoundf("no such %s", name)
	}
	return id, nil
}
