package httpapi

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/applystatus"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/drift"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
)

// The JSON shapes of responses. Domain types carry no JSON tags; these do.

type clientView struct {
	ID        uuid.UUID `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

func viewClient(c tenants.Client) clientView { return clientView(c) }

type environmentView struct {
	ID        uuid.UUID `json:"id"`
	ClientID  uuid.UUID `json:"client_id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

func viewEnvironment(e tenants.Environment) environmentView { return environmentView(e) }

type tokenView struct {
	ID       uuid.UUID  `json:"id"`
	Name     string     `json:"name"`
	ClientID *uuid.UUID `json:"client_id"`
	Token    string     `json:"token"`
}

// configView is a stored config row of either level (the spec's PUT response).
type configView struct {
	ID            uuid.UUID       `json:"id"`
	EnvironmentID *uuid.UUID      `json:"environment_id,omitempty"`
	HostID        *uuid.UUID      `json:"host_id,omitempty"`
	ConfigType    string          `json:"config_type"`
	ConfigData    json.RawMessage `json:"config_data"`
	Version       int64           `json:"version"`
	DeletedAt     *time.Time      `json:"deleted_at,omitempty"`
	UpdatedBy     string          `json:"updated_by"`
	UpdatedAt     time.Time       `json:"updated_at"`
}

func (v configView) etag() string { return etag(v.Version) }

func viewConfig(r configs.Record) configView {
	v := configView{
		ID:         r.ID,
		ConfigType: r.ConfigType,
		ConfigData: r.Data,
		Version:    r.Version,
		DeletedAt:  r.DeletedAt,
		UpdatedBy:  r.UpdatedBy,
		UpdatedAt:  r.UpdatedAt,
	}
	if v.ConfigData == nil {
		v.ConfigData = json.RawMessage("null")
	}
	if r.Scope == protocol.ScopeHost {
		v.HostID = &r.HostID
	}
	if r.EnvironmentID != uuid.Nil {
		v.EnvironmentID = &r.EnvironmentID
	}
	return v
}

// effectiveView is a host's effective config (the spec's host GET response); the version fields and
// provenance appear with ?explain=true.
type effectiveView struct {
	ConfigType         string          `json:"config_type"`
	ConfigData         json.RawMessage `json:"config_data"`
	Version            int64           `json:"version"`
	Source             string          `json:"source"`
	EnvironmentVersion *int64          `json:"environment_version,omitempty"`
	HostVersion        *int64          `json:"host_version,omitempty"`
	Provenance         json.RawMessage `json:"provenance,omitempty"`
}

func (v effectiveView) etag() string { return etag(v.Version) }

func viewEffective(ec protocol.EffectiveConfig, explain bool) effectiveView {
	v := effectiveView{ConfigType: ec.ConfigType, ConfigData: ec.ConfigData, Version: ec.Version, Source: ec.Source}
	if explain {
		env, host := ec.EnvironmentVersion, ec.HostVersion
		v.EnvironmentVersion, v.HostVersion = &env, &host
		v.Provenance = ec.Provenance
	}
	return v
}

type revisionView struct {
	Revision      int64           `json:"revision"`
	Action        string          `json:"action"`
	ConfigData    json.RawMessage `json:"config_data"`
	OldConfigData json.RawMessage `json:"old_config_data"`
	Actor         string          `json:"actor"`
	CreatedAt     time.Time       `json:"created_at"`
}

func viewRevision(r configs.Revision) revisionView {
	return revisionView{
		Revision:      r.Version,
		Action:        r.Action,
		ConfigData:    nullIfEmpty(r.NewData),
		OldConfigData: nullIfEmpty(r.OldData),
		Actor:         r.Actor,
		CreatedAt:     r.CreatedAt,
	}
}

type dryRunView struct {
	DryRun     bool             `json:"dry_run"`
	ConfigType string           `json:"config_type"`
	TotalHosts int              `json:"total_hosts"`
	Hosts      []dryRunHostView `json:"hosts"`
}

type dryRunHostView struct {
	HostID     uuid.UUID       `json:"host_id"`
	Hostname   string          `json:"hostname"`
	AgentID    string          `json:"agent_id"`
	ConfigData json.RawMessage `json:"config_data"`
	Source     string          `json:"source"`
}

func viewDryRun(d configs.DryRun) dryRunView {
	v := dryRunView{DryRun: true, ConfigType: d.ConfigType, TotalHosts: d.TotalHosts, Hosts: make([]dryRunHostView, len(d.Hosts))}
	for i, h := range d.Hosts {
		v.Hosts[i] = dryRunHostView{HostID: h.HostID, Hostname: h.Hostname, AgentID: h.AgentID, ConfigData: nullIfEmpty(h.ConfigData), Source: h.Source}
	}
	return v
}

// registeredHostView answers host registration.
type registeredHostView struct {
	ID            uuid.UUID `json:"id"`
	AgentID       string    `json:"agent_id"`
	EnvironmentID uuid.UUID `json:"environment_id"`
	ClientID      uuid.UUID `json:"client_id"`
	Hostname      string    `json:"hostname"`
	// Labels are the inventory labels registered with the host.
	Labels    map[string]string `json:"labels"`
	CreatedAt time.Time         `json:"created_at"`
	// NATSCredentials is the agent's own NATS creds file, returned once at registration.
	NATSCredentials string `json:"nats_credentials,omitempty"`
}

func viewRegisteredHost(h hosts.Host) registeredHostView {
	return registeredHostView{
		ID: h.ID, AgentID: h.AgentID, EnvironmentID: h.EnvironmentID, ClientID: h.ClientID,
		Hostname: h.Hostname, Labels: h.Labels, CreatedAt: h.CreatedAt, NATSCredentials: h.NATSCredentials,
	}
}

type hostView struct {
	ID              uuid.UUID                    `json:"id"`
	AgentID         string                       `json:"agent_id"`
	Hostname        string                       `json:"hostname"`
	EnvironmentID   uuid.UUID                    `json:"environment_id"`
	ClientID        uuid.UUID                    `json:"client_id"`
	Labels          map[string]string            `json:"labels"`
	CreatedAt       time.Time                    `json:"created_at"`
	RevokedAt       *time.Time                   `json:"revoked_at"`
	AgentVersion    *string                      `json:"agent_version"`
	LastHeartbeatAt *time.Time                   `json:"last_heartbeat_at"`
	Online          bool                         `json:"online"`
	ConfigHash      *string                      `json:"config_hash"`
	ConfigVersion   *int64                       `json:"config_version"`
	ConfigVersions  map[string]int64             `json:"config_versions"`
	ApplyStatus     map[string]hosts.ApplyStatus `json:"apply_status"`
	// NATSCredentialsExpireAt is when the host's latest agent JWT expires: an agent renews before
	// then; one whose credentials expired while it was off needs re-issued ones.
	NATSCredentialsExpireAt *time.Time `json:"nats_credentials_expire_at"`
	// HeartbeatIntervalMS is the period the agent reports it heartbeats at (liveness follows it).
	HeartbeatIntervalMS int64 `json:"heartbeat_interval_ms,omitempty"`
}

func (a *API) viewHost(h hosts.Host) hostView {
	v := hostView{
		ID:              h.ID,
		AgentID:         h.AgentID,
		Hostname:        h.Hostname,
		EnvironmentID:   h.EnvironmentID,
		ClientID:        h.ClientID,
		Labels:          h.Labels,
		CreatedAt:       h.CreatedAt,
		RevokedAt:       h.RevokedAt,
		AgentVersion:    h.AgentVersion,
		LastHeartbeatAt: h.LastHeartbeatAt,
		Online:          a.svc.Hosts.Online(h),
		ConfigHash:      h.ConfigHash,
		ConfigVersion:   h.ConfigVersion,
		ConfigVersions:  h.ConfigVersions,
		ApplyStatus:     h.ApplyStatus,

		HeartbeatIntervalMS: h.HeartbeatInterval.Milliseconds(),
	}
	if !h.NATSExpiresAt.IsZero() {
		exp := h.NATSExpiresAt
		v.NATSCredentialsExpireAt = &exp
	}
	if v.ConfigVersions == nil {
		v.ConfigVersions = map[string]int64{}
	}
	if v.ApplyStatus == nil {
		v.ApplyStatus = map[string]hosts.ApplyStatus{}
	}
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
	return v
}

type driftView struct {
	EnvironmentID uuid.UUID       `json:"environment_id"`
	CheckedHosts  int             `json:"checked_hosts"`
	Hosts         []driftHostView `json:"hosts"`
	// Pending hosts acked the expected versions of PendingTypes and have not reported them in a
	// heartbeat yet: not drift.
	Pending []driftHostView `json:"pending"`
}

type driftHostView struct {
	HostID           uuid.UUID        `json:"host_id"`
	Hostname         string           `json:"hostname"`
	AgentID          string           `json:"agent_id"`
	Online           bool             `json:"online"`
	LastHeartbeatAt  *time.Time       `json:"last_heartbeat_at"`
	ReportedHash     *string          `json:"reported_hash"`
	ExpectedHash     string           `json:"expected_hash"`
	ReportedVersions map[string]int64 `json:"reported_versions"`
	ExpectedVersions map[string]int64 `json:"expected_versions"`
	Reasons          []string         `json:"reasons"`
	PendingTypes     []string         `json:"pending_types,omitempty"`
}

func viewDrift(r drift.Report) driftView {
	v := driftView{EnvironmentID: r.EnvironmentID, CheckedHosts: r.CheckedHosts,
		Hosts: make([]driftHostView, len(r.Hosts)), Pending: make([]driftHostView, len(r.Pending))}
	for i, h := range r.Hosts {
		v.Hosts[i] = viewDriftHost(h)
	}
	for i, h := range r.Pending {
		v.Pending[i] = viewDriftHost(h)
	}
	return v
}

func viewDriftHost(h drift.Host) driftHostView {
	v := driftHostView(h)
	if v.ReportedVersions == nil {
		v.ReportedVersions = map[string]int64{}
	}
	if v.Reasons == nil {
		v.Reasons = []string{}
	}
	return v
}

type configTypeView struct {
	Name          string          `json:"name"`
	MergeStrategy string          `json:"merge_strategy"`
	Description   string          `json:"description"`
	Schema        json.RawMessage `json:"schema"`
}

func nullIfEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

func viewApplyStatus(s applystatus.Status) protocol.ApplyStatus {
	v := protocol.ApplyStatus{
		ConfigType: s.ConfigType, Version: s.Version, Deleted: !s.Present, WrittenAt: s.WrittenAt,
		Targets: s.Targets, Applied: s.Applied, Failed: s.Failed, Pending: s.Pending, Offline: s.Offline,
		OtherHosts: s.Others, TopErrors: make([]protocol.ApplyErrorCount, len(s.TopErrors)), Done: s.Done(),
	}
	for i, e := range s.TopErrors {
		v.TopErrors[i] = protocol.ApplyErrorCount{Error: e.Error, Hosts: e.Hosts}
	}
	if s.SlowestHost.Valid {
		ms, id := s.SlowestApply.Milliseconds(), s.SlowestHost.UUID.String()
		v.SlowestApplyMS, v.SlowestHostID = &ms, &id
	}
	return v
}
