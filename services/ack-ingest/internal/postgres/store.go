// Package postgres is ack-ingest's PostgreSQL adapter: the ingest.Store port over sqlc queries that
// write a whole batch with one statement (parallel arrays unnested in lockstep).
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
	"github.com/configsync/configsync/services/ack-ingest/internal/postgres/sqlcdb"
)

// Store implements ingest.Store.
type Store struct {
	q *sqlcdb.Queries
}

var _ ingest.Store = (*Store)(nil)

// NewStore returns a Store over pool.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{q: sqlcdb.New(pool)}
}

// LookupHostIDs implements ingest.Store.
func (s *Store) LookupHostIDs(ctx context.Context, agentIDs []string) (map[string]uuid.UUID, error) {
	rows, err := s.q.LookupHostIDs(ctx, agentIDs)
	if err != nil {
		return nil, fmt.Errorf("postgres: look up hosts: %w", classify(err))
	}
	out := make(map[string]uuid.UUID, len(rows))
	for _, r := range rows {
		out[r.AgentID] = r.ID
	}
	return out, nil
}

// UpsertApplyStatuses implements ingest.Store.
func (s *Store) UpsertApplyStatuses(ctx context.Context, rows []ingest.ApplyStatus) error {
	if len(rows) == 0 {
		return nil
	}
	p := sqlcdb.UpsertApplyStatusesParams{
		HostIds:     make([]uuid.UUID, len(rows)),
		ConfigTypes: make([]string, len(rows)),
		Versions:    make([]int64, len(rows)),
		Statuses:    make([]string, len(rows)),
		Errors:      make([]string, len(rows)),
		AppliedAts:  make([]time.Time, len(rows)),
	}
	for i, r := range rows {
		p.HostIds[i] = r.HostID
		p.ConfigTypes[i] = r.ConfigType
		p.Versions[i] = r.Version
		p.Statuses[i] = r.Status
		p.Errors[i] = r.Error
		p.AppliedAts[i] = r.AppliedAt
	}
	if _, err := s.q.UpsertApplyStatuses(ctx, p); err != nil {
		return fmt.Errorf("postgres: upsert apply statuses: %w", classify(err))
	}
	return nil
}

// UpdateHeartbeats implements ingest.Store.
func (s *Store) UpdateHeartbeats(ctx context.Context, rows []ingest.HostHeartbeat) error {
	if len(rows) == 0 {
		return nil
	}
	p := sqlcdb.UpdateHeartbeatsParams{
		HostIds:             make([]uuid.UUID, len(rows)),
		AgentVersions:       make([]string, len(rows)),
		ConfigHashes:        make([]string, len(rows)),
		ConfigVersionValues: make([]int64, len(rows)),
		ConfigVersionsJson:  make([][]byte, len(rows)),
		ReceivedAts:         make([]time.Time, len(rows)),
	}
	for i, r := range rows {
		versions := r.ConfigVersions
		if versions == nil {
			versions = map[string]int64{}
		}
		js, err := json.Marshal(versions)
		if err != nil {
			return fmt.Errorf("postgres: encode config_versions: %w: %w", ingest.ErrRejected, err)
		}
		p.HostIds[i] = r.HostID
		p.AgentVersions[i] = r.AgentVersion
		p.ConfigHashes[i] = r.ConfigHash
		p.ConfigVersionValues[i] = r.ConfigVersion
		p.ConfigVersionsJson[i] = js
		p.ReceivedAts[i] = r.ReceivedAt
	}
	if _, err := s.q.UpdateHeartbeats(ctx, p); err != nil {
		return fmt.Errorf("postgres: update heartbeats: %w", classify(err))
	}
	return nil
}

// classify marks errors caused by the rows themselves (SQLSTATE classes 22 data exception and 23
// integrity constraint violation) with ingest.ErrRejected; everything else is treated as transient.
func classify(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 {
		switch pgErr.Code[:2] {
		case "22", "23":
			return fmt.Errorf("%w: %w", ingest.ErrRejected, err)
		}
	}
	return err
}
