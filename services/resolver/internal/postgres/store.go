// Package postgres is the resolver's Store adapter over PostgreSQL, built on the sqlc queries in
// db/queries/resolver (generated into sqlcdb). It only reads.
package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/services/resolver/internal/postgres/sqlcdb"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// Store reads hosts and config rows for the resolver.
type Store struct {
	q *sqlcdb.Queries
}

var _ resolve.Store = (*Store)(nil)

// NewStore returns a Store over db (a *pgxpool.Pool in production).
func NewStore(db sqlcdb.DBTX) *Store {
	return &Store{q: sqlcdb.New(db)}
}

// HostByID returns the non-revoked host with the given id.
func (s *Store) HostByID(ctx context.Context, hostID string) (resolve.Host, error) {
	id, err := uuid.Parse(hostID)
	if err != nil {
		return resolve.Host{}, fmt.Errorf("postgres: host id: %w", err)
	}
	row, err := s.q.HostByID(ctx, id)
	if err != nil {
		return resolve.Host{}, hostError(err)
	}
	return resolve.Host{ID: row.ID.String(), AgentID: row.AgentID, ClientID: row.ClientID.String(), EnvironmentID: row.EnvironmentID.String()}, nil
}

// HostByAgentID returns the non-revoked host with the given agent id.
func (s *Store) HostByAgentID(ctx context.Context, agentID string) (resolve.Host, error) {
	row, err := s.q.HostByAgentID(ctx, agentID)
	if err != nil {
		return resolve.Host{}, hostError(err)
	}
	return resolve.Host{ID: row.ID.String(), AgentID: row.AgentID, ClientID: row.ClientID.String(), EnvironmentID: row.EnvironmentID.String()}, nil
}

func hostError(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres: host: %w", resolve.ErrNotFound)
	}
	return fmt.Errorf("postgres: read host: %w", err)
}

// HostLayers returns both levels' rows of the given types for host, in one query.
func (s *Store) HostLayers(ctx context.Context, host resolve.Host, types []string) (resolve.Layers, error) {
	hostID, err := uuid.Parse(host.ID)
	if err != nil {
		return resolve.Layers{}, fmt.Errorf("postgres: host id: %w", err)
	}
	envID, err := uuid.Parse(host.EnvironmentID)
	if err != nil {
		return resolve.Layers{}, fmt.Errorf("postgres: environment id: %w", err)
	}
	rows, err := s.q.HostLayers(ctx, sqlcdb.HostLayersParams{EnvironmentID: envID, ConfigTypes: types, HostID: hostID})
	if err != nil {
		return resolve.Layers{}, fmt.Errorf("postgres: read config rows: %w", err)
	}
	layers := resolve.Layers{
		Environment: make(map[string]agentconfig.Layer, len(rows)),
		Host:        make(map[string]agentconfig.Layer, len(rows)),
	}
	for _, row := range rows {
		l := agentconfig.Layer{Data: row.ConfigData, Version: row.Version}
		if row.Level == "host" {
			layers.Host[row.ConfigType] = l
		} else {
			layers.Environment[row.ConfigType] = l
		}
	}
	return layers, nil
}

// EnvironmentLayer returns the environment's client and its row of configType, in one query.
func (s *Store) EnvironmentLayer(ctx context.Context, environmentID, configType string) (resolve.EnvironmentLayer, error) {
	envID, err := uuid.Parse(environmentID)
	if err != nil {
		return resolve.EnvironmentLayer{}, fmt.Errorf("postgres: environment id: %w", err)
	}
	row, err := s.q.BatchEnvironment(ctx, sqlcdb.BatchEnvironmentParams{ConfigType: configType, EnvironmentID: envID})
	if errors.Is(err, pgx.ErrNoRows) {
		return resolve.EnvironmentLayer{}, fmt.Errorf("postgres: environment: %w", resolve.ErrNotFound)
	}
	if err != nil {
		return resolve.EnvironmentLayer{}, fmt.Errorf("postgres: read environment row: %w", err)
	}
	out := resolve.EnvironmentLayer{ClientID: row.ClientID.String()}
	if row.Version != nil {
		out.HasRow = true
		out.Layer = agentconfig.Layer{Data: row.ConfigData, Version: *row.Version}
	}
	return out, nil
}

// HostPage returns one page of hosts joined with their overrides of q.ConfigType, in one query.
func (s *Store) HostPage(ctx context.Context, q resolve.HostPageQuery) ([]resolve.PageHost, error) {
	p := sqlcdb.BatchHostPageParams{ConfigType: q.ConfigType, OnlineSince: q.OnlineSince, PageLimit: int32(q.Limit)}
	var err error
	if p.EnvironmentID, err = uuid.Parse(q.EnvironmentID); err != nil {
		return nil, fmt.Errorf("postgres: environment id: %w", err)
	}
	if q.After != "" {
		if p.After, err = uuid.Parse(q.After); err != nil {
			return nil, fmt.Errorf("postgres: cursor: %w", err)
		}
	}
	if len(q.HostIDs) > 0 {
		p.FilterHosts = true
		p.HostIds = make([]uuid.UUID, len(q.HostIDs))
		for i, id := range q.HostIDs {
			if p.HostIds[i], err = uuid.Parse(id); err != nil {
				return nil, fmt.Errorf("postgres: host id: %w", err)
			}
		}
	}
	rows, err := s.q.BatchHostPage(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("postgres: read host page: %w", err)
	}
	hosts := make([]resolve.PageHost, len(rows))
	for i, row := range rows {
		hosts[i] = resolve.PageHost{HostID: row.ID.String(), AgentID: row.AgentID}
		if row.OverrideVersion != nil {
			hosts[i].Override = &agentconfig.Layer{Data: row.OverrideData, Version: *row.OverrideVersion}
		}
	}
	return hosts, nil
}
