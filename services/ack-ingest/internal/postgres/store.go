// Package postgres is ack-ingest's PostgreSQL adapter: the ingest.Store port over sqlc queries that
// write a whole batch with one statement (parallel arrays unnested in lockstep).
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
	"github.com/configsync/configsync/services/ack-ingest/internal/postgres/sqlcdb"
)

// Store implements ingest.Store.
type Store struct {
	pool *pgxpool.Pool
	q    *sqlcdb.Queries
}

var _ ingest.Store = (*Store)(nil)

// NewStore returns a Store over pool.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, q: sqlcdb.New(uuidArgs{pool})}
}

// LookupHostIDs implements ingest.Store.
func (s *Store) LookupHostIDs(ctx context.Context, agentIDs []string) (map[string]ingest.HostRef, error) {
	rows, err := s.q.LookupHostIDs(ctx, agentIDs)
	if err != nil {
		return nil, fmt.Errorf("postgres: look up hosts: %w", classify(err))
	}
	out := make(map[string]ingest.HostRef, len(rows))
	for _, r := range rows {
		out[r.AgentID] = ingest.HostRef{ID: r.ID, EnvironmentID: r.EnvironmentID}
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
		AckSeqs:     make([]int64, len(rows)),
	}
	for i, r := range rows {
		p.HostIds[i] = r.HostID
		p.ConfigTypes[i] = r.ConfigType
		p.Versions[i] = r.Version
		p.Statuses[i] = r.Status
		p.Errors[i] = r.Error
		p.AppliedAts[i] = r.AppliedAt
		p.AckSeqs[i] = int64(r.Seq)
	}
	if _, err := s.q.UpsertApplyStatuses(ctx, p); err != nil {
		return fmt.Errorf("postgres: upsert apply statuses: %w", classify(err))
	}
	return nil
}

// UpdateHeartbeats implements ingest.Store: one statement (parallel arrays unnested in lockstep) writes
// the batch and returns the layers anti-entropy needs, in one round trip and one commit.
func (s *Store) UpdateHeartbeats(ctx context.Context, rows []ingest.HostHeartbeat) (ingest.HeartbeatWrite, error) {
	if len(rows) == 0 {
		return ingest.HeartbeatWrite{Layers: map[uuid.UUID]*ingest.HostLayers{}}, nil
	}
	p := sqlcdb.UpdateHeartbeatsParams{
		HostIds:              make([]uuid.UUID, len(rows)),
		AgentVersions:        make([]string, len(rows)),
		ConfigHashes:         make([]string, len(rows)),
		ConfigVersionValues:  make([]int64, len(rows)),
		ConfigVersionsJson:   make([][]byte, len(rows)),
		ReceivedAts:          make([]time.Time, len(rows)),
		HeartbeatIntervalsMs: make([]int64, len(rows)),
	}
	// The rows' config_versions share one buffer (each row's JSON a slice of it).
	buf := make([]byte, 0, 64*len(rows))
	for i, r := range rows {
		start := len(buf)
		var err error
		if buf, err = appendVersionsJSON(buf, r.ConfigVersions); err != nil {
			return ingest.HeartbeatWrite{}, fmt.Errorf("postgres: encode config_versions: %w: %w", ingest.ErrRejected, err)
		}
		js := buf[start:len(buf):len(buf)]
		p.HostIds[i] = r.HostID
		p.AgentVersions[i] = r.AgentVersion
		p.ConfigHashes[i] = r.ConfigHash
		p.ConfigVersionValues[i] = r.ConfigVersion
		p.ConfigVersionsJson[i] = js
		p.ReceivedAts[i] = r.ReceivedAt
		p.HeartbeatIntervalsMs[i] = r.HeartbeatInterval.Milliseconds()
		if !slices.Contains(p.EnvironmentIds, r.EnvironmentID) {
			p.EnvironmentIds = append(p.EnvironmentIds, r.EnvironmentID)
		}
	}
	got, err := s.updateHeartbeats(ctx, p)
	if err != nil {
		return ingest.HeartbeatWrite{}, fmt.Errorf("postgres: update heartbeats: %w", classify(err))
	}
	w := ingest.HeartbeatWrite{Layers: make(map[uuid.UUID]*ingest.HostLayers, len(rows))}
	envs, envChanged := map[uuid.UUID]map[string]agentconfig.LayerState{}, map[uuid.UUID]map[string]time.Time{}
	for _, r := range got {
		switch r.Level {
		case "written":
			w.Written = int(r.Version)
		case "environment":
			addLayer(envs, envChanged, r.EnvironmentID, r.ConfigType, r.Version, r.Flag, r.ChangedAt)
		}
	}
	for _, r := range rows {
		w.Layers[r.HostID] = &ingest.HostLayers{Environment: envs[r.EnvironmentID], EnvironmentChanged: envChanged[r.EnvironmentID]}
	}
	for _, r := range got {
		l := w.Layers[r.HostID]
		if l == nil {
			continue
		}
		switch r.Level {
		case "override":
			if l.Host == nil {
				l.Host, l.Changed = map[string]agentconfig.LayerState{}, map[string]time.Time{}
			}
			l.Host[r.ConfigType] = agentconfig.LayerState{Version: r.Version, Present: r.Flag}
			if r.ChangedAt != nil {
				l.Changed[r.ConfigType] = *r.ChangedAt
			}
		case "repair":
			addRepair(l, r)
		}
	}
	stage(got, w.Layers)
	return w, nil
}

