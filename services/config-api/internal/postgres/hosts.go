package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/postgres/sqlcdb"
)

// CreateHost registers a host.
func (s *Store) CreateHost(ctx context.Context, h hosts.Host) (hosts.Host, error) {
	row, err := s.q.CreateHost(ctx, sqlcdb.CreateHostParams{
		ClientID:        h.ClientID,
		EnvironmentID:   h.EnvironmentID,
		Hostname:        h.Hostname,
		AgentID:         h.AgentID,
		NatsPublicKey:   optional(h.NATSPublicKey),
		NatsExpiresAt:   optionalTime(h.NATSExpiresAt),
		InventoryLabels: labelsJSON(h.Labels),
	})
	if err != nil {
		return hosts.Host{}, classify(err, "host with this hostname or agent_id")
	}
	return createdHost(row)
}

// createdHost is the host a registration (CreateHost, or one row of CreateHosts) stored.
func createdHost(row sqlcdb.CreateHostRow) (hosts.Host, error) {
	labels, err := labelsFromJSON(row.ID, row.InventoryLabels)
	if err != nil {
		return hosts.Host{}, err
	}
	return hosts.Host{
		ID:            row.ID,
		ClientID:      row.ClientID,
		EnvironmentID: row.EnvironmentID,
		Hostname:      row.Hostname,
		AgentID:       row.AgentID,
		Labels:        labels,
		CreatedAt:     row.CreatedAt,
	}, nil
}

// CreateHosts registers a batch of hosts of one environment with one INSERT (one statement, so all or
// none; one round trip whatever the size). On a unique violation nothing was inserted, and a second
// query finds the entries that collide, for a *hosts.ConflictError.
func (s *Store) CreateHosts(ctx context.Context, hs []hosts.Host) ([]hosts.Host, error) {
	if len(hs) == 0 {
		return nil, nil
	}
	p := sqlcdb.CreateHostsParams{
		ClientID:        hs[0].ClientID,
		EnvironmentID:   hs[0].EnvironmentID,
		Hostnames:       make([]string, len(hs)),
		AgentIds:        make([]string, len(hs)),
		NatsPublicKeys:  make([]string, len(hs)),
		InventoryLabels: make([]string, len(hs)),
		NatsExpiresAt:   optionalTime(hs[0].NATSExpiresAt),
	}
	for i, h := range hs {
		if h.ClientID != p.ClientID || h.EnvironmentID != p.EnvironmentID {
			return nil, fmt.Errorf("postgres: create hosts: entry %d is in another environment than entry 0", i)
		}
		p.Hostnames[i], p.AgentIds[i], p.NatsPublicKeys[i] = h.Hostname, h.AgentID, h.NATSPublicKey
		p.InventoryLabels[i] = string(labelsJSON(h.Labels))
	}
	rows, err := s.q.CreateHosts(ctx, p)
	if err != nil {
		err = classify(err, "host with this hostname or agent_id")
		if fault.Is(err, fault.Conflict) {
			return nil, s.hostConflicts(ctx, p, err)
		}
		return nil, fmt.Errorf("postgres: create hosts: %w", err)
	}
	index := make(map[string]int, len(hs))
	for i, h := range hs {
		index[h.AgentID] = i
	}
	out := make([]hosts.Host, len(hs))
	for _, r := range rows {
		i, ok := index[r.AgentID]
		if !ok {
			return nil, fmt.Errorf("postgres: create hosts: unexpected agent %q returned", r.AgentID)
		}
		if out[i], err = createdHost(sqlcdb.CreateHostRow(r)); err != nil {
			return nil, err
		}
	}
	if len(rows) != len(hs) {
		return nil, fmt.Errorf("postgres: create hosts: %d rows for %d hosts", len(rows), len(hs))
	}
	return out, nil
}

