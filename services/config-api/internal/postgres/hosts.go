package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/postgres/sqlcdb"
)

// CreateHost registers a host.
func (s *Store) CreateHost(ctx context.Context, h hosts.Host) (hosts.Host, error) {
	row, err := s.q.CreateHost(ctx, sqlcdb.CreateHostParams{
		ClientID:      h.ClientID,
		EnvironmentID: h.EnvironmentID,
		Hostname:      h.Hostname,
		AgentID:       h.AgentID,
		NatsPublicKey: optional(h.NATSPublicKey),
	})
	if err != nil {
		return hosts.Host{}, classify(err, "host with this hostname or agent_id")
	}
	return hosts.Host{
		ID:            row.ID,
		ClientID:      row.ClientID,
		EnvironmentID: row.EnvironmentID,
		Hostname:      row.Hostname,
		AgentID:       row.AgentID,
		CreatedAt:     row.CreatedAt,
	}, nil
}

// Host returns a host within filter, with its apply status.
func (s *Store) Host(ctx context.Context, filter uuid.NullUUID, id uuid.UUID) (hosts.Host, error) {
	row, err := s.q.GetHost(ctx, sqlcdb.GetHostParams{ID: id, ClientFilter: filter})
	if err != nil {
		return hosts.Host{}, classify(err, "host")
	}
	return hostFromRow(sqlcdb.ListHostsRow(row))
}

// Hosts returns a page of an environment's hosts in id order.
func (s *Store) Hosts(ctx context.Context, environmentID uuid.UUID, after uuid.NullUUID, limit int) ([]hosts.Host, error) {
	rows, err := s.q.ListHosts(ctx, sqlcdb.ListHostsParams{EnvironmentID: environmentID, After: after, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("postgres: list hosts: %w", err)
	}
	out := make([]hosts.Host, 0, len(rows))
	for _, r := range rows {
		h, err := hostFromRow(r)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// RevokeHost sets a host's revoked_at (kept when already set).
func (s *Store) RevokeHost(ctx context.Context, filter uuid.NullUUID, id uuid.UUID) error {
	_, err := s.q.RevokeHost(ctx, sqlcdb.RevokeHostParams{ID: id, ClientFilter: filter})
	return classify(err, "host")
}

// RevokedNATSKeys returns every revoked host's NATS user key and revocation time.
func (s *Store) RevokedNATSKeys(ctx context.Context) (map[string]time.Time, error) {
	rows, err := s.q.ListRevokedNATSKeys(ctx)
	if err != nil {
		return nil, classify(err, "hosts")
	}
	out := make(map[string]time.Time, len(rows))
	for _, r := range rows {
		out[r.NatsPublicKey] = r.RevokedAt
	}
	return out, nil
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// applyStatusJSON is one entry of the apply_status object the host queries aggregate.
type applyStatusJSON struct {
	Version   int64     `json:"version"`
	Status    string    `json:"status"`
	Error     *string   `json:"error"`
	AppliedAt time.Time `json:"applied_at"`
}

func hostFromRow(r sqlcdb.ListHostsRow) (hosts.Host, error) {
	h := hosts.Host{
		ID:              r.ID,
		ClientID:        r.ClientID,
		EnvironmentID:   r.EnvironmentID,
		Hostname:        r.Hostname,
		AgentID:         r.AgentID,
		CreatedAt:       r.CreatedAt,
		RevokedAt:       r.RevokedAt,
		AgentVersion:    r.AgentVersion,
		ConfigHash:      r.ConfigHash,
		ConfigVersion:   r.ConfigVersion,
		LastHeartbeatAt: r.LastHeartbeatAt,
		ApplyStatus:     map[string]hosts.ApplyStatus{},
	}
	if len(r.ConfigVersions) > 0 {
		if err := json.Unmarshal(r.ConfigVersions, &h.ConfigVersions); err != nil {
			return hosts.Host{}, fmt.Errorf("postgres: host %s config_versions: %w", r.ID, err)
		}
	}
	var status map[string]applyStatusJSON
	if err := json.Unmarshal(r.ApplyStatus, &status); err != nil {
		return hosts.Host{}, fmt.Errorf("postgres: host %s apply status: %w", r.ID, err)
	}
	for t, st := range status {
		a := hosts.ApplyStatus{Version: st.Version, Status: st.Status, AppliedAt: st.AppliedAt}
		if st.Error != nil {
			a.Error = *st.Error
		}
		h.ApplyStatus[t] = a
	}
	return h, nil
}