// heartbeatTx begins a heartbeat batch's transaction with synchronous_commit off in the same round trip
// (pgx runs a statement without arguments with the simple protocol, which takes several): the commit
// does not wait for its WAL record to reach the disk, for this transaction only. A heartbeat batch's
// commit otherwise waits for a WAL flush, and with two writers the flushes bounded the rate (100-200 ms
// per commit while the disk was busy: 9,500 heartbeats/s at 100,000 agents, 18,300/s without the wait,
// measured back to back). What a crash of PostgreSQL can lose is the heartbeats of the last moments (at
// most three times wal_writer_delay), already acknowledged to JetStream: each host's next heartbeat
// writes the same columns again within its interval, and nothing else is derived from a heartbeat row
// but what the next one replaces. Acks stay synchronous: a lost apply status would not be sent again.
var heartbeatTx = pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL synchronous_commit TO off"}

// updateHeartbeats runs the UpdateHeartbeats statement in a heartbeatTx transaction.
func (s *Store) updateHeartbeats(ctx context.Context, p sqlcdb.UpdateHeartbeatsParams) ([]sqlcdb.UpdateHeartbeatsRow, error) {
	var rows []sqlcdb.UpdateHeartbeatsRow
	err := pgx.BeginTxFunc(ctx, s.pool, heartbeatTx, func(tx pgx.Tx) error {
		var err error
		rows, err = sqlcdb.New(uuidArgs{tx}).UpdateHeartbeats(ctx, p)
		return err
	})
	return rows, err
}

// appendVersionsJSON appends the JSON object of a heartbeat's per-type versions ({} for none) to buf:
// what json.Marshal gives (keys sorted), written directly when every key is a plain name (letters,
// digits, '_', '-', '.': the config types), so that a batch does not go through reflection for each
// row (json.Marshal was a third of the store's CPU per heartbeat batch); any other key takes
// json.Marshal.
func appendVersionsJSON(buf []byte, versions map[string]int64) ([]byte, error) {
	keys := slices.Sorted(maps.Keys(versions))
	for _, k := range keys {
		if !plainKey(k) {
			js, err := json.Marshal(versions)
			return append(buf, js...), err
		}
	}
	buf = append(buf, '{')
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '"')
		buf = append(buf, k...)
		buf = append(buf, '"', ':')
		buf = strconv.AppendInt(buf, versions[k], 10)
	}
	return append(buf, '}'), nil
}