// hostConflicts names the entries of a batch that collide with existing hosts. cause is the batch's
// conflict, returned as it is when the colliding hosts are gone by now.
func (s *Store) hostConflicts(ctx context.Context, p sqlcdb.CreateHostsParams, cause error) error {
	rows, err := s.q.FindHostConflicts(ctx, sqlcdb.FindHostConflictsParams{
		AgentIds: p.AgentIds, EnvironmentID: p.EnvironmentID, Hostnames: p.Hostnames,
	})
	if err != nil {
		return fmt.Errorf("postgres: find host conflicts: %w (after %w)", err, cause)
	}
	agents := make(map[string]bool, len(rows))
	names := make(map[string]bool, len(rows))
	for _, r := range rows {
		agents[r.AgentID] = true
		if r.EnvironmentID == p.EnvironmentID {
			names[r.Hostname] = true
		}
	}
	ce := &hosts.ConflictError{}
	for i := range p.AgentIds {
		switch {
		case agents[p.AgentIds[i]]:
			ce.Conflicts = append(ce.Conflicts, hosts.Conflict{Index: i, AgentID: true})
		case names[p.Hostnames[i]]:
			ce.Conflicts = append(ce.Conflicts, hosts.Conflict{Index: i})
		}
	}
	if len(ce.Conflicts) == 0 {
		return cause
	}
	return ce
}

// Host returns a host within filter, with its apply status.
func (s *Store) Host(ctx context.Context, filter uuid.NullUUID, id uuid.UUID) (hosts.Host, error) {
	row, err := s.q.GetHost(ctx, sqlcdb.GetHostParams{ID: id, ClientFilter: filter})
	if err != nil {
		return hosts.Host{}, classify(err, "host")
	}
	return hostFromRow(row)
}

// Hosts returns a page of an environment's hosts in id order.
func (s *Store) Hosts(ctx context.Context, environmentID uuid.UUID, after uuid.NullUUID, limit int) ([]hosts.Host, error) {
	rows, err := s.q.ListHosts(ctx, sqlcdb.ListHostsParams{EnvironmentID: environmentID, After: after, MaxRows: int32(limit)})
	return listOfErr(rows, err, "list hosts", hostFromRow)
}

func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
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

func hostFromRow(r sqlcdb.HostDetail) (hosts.Host, error) {
	var err error
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
	if r.NatsExpiresAt != nil {
		h.NATSExpiresAt = *r.NatsExpiresAt
	}
	if r.HeartbeatIntervalMs != nil {
		h.HeartbeatInterval = time.Duration(*r.HeartbeatIntervalMs) * time.Millisecond
	}
	if h.Labels, err = labelsFromJSON(r.ID, r.InventoryLabels); err != nil {
		return hosts.Host{}, err
	}
	if len(r.Repairs) > 0 {
		if err := json.Unmarshal(r.Repairs, &h.Repairs); err != nil {
			return hosts.Host{}, fmt.Errorf("postgres: host %s repairs: %w", r.ID, err)
		}
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

// labelsJSON is a host's labels as the jsonb column holds them (an object, never null).
func labelsJSON(l selector.Labels) []byte {
	if len(l) == 0 {
		return []byte("{}")
	}
	b, _ := json.Marshal(l) // a map of strings always marshals
	return b
}

func labelsFromJSON(id uuid.UUID, b []byte) (selector.Labels, error) {
	l := selector.Labels{}
	if len(b) == 0 {
		return l, nil
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("postgres: host %s inventory labels: %w", id, err)
	}
	return l, nil
}

// PatchLabels merges patch into the labels of the hosts of ids within filter and environmentID, in a
// transaction that check can roll back.
func (s *Store) PatchLabels(ctx context.Context, filter, environmentID uuid.NullUUID, ids []uuid.UUID, patch hosts.LabelPatch,
	check func(map[uuid.UUID]selector.Labels) error) ([]uuid.UUID, error) {
	remove := patch.Remove
	if remove == nil {
		remove = []string{}
	}
	var updated []uuid.UUID
	err := s.inTx(ctx, func(_ pgx.Tx, q *sqlcdb.Queries) error {
		rows, err := q.PatchHostLabels(ctx, sqlcdb.PatchHostLabelsParams{
			SetLabels: labelsJSON(patch.Set), RemoveKeys: remove, Ids: ids,
			ClientFilter: filter, EnvironmentID: environmentID,
		})
		if err != nil {
			return fmt.Errorf("postgres: patch host labels: %w", err)
		}
		res := make(map[uuid.UUID]selector.Labels, len(rows))
		for _, r := range rows {
			if res[r.ID], err = labelsFromJSON(r.ID, r.InventoryLabels); err != nil {
				return err
			}
			updated = append(updated, r.ID)
		}
		return check(res)
	})
	if err != nil {
		return nil, err
	}
	return updated, nil
}
