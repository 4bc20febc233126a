package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/services/config-api/internal/applystatus"
	"github.com/configsync/configsync/services/config-api/internal/postgres/sqlcdb"
)

// EnvironmentLayer reads the environment level of a config type, a tombstone included (Version 0: no
// row).
func (s *Store) EnvironmentLayer(ctx context.Context, environmentID uuid.UUID, configType string) (applystatus.Layer, error) {
	r, err := s.q.ApplyStatusEnvironmentLayer(ctx, sqlcdb.ApplyStatusEnvironmentLayerParams{EnvironmentID: environmentID, ConfigType: configType})
	if errors.Is(err, pgx.ErrNoRows) {
		return applystatus.Layer{}, nil
	}
	if err != nil {
		return applystatus.Layer{}, fmt.Errorf("postgres: apply status environment layer: %w", err)
	}
	return applystatus.Layer{LayerState: agentconfig.LayerState{Version: r.Version, Present: r.Present}, WrittenAt: r.UpdatedAt}, nil
}

// StatusHosts lists an environment's active hosts (or the one host only) with what apply status needs of
// configType.
func (s *Store) StatusHosts(ctx context.Context, environmentID uuid.UUID, configType string, only uuid.NullUUID) ([]applystatus.Host, error) {
	rows, err := s.q.ApplyStatusHosts(ctx, sqlcdb.ApplyStatusHostsParams{EnvironmentID: environmentID, ConfigType: configType, HostID: only})
	if err != nil {
		return nil, fmt.Errorf("postgres: apply status hosts: %w", err)
	}
	staged, err := s.q.ApplyStatusStagedLayers(ctx, sqlcdb.ApplyStatusStagedLayersParams{EnvironmentID: environmentID, ConfigType: configType, HostID: only})
	if err != nil {
		return nil, fmt.Errorf("postgres: apply status staged layers: %w", err)
	}
	// A staged rollout's layer replaces the environment's row for its host (rollout_layers).
	own := make(map[uuid.UUID]applystatus.Layer, len(staged))
	for _, l := range staged {
		own[l.HostID] = layer(l.Version, true, &l.JoinedAt)
	}
	out := make([]applystatus.Host, len(rows))
	for i, r := range rows {
		h := statusHost(r.ID, r.LastHeartbeatAt, r.HeartbeatIntervalMs,
			layer(r.EnvVersion, r.EnvPresent, r.EnvWrittenAt), layer(r.HostVersion, r.HostPresent, r.HostWrittenAt))
		if l, ok := own[r.ID]; ok {
			h.Environment = l
		}
		if r.AckAppliedAt != nil {
			h.Ack = &applystatus.Ack{Version: r.AckVersion, Status: r.AckStatus, Error: r.AckError, AppliedAt: *r.AckAppliedAt}
		}
		out[i] = h
	}
	return out, nil
}

// statusHost is what apply status knows of a host: its liveness and its two layers of the config type.
func statusHost(id uuid.UUID, lastHeartbeat *time.Time, heartbeatIntervalMS int64, env, override applystatus.Layer) applystatus.Host {
	return applystatus.Host{
		ID:                id,
		LastHeartbeatAt:   lastHeartbeat,
		HeartbeatInterval: time.Duration(heartbeatIntervalMS) * time.Millisecond,
		Environment:       env,
		Override:          override,
	}
}

func layer(version int64, present bool, writtenAt *time.Time) applystatus.Layer {
	l := applystatus.Layer{LayerState: agentconfig.LayerState{Version: version, Present: present}}
	if writtenAt != nil {
		l.WrittenAt = *writtenAt
	}
	return l
}
