// Package postgres is the resolver's Store adapter over PostgreSQL, built on the sqlc queries in
// db/queries/resolver (generated into sqlcdb). It only reads.
package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/postgres/sqlcdb"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// DB is what a Store needs: sqlc's queries and read-only transactions (a *pgxpool.Pool).
type DB interface {
	sqlcdb.DBTX
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Store reads hosts and config rows for the resolver.
type Store struct {
	db DB
	q  *sqlcdb.Queries
}

var _ resolve.Store = (*Store)(nil)

// NewStore returns a Store over db (a *pgxpool.Pool in production). Its outages are reported as
// resolve.ErrUnavailable.
func NewStore(db DB) *Store {
	o := pgdb.Outage(db, resolve.ErrUnavailable)
	return &Store{db: o, q: sqlcdb.New(o)}
}

// layerRow is a row of LayersByHostID and LayersByAgentID (sqlc generates one identical type for each).
type layerRow = struct {
	Level         string
	HostID        uuid.UUID
	ClientID      uuid.UUID
	EnvironmentID uuid.UUID
	AgentID       string
	ConfigType    string
	ConfigData    []byte
	Version       int64
}

// pageRow is a row of the host page queries (HostPage, OnlineHostPage, ListedHostPage).
type pageRow = struct {
	Level      string
	HostID     uuid.UUID
	AgentID    string
	ConfigData []byte
	Version    int64
}

// rowsAs converts rows of a generated row type to the shared shape R.
func rowsAs[R any, S ~[]E, E any](rows S, conv func(E) R) []R {
	out := make([]R, len(rows))
	for i, r := range rows {
		out[i] = conv(r)
	}
	return out
}

// LayersByHostID returns the non-revoked host with the given id and its rows of types at both levels,
// in one query.
func (s *Store) LayersByHostID(ctx context.Context, hostID string, types []string) (resolve.HostLayers, error) {
	id, err := uuid.Parse(hostID)
	if err != nil {
		return resolve.HostLayers{}, fmt.Errorf("postgres: host id: %w", err)
	}
	rows, err := s.q.LayersByHostID(ctx, sqlcdb.LayersByHostIDParams{HostID: id, ConfigTypes: types})
	return oneHost(rows, err, "host", func(r sqlcdb.LayersByHostIDRow) layerRow { return layerRow(r) })
}

// LayersByAgentID returns the non-revoked host of agentID and its rows of types at both levels, in one
// query with scalar parameters (which PostgreSQL plans once).
func (s *Store) LayersByAgentID(ctx context.Context, agentID string, types []string) (resolve.HostLayers, error) {
	rows, err := s.q.LayersByAgentID(ctx, sqlcdb.LayersByAgentIDParams{AgentID: agentID, ConfigTypes: types})
	return oneHost(rows, err, "agent", func(r sqlcdb.LayersByAgentIDRow) layerRow { return layerRow(r) })
}

// oneHost turns the rows of a one-host layers query (err: the query's error) into that host; key
// names what the host was looked up by, for the not-found error.
func oneHost[R any](rows []R, err error, key string, conv func(R) layerRow) (resolve.HostLayers, error) {
	if err != nil {
		return resolve.HostLayers{}, fmt.Errorf("postgres: read host and config rows: %w", err)
	}
	hosts := hostLayers(rowsAs(rows, conv))
	if len(hosts) == 0 {
		return resolve.HostLayers{}, fmt.Errorf("postgres: %s: %w", key, resolve.ErrNotFound)
	}
	return hosts[0], nil
}

// FetchRows returns the non-revoked hosts of agentIDs with their own rows of types, their stored
// identity statements and the versions of their environments' rows (not their data), in one query
// (FetchHostsByAgentIDs). The query returns a host's own rows of every type; those of other types are
// left out here.
func (s *Store) FetchRows(ctx context.Context, agentIDs, types []string) (resolve.FetchRows, error) {
	rows, err := s.q.FetchHostsByAgentIDs(ctx, sqlcdb.FetchHostsByAgentIDsParams{AgentIds: agentIDs, ConfigTypes: types})
	if err != nil {
		return resolve.FetchRows{}, fmt.Errorf("postgres: read hosts and their rows: %w", err)
	}
	out := resolve.FetchRows{EnvironmentVersions: map[string]map[string]int64{}}
	index := make(map[string]int, len(agentIDs))
	var overrides map[string]map[string]agentconfig.Layer
	var staged map[string]map[string]int64
	for i := range rows {
		r := &rows[i]
		switch r.Level {
		case "host":
			index[r.HostID] = len(out.Hosts)
			h := resolve.FetchHost{Host: resolve.Host{ID: r.HostID, AgentID: r.AgentID, ClientID: r.ClientID, EnvironmentID: r.EnvironmentID}}
			if r.IdentityKeyID != nil {
				h.Identity = &protocol.Signed{Statement: r.IdentityStatement, KeyID: *r.IdentityKeyID, Signature: r.IdentitySignature}
			}
			out.Hosts = append(out.Hosts, h)
		case "override":
			if !slices.Contains(types, r.ConfigType) {
				continue
			}
			if overrides == nil {
				overrides = map[string]map[string]agentconfig.Layer{}
			}
			if overrides[r.HostID] == nil {
				overrides[r.HostID] = map[string]agentconfig.Layer{}
			}
			overrides[r.HostID][r.ConfigType] = agentconfig.Layer{Data: r.ConfigData, Version: r.Version}
		case "environment":
			if out.EnvironmentVersions[r.EnvironmentID] == nil {
				out.EnvironmentVersions[r.EnvironmentID] = map[string]int64{}
			}
			out.EnvironmentVersions[r.EnvironmentID][r.ConfigType] = r.Version
		case "staged":
			if staged == nil {
				staged = map[string]map[string]int64{}
			}
			if staged[r.HostID] == nil {
				staged[r.HostID] = map[string]int64{}
			}
			staged[r.HostID][r.ConfigType] = r.Version
		}
	}
	for id, rows := range overrides {
		if i, ok := index[id]; ok {
			out.Hosts[i].Overrides = rows
		}
	}
	for id, versions := range staged {
		if i, ok := index[id]; ok {
			out.Hosts[i].Staged = versions
		}
	}
	return out, nil
}

// StagedLayers returns the data of staged environment layers, in one query (RolloutLayerData).
func (s *Store) StagedLayers(ctx context.Context, keys []resolve.StagedKey) (map[resolve.StagedKey]agentconfig.Layer, error) {
	envs := make([]uuid.UUID, len(keys))
	types := make([]string, len(keys))
	versions := make([]int64, len(keys))
	for i, k := range keys {
		var err error
		if envs[i], err = uuid.Parse(k.EnvironmentID); err != nil {
			return nil, fmt.Errorf("postgres: environment id: %w", err)
		}
		types[i], versions[i] = k.ConfigType, k.Version
	}
	rows, err := s.q.RolloutLayerData(ctx, sqlcdb.RolloutLayerDataParams{EnvironmentIds: envs, ConfigTypes: types, Versions: versions})
	if err != nil {
		return nil, fmt.Errorf("postgres: read staged layers: %w", err)
	}
	out := make(map[resolve.StagedKey]agentconfig.Layer, len(rows))
	for _, r := range rows {
		out[resolve.StagedKey{EnvironmentID: r.EnvironmentID.String(), ConfigType: r.ConfigType, Version: r.Version}] =
			agentconfig.Layer{Data: r.ConfigData, Version: r.Version}
	}
	return out, nil
}

// EnvironmentRows returns the rows of types of the given environments, in one query.
func (s *Store) EnvironmentRows(ctx context.Context, environmentIDs, types []string) (map[string]map[string]agentconfig.Layer, error) {
	ids := make([]uuid.UUID, len(environmentIDs))
	for i, id := range environmentIDs {
		var err error
		if ids[i], err = uuid.Parse(id); err != nil {
			return nil, fmt.Errorf("postgres: environment id: %w", err)
		}
	}
	rows, err := s.q.EnvironmentRows(ctx, sqlcdb.EnvironmentRowsParams{EnvironmentIds: ids, ConfigTypes: types})
	if err != nil {
		return nil, fmt.Errorf("postgres: read environment rows: %w", err)
	}
	out := make(map[string]map[string]agentconfig.Layer, len(environmentIDs))
	for _, r := range rows {
		env := r.EnvironmentID.String()
		if out[env] == nil {
			out[env] = map[string]agentconfig.Layer{}
		}
		out[env][r.ConfigType] = agentconfig.Layer{Data: r.ConfigData, Version: r.Version}
	}
	return out, nil
}

// hostLayers assembles the level-tagged rows of a layers query into hosts. The hosts of one
// environment share its Environment map (read only).
func hostLayers(rows []layerRow) []resolve.HostLayers {
	type key struct{ host, env uuid.UUID }
	var keys []key
	envs := map[uuid.UUID]map[string]agentconfig.Layer{}
	overrides := map[uuid.UUID]map[string]agentconfig.Layer{}
	staged := map[uuid.UUID]map[string]agentconfig.Layer{}
	add := func(m map[uuid.UUID]map[string]agentconfig.Layer, id uuid.UUID, r layerRow) {
		if m[id] == nil {
			m[id] = map[string]agentconfig.Layer{}
		}
		m[id][r.ConfigType] = agentconfig.Layer{Data: r.ConfigData, Version: r.Version}
	}
	var hosts []resolve.HostLayers
	for _, r := range rows {
		switch r.Level {
		case "host":
			keys = append(keys, key{r.HostID, r.EnvironmentID})
			hosts = append(hosts, resolve.HostLayers{Host: resolve.Host{
				ID: r.HostID.String(), AgentID: r.AgentID, ClientID: r.ClientID.String(), EnvironmentID: r.EnvironmentID.String(),
			}})
		case "override":
			add(overrides, r.HostID, r)
		case "environment":
			add(envs, r.EnvironmentID, r)
		case "staged":
			add(staged, r.HostID, r)
		}
	}
	none := map[string]agentconfig.Layer{}
	orNone := func(m map[string]agentconfig.Layer) map[string]agentconfig.Layer {
		if m == nil {
			return none
		}
		return m
	}
	for i, k := range keys {
		env := orNone(envs[k.env])
		if own := staged[k.host]; len(own) > 0 {
			// The rollout's layers replace the environment's rows of their types for this host only.
			env = maps.Clone(env)
			maps.Copy(env, own)
		}
		hosts[i].Layers = resolve.Layers{Environment: env, Host: orNone(overrides[k.host])}
	}
	return hosts
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

// liveness is q's online filter as the page queries pass it to host_online: the hosts online at
// OnlineAt with the window OnlineAt - OnlineSince, by their own heartbeat intervals too; without
// OnlineAt, those whose last heartbeat is at or after OnlineSince (at = OnlineSince, no window, no own
// intervals).
func liveness(q resolve.HostPageQuery) (at time.Time, window pgtype.Interval, ownIntervals bool) {
	since := *q.OnlineSince
	at = since
	if q.OnlineAt != nil {
		at, ownIntervals = *q.OnlineAt, true
	}
	return at, pgtype.Interval{Microseconds: at.Sub(since).Microseconds(), Valid: true}, ownIntervals
}

// HostPage returns one page of hosts with their rows of q.ConfigType, in one query: the host query
// variant for q's filters, in a read-only transaction that keeps its plan off statistics (see
// PlanOrderedPages in db/queries/resolver).
func (s *Store) HostPage(ctx context.Context, q resolve.HostPageQuery) (hosts []resolve.PageHost, err error) {
	envID, err := uuid.Parse(q.EnvironmentID)
	if err != nil {
		return nil, fmt.Errorf("postgres: environment id: %w", err)
	}
	var after uuid.UUID
	if q.After != "" {
		if after, err = uuid.Parse(q.After); err != nil {
			return nil, fmt.Errorf("postgres: cursor: %w", err)
		}
	}
	var hostIDs []uuid.UUID
	if len(q.HostIDs) > 0 {
		hostIDs = make([]uuid.UUID, len(q.HostIDs))
		for i, id := range q.HostIDs {
			if hostIDs[i], err = uuid.Parse(id); err != nil {
				return nil, fmt.Errorf("postgres: host id: %w", err)
			}
		}
	}
	limit := int32(min(q.Limit, math.MaxInt32))

	tx, err := s.db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("postgres: begin host page: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(ctx)
		}
	}()
	qtx := s.q.WithTx(tx)
	if err := qtx.PlanOrderedPages(ctx); err != nil {
		return nil, fmt.Errorf("postgres: host page plan settings: %w", err)
	}
	var rows []pageRow
	switch {
	case hostIDs != nil:
		var listed []sqlcdb.ListedHostPageRow
		p := sqlcdb.ListedHostPageParams{HostIds: hostIDs, EnvironmentID: envID, After: after, PageLimit: limit, ConfigType: q.ConfigType,
			OnlineWindow: pgtype.Interval{Valid: true}}
		if q.OnlineSince != nil {
			var at time.Time
			at, p.OnlineWindow, p.OwnIntervals = liveness(q)
			p.OnlineAt = &at
		}
		listed, err = qtx.ListedHostPage(ctx, p)
		rows = rowsAs(listed, func(r sqlcdb.ListedHostPageRow) pageRow { return pageRow(r) })
	case q.OnlineSince != nil:
		var online []sqlcdb.OnlineHostPageRow
		at, window, own := liveness(q)
		online, err = qtx.OnlineHostPage(ctx, sqlcdb.OnlineHostPageParams{
			EnvironmentID: envID, After: after, PageLimit: limit, ConfigType: q.ConfigType,
			OnlineAt: at, OnlineWindow: window, OwnIntervals: own,
		})
		rows = rowsAs(online, func(r sqlcdb.OnlineHostPageRow) pageRow { return pageRow(r) })
	default:
		var all []sqlcdb.HostPageRow
		all, err = qtx.HostPage(ctx, sqlcdb.HostPageParams{EnvironmentID: envID, After: after, PageLimit: limit, ConfigType: q.ConfigType})
		rows = rowsAs(all, func(r sqlcdb.HostPageRow) pageRow { return pageRow(r) })
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: read host page: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("postgres: end host page: %w", err)
	}
	return pageHosts(rows), nil
}

// pageHosts assembles the level-tagged rows of a host page: the hosts in id order, each with its
// override row when it has one.
func pageHosts(rows []pageRow) []resolve.PageHost {
	overrides := map[uuid.UUID]*agentconfig.Layer{}
	staged := map[uuid.UUID]*agentconfig.Layer{}
	var ids []uuid.UUID
	agents := map[uuid.UUID]string{}
	for _, r := range rows {
		switch r.Level {
		case "host":
			ids = append(ids, r.HostID)
			agents[r.HostID] = r.AgentID
		case "override":
			overrides[r.HostID] = &agentconfig.Layer{Data: r.ConfigData, Version: r.Version}
		case "staged":
			staged[r.HostID] = &agentconfig.Layer{Data: r.ConfigData, Version: r.Version}
		}
	}
	// The page comes out of the index in id order, but SQL promises no order for a UNION: sort.
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	hosts := make([]resolve.PageHost, len(ids))
	for i, id := range ids {
		hosts[i] = resolve.PageHost{HostID: id.String(), AgentID: agents[id], Override: overrides[id], Staged: staged[id]}
	}
	return hosts
}