// plainKey reports whether k is written in JSON as itself between quotes.
func plainKey(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// stage applies the 'staged' rows (a staged rollout's environment layer of a type for one host, see
// rollout_layers) to the hosts' layers: each replaces the environment's row of its type for its host
// alone, so the host gets copies of the environment's maps it shares with the others.
func stage(rows []sqlcdb.UpdateHeartbeatsRow, layers map[uuid.UUID]*ingest.HostLayers) {
	copied := map[uuid.UUID]bool{}
	for _, r := range rows {
		if r.Level != "staged" {
			continue
		}
		l := layers[r.HostID]
		if l == nil {
			continue
		}
		if !copied[r.HostID] {
			copied[r.HostID] = true
			l.Environment, l.EnvironmentChanged = maps.Clone(l.Environment), maps.Clone(l.EnvironmentChanged)
			if l.Environment == nil {
				l.Environment = map[string]agentconfig.LayerState{}
			}
			if l.EnvironmentChanged == nil {
				l.EnvironmentChanged = map[string]time.Time{}
			}
		}
		l.Environment[r.ConfigType] = agentconfig.LayerState{Version: r.Version, Present: r.Flag}
		if r.ChangedAt != nil {
			l.EnvironmentChanged[r.ConfigType] = *r.ChangedAt
		}
	}
}

// addLayer records one environment row (version, presence, write time) under its environment.
func addLayer(envs map[uuid.UUID]map[string]agentconfig.LayerState, changed map[uuid.UUID]map[string]time.Time,
	env uuid.UUID, configType string, version int64, present bool, at *time.Time) {
	if envs[env] == nil {
		envs[env], changed[env] = map[string]agentconfig.LayerState{}, map[string]time.Time{}
	}
	envs[env][configType] = agentconfig.LayerState{Version: version, Present: present}
	if at != nil {
		changed[env][configType] = *at
	}
}

// addRepair records the open repair of a 'repair' row in l.
func addRepair(l *ingest.HostLayers, r sqlcdb.UpdateHeartbeatsRow) {
	if l.Repairs == nil {
		l.Repairs = map[string]ingest.OpenRepair{}
	}
	var next time.Time
	if r.NextAt != nil {
		next = *r.NextAt
	}
	l.Repairs[r.ConfigType] = ingest.OpenRepair{Version: r.Version, Attempts: int(r.Attempts), NextAt: next}
}

// InactiveHosts implements ingest.Store.
func (s *Store) InactiveHosts(ctx context.Context, hostIDs []uuid.UUID) (map[uuid.UUID]bool, error) {
	ids, err := s.q.InactiveHostIDs(ctx, hostIDs)
	if err != nil {
		return nil, fmt.Errorf("postgres: inactive hosts: %w", classify(err))
	}
	out := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// layersOf assembles the tagged rows UpdateHeartbeats returns into one HostLayers per host written.
func layersOf(rows []sqlcdb.UpdateHeartbeatsRow, hosts int) map[uuid.UUID]*ingest.HostLayers {
	out := make(map[uuid.UUID]*ingest.HostLayers, hosts)
	envOf := make(map[uuid.UUID]uuid.UUID, hosts)
	envs := map[uuid.UUID]map[string]agentconfig.LayerState{}
	envChanged := map[uuid.UUID]map[string]time.Time{}
	for _, r := range rows {
		if r.Level == "host" {
			out[r.HostID] = &ingest.HostLayers{}
			envOf[r.HostID] = r.EnvironmentID
		}
	}
	for _, r := range rows {
		switch r.Level {
		case "override":
			if l := out[r.HostID]; l != nil {
				if l.Host == nil {
					l.Host = map[string]agentconfig.LayerState{}
				}
				l.Host[r.ConfigType] = agentconfig.LayerState{Version: r.Version, Present: r.Flag}
				if r.ChangedAt != nil {
					if l.Changed == nil {
						l.Changed = map[string]time.Time{}
					}
					l.Changed[r.ConfigType] = *r.ChangedAt
				}
			}
		case "environment":
			m := envs[r.EnvironmentID]
			if m == nil {
				m = map[string]agentconfig.LayerState{}
				envs[r.EnvironmentID] = m
			}
			m[r.ConfigType] = agentconfig.LayerState{Version: r.Version, Present: r.Flag}
			if r.ChangedAt != nil {
				ch := envChanged[r.EnvironmentID]
				if ch == nil {
					ch = map[string]time.Time{}
					envChanged[r.EnvironmentID] = ch
				}
				ch[r.ConfigType] = *r.ChangedAt
			}
		case "repair":
			if l := out[r.HostID]; l != nil {
				addRepair(l, r)
			}
		}
	}
	for id, l := range out {
		l.Environment = envs[envOf[id]] // shared, read-only
		l.EnvironmentChanged = envChanged[envOf[id]]
	}
	stage(rows, out)
	return out
}

// HostReports implements ingest.Store.
func (s *Store) HostReports(ctx context.Context, hostIDs []uuid.UUID) (map[uuid.UUID]ingest.HostReport, error) {
	rows, err := s.q.HostReports(ctx, hostIDs)
	if err != nil {
		return nil, fmt.Errorf("postgres: host reports: %w", classify(err))
	}
	layerRows := make([]sqlcdb.UpdateHeartbeatsRow, 0, len(rows))
	out := make(map[uuid.UUID]ingest.HostReport, len(hostIDs))
	for _, r := range rows {
		switch r.Level {
		case "applied":
			rep := out[r.HostID]
			if rep.Applied == nil {
				rep.Applied = map[string]int64{}
			}
			rep.Applied[r.ConfigType] = r.Version
			out[r.HostID] = rep
			continue
		case "host":
			rep := out[r.HostID]
			rep.AgentID = r.ConfigType // the agent id, on 'host' rows
			if len(r.Reported) > 0 {
				if err := json.Unmarshal(r.Reported, &rep.Versions); err != nil {
					return nil, fmt.Errorf("postgres: host %s config_versions: %w", r.HostID, err)
				}
			}
			out[r.HostID] = rep
		}
		layerRows = append(layerRows, sqlcdb.UpdateHeartbeatsRow{Level: r.Level, HostID: r.HostID, EnvironmentID: r.EnvironmentID,
			ConfigType: r.ConfigType, Version: r.Version, Flag: r.Flag, Attempts: r.Attempts, NextAt: r.NextAt, ChangedAt: r.ChangedAt})
	}
	layers := layersOf(layerRows, len(hostIDs))
	for id, rep := range out {
		if layers[id] == nil {
			delete(out, id) // revoked meanwhile ('applied' rows of a host without a 'host' row)
			continue
		}
		rep.Layers = layers[id]
		out[id] = rep
	}
	return out, nil
}

// FailedApplies implements ingest.Store.
func (s *Store) FailedApplies(ctx context.Context, hostIDs []uuid.UUID) (map[uuid.UUID]map[string]int64, error) {
	rows, err := s.q.FailedApplies(ctx, hostIDs)
	if err != nil {
		return nil, fmt.Errorf("postgres: failed applies: %w", classify(err))
	}
	out := map[uuid.UUID]map[string]int64{}
	for _, r := range rows {
		if out[r.HostID] == nil {
			out[r.HostID] = map[string]int64{}
		}
		out[r.HostID][r.ConfigType] = r.Version
	}
	return out, nil
}

// UpsertRepairs implements ingest.Store.
func (s *Store) UpsertRepairs(ctx context.Context, rows []ingest.Repair) error {
	p := sqlcdb.UpsertRepairsParams{
		HostIds:     make([]uuid.UUID, len(rows)),
		ConfigTypes: make([]string, len(rows)),
		Versions:    make([]int64, len(rows)),
		Attempts:    make([]int32, len(rows)),
		NextAts:     make([]time.Time, len(rows)),
	}
	for i, r := range rows {
		p.HostIds[i], p.ConfigTypes[i], p.Versions[i] = r.HostID, r.ConfigType, r.Version
		p.Attempts[i], p.NextAts[i] = int32(min(r.Attempts, 1<<30)), r.NextAt
	}
	if err := s.q.UpsertRepairs(ctx, p); err != nil {
		return fmt.Errorf("postgres: upsert repairs: %w", classify(err))
	}
	return nil
}

// DeleteRepairs implements ingest.Store.
func (s *Store) DeleteRepairs(ctx context.Context, keys []ingest.RepairKey) error {
	p := sqlcdb.DeleteRepairsParams{HostIds: make([]uuid.UUID, len(keys)), ConfigTypes: make([]string, len(keys))}
	for i, k := range keys {
		p.HostIds[i], p.ConfigTypes[i] = k.HostID, k.ConfigType
	}
	if err := s.q.DeleteRepairs(ctx, p); err != nil {
		return fmt.Errorf("postgres: delete repairs: %w", classify(err))
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
