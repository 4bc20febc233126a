package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/configsync/configsync/libs/platform/outbox"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/postgres/sqlcdb"
)

// Update is configs.Repository.Update: one transaction that locks the target (the environment row
// FOR NO KEY UPDATE, or the host row and its environment FOR SHARE, so environment and host writes of
// one environment serialise), reads the current rows, lets fn decide, and stores the row with
// version = nextval('config_version_seq'), a config_revisions entry and a ConfigChanged outbox row.
func (s *Store) Update(ctx context.Context, filter uuid.NullUUID, ref configs.Ref, actor string, fn func(configs.Current) (configs.Write, error)) (configs.Record, error) {
	var out configs.Record
	err := s.inTx(ctx, func(tx pgx.Tx, q *sqlcdb.Queries) error {
		cur, err := lockCurrent(ctx, q, filter, ref)
		if err != nil {
			return err
		}
		w, err := fn(cur)
		if err != nil {
			return err
		}
		out, err = write(ctx, tx, q, cur, ref.ConfigType, w, actor)
		return err
	})
	return out, err
}

// write stores w as the config of configType on cur's target, which the caller has locked: the row
// with version = nextval('config_version_seq'), a config_revisions entry by actor (old data: cur.Row's
// when live) and a ConfigChanged outbox row. Every config write goes through here.
func write(ctx context.Context, tx pgx.Tx, q *sqlcdb.Queries, cur configs.Current, configType string, w configs.Write, actor string) (configs.Record, error) {
	rec, err := upsert(ctx, q, cur.Target, configType, w.Data, actor)
	if err != nil {
		return configs.Record{}, err
	}
	var old []byte
	if cur.Row.Live() {
		old = cur.Row.Data
	}
	rev := sqlcdb.InsertRevisionParams{
		Scope:         cur.Target.Scope,
		ClientID:      cur.Target.ClientID,
		EnvironmentID: cur.Target.EnvironmentID,
		ConfigType:    configType,
		Version:       rec.Version,
		Action:        w.Action,
		OldData:       old,
		NewData:       w.Data,
		Actor:         actor,
	}
	if cur.Target.Scope == protocol.ScopeHost {
		rev.HostID = uuid.NullUUID{UUID: cur.Target.HostID, Valid: true}
	}
	if err := q.InsertRevision(ctx, rev); err != nil {
		return configs.Record{}, fmt.Errorf("postgres: insert revision: %w", err)
	}
	ev := configs.ChangeEvent(cur.Target, rec, actor, time.Now())
	if _, err := outbox.Insert(ctx, tx, protocol.ConfigChangedSubject, ev); err != nil {
		return configs.Record{}, fmt.Errorf("postgres: insert outbox event: %w", err)
	}
	return rec, nil
}

// lockCurrent locks ref's target and reads the rows a write decides on.
func lockCurrent(ctx context.Context, q *sqlcdb.Queries, filter uuid.NullUUID, ref configs.Ref) (configs.Current, error) {
	var cur configs.Current
	switch ref.Scope {
	case protocol.ScopeEnvironment:
		env, err := q.LockEnvironment(ctx, sqlcdb.LockEnvironmentParams{ID: ref.ID, ClientFilter: filter})
		if err != nil {
			return cur, rowErr(err, configs.ErrNoTarget, "lock environment")
		}
		return readCurrent(ctx, q, configs.Target{Scope: ref.Scope, ClientID: env.ClientID, EnvironmentID: env.ID}, ref.ConfigType)
	case protocol.ScopeHost:
		h, err := q.LockHost(ctx, sqlcdb.LockHostParams{ID: ref.ID, ClientFilter: filter})
		if err != nil {
			return cur, rowErr(err, configs.ErrNoTarget, "lock host")
		}
		if err := q.LockEnvironmentShared(ctx, h.EnvironmentID); err != nil {
			return cur, fmt.Errorf("postgres: lock environment: %w", err)
		}
		return readCurrent(ctx, q, hostTarget(h.ID, h.ClientID, h.EnvironmentID, h.AgentID, h.RevokedAt), ref.ConfigType)
	default:
		return cur, fmt.Errorf("postgres: unknown scope %q", ref.Scope)
	}
}

func hostTarget(id, clientID, environmentID uuid.UUID, agentID string, revokedAt *time.Time) configs.Target {
	return configs.Target{
		Scope:         protocol.ScopeHost,
		ClientID:      clientID,
		EnvironmentID: environmentID,
		HostID:        id,
		AgentID:       agentID,
		Revoked:       revokedAt != nil,
	}
}

// readCurrent reads the rows of configType a write on t (locked by the caller) decides on.
func readCurrent(ctx context.Context, q *sqlcdb.Queries, t configs.Target, configType string) (configs.Current, error) {
	cur := configs.Current{Target: t}
	envRow, err := q.GetEnvironmentConfig(ctx, sqlcdb.GetEnvironmentConfigParams{EnvironmentID: t.EnvironmentID, ConfigType: configType})
	env, err := optionalRecord(envRow, err, fromEnvConfig, "environment config")
	if err != nil {
		return cur, err
	}
	if t.Scope == protocol.ScopeEnvironment {
		cur.Row = env
		active, err := q.ActiveRolloutOf(ctx, sqlcdb.ActiveRolloutOfParams{EnvironmentID: t.EnvironmentID, ConfigType: configType})
		switch {
		case err == nil:
			cur.ActiveRollout = uuid.NullUUID{UUID: active, Valid: true}
		case !errors.Is(err, pgx.ErrNoRows):
			return cur, fmt.Errorf("postgres: read active rollout: %w", err)
		}
		return cur, nil
	}
	cur.Env = env
	hostRow, err := q.GetHostConfig(ctx, sqlcdb.GetHostConfigParams{HostID: t.HostID, ConfigType: configType})
	cur.Row, err = optionalRecord(hostRow, err, fromHostConfig, "host config")
	return cur, err
}

func upsert(ctx context.Context, q *sqlcdb.Queries, t configs.Target, configType string, data []byte, actor string) (configs.Record, error) {
	if t.Scope == protocol.ScopeHost {
		row, err := q.UpsertHostConfig(ctx, sqlcdb.UpsertHostConfigParams{HostID: t.HostID, ConfigType: configType, ConfigData: data, UpdatedBy: actor})
		if err != nil {
			return configs.Record{}, fmt.Errorf("postgres: upsert host config: %w", err)
		}
		rec := fromHostConfig(row)
		rec.EnvironmentID = t.EnvironmentID
		return rec, nil
	}
	row, err := q.UpsertEnvironmentConfig(ctx, sqlcdb.UpsertEnvironmentConfigParams{EnvironmentID: t.EnvironmentID, ConfigType: configType, ConfigData: data, UpdatedBy: actor})
	if err != nil {
		return configs.Record{}, fmt.Errorf("postgres: upsert environment config: %w", err)
	}
	return fromEnvConfig(row), nil
}

// optionalRecord turns the result of a read of at most one row into a *Record (nil when there is none), with
// toRecord for the table's row type; what names the row in the error.
func optionalRecord[R any](row R, err error, toRecord func(R) configs.Record, what string) (*configs.Record, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: read %s: %w", what, err)
	}
	rec := toRecord(row)
	return &rec, nil
}

func fromEnvConfig(r sqlcdb.EnvironmentConfig) configs.Record {
	return configs.Record{
		ID:            r.ID,
		Scope:         protocol.ScopeEnvironment,
		EnvironmentID: r.EnvironmentID,
		ConfigType:    r.ConfigType,
		Data:          r.ConfigData,
		Version:       r.Version,
		DeletedAt:     r.DeletedAt,
		UpdatedBy:     r.UpdatedBy,
		CreatedAt:     r.CreatedAt,
		UpdatedAt:     r.UpdatedAt,
	}
}

func fromHostConfig(r sqlcdb.HostConfig) configs.Record {
	return configs.Record{
		ID:         r.ID,
		Scope:      protocol.ScopeHost,
		HostID:     r.HostID,
		ConfigType: r.ConfigType,
		Data:       r.ConfigData,
		Version:    r.Version,
		DeletedAt:  r.DeletedAt,
		UpdatedBy:  r.UpdatedBy,
		CreatedAt:  r.CreatedAt,
		UpdatedAt:  r.UpdatedAt,
	}
}

// EnvironmentConfig returns an environment's row of one type (tombstones included).
func (s *Store) EnvironmentConfig(ctx context.Context, environmentID uuid.UUID, configType string) (configs.Record, error) {
	row, err := s.q.GetEnvironmentConfig(ctx, sqlcdb.GetEnvironmentConfigParams{EnvironmentID: environmentID, ConfigType: configType})
	return oneOf(row, err, "config", fromEnvConfig)
}

// EnvironmentConfigs lists an environment's live configs.
func (s *Store) EnvironmentConfigs(ctx context.Context, environmentID uuid.UUID) ([]configs.Record, error) {
	rows, err := s.q.ListEnvironmentConfigs(ctx, environmentID)
	return listOf(rows, err, "list environment configs", fromEnvConfig)
}

// Revisions lists a config's history, newest first.
func (s *Store) Revisions(ctx context.Context, ref configs.Ref, limit int) ([]configs.Revision, error) {
	var (
		rows []sqlcdb.ListEnvironmentRevisionsRow
		err  error
	)
	if ref.Scope == protocol.ScopeHost {
		var hrows []sqlcdb.ListHostRevisionsRow
		hrows, err = s.q.ListHostRevisions(ctx, sqlcdb.ListHostRevisionsParams{
			HostID: uuid.NullUUID{UUID: ref.ID, Valid: true}, ConfigType: ref.ConfigType, MaxRows: int32(limit)})
		for _, r := range hrows {
			rows = append(rows, sqlcdb.ListEnvironmentRevisionsRow(r))
		}
	} else {
		rows, err = s.q.ListEnvironmentRevisions(ctx, sqlcdb.ListEnvironmentRevisionsParams{
			EnvironmentID: ref.ID, ConfigType: ref.ConfigType, MaxRows: int32(limit)})
	}
	return listOf(rows, err, "list revisions", revision)
}

// Revision returns the revision of a config that produced version.
func (s *Store) Revision(ctx context.Context, ref configs.Ref, version int64) (configs.Revision, error) {
	if ref.Scope == protocol.ScopeHost {
		r, err := s.q.GetHostRevision(ctx, sqlcdb.GetHostRevisionParams{
			HostID: uuid.NullUUID{UUID: ref.ID, Valid: true}, ConfigType: ref.ConfigType, Version: version})
		return oneOf(sqlcdb.ListEnvironmentRevisionsRow(r), err, "revision", revision)
	}
	r, err := s.q.GetEnvironmentRevision(ctx, sqlcdb.GetEnvironmentRevisionParams{
		EnvironmentID: ref.ID, ConfigType: ref.ConfigType, Version: version})
	return oneOf(sqlcdb.ListEnvironmentRevisionsRow(r), err, "revision", revision)
}

func revision(r sqlcdb.ListEnvironmentRevisionsRow) configs.Revision {
	return configs.Revision{
		ID:        r.ID,
		Version:   r.Version,
		Action:    r.Action,
		OldData:   r.OldData,
		NewData:   r.NewData,
		Actor:     r.Actor,
		CreatedAt: r.CreatedAt,
	}
}

// AffectedHosts returns a page of an environment's active hosts with their override of configType,
// and the number of active hosts.
func (s *Store) AffectedHosts(ctx context.Context, environmentID uuid.UUID, configType string, limit int) ([]configs.AffectedHost, int, error) {
	total, err := s.q.CountActiveHosts(ctx, environmentID)
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: count hosts: %w", err)
	}
	rows, err := s.q.ListActiveHostsWithOverride(ctx, sqlcdb.ListActiveHostsWithOverrideParams{
		ConfigType: configType, EnvironmentID: environmentID, MaxRows: int32(limit)})
	out, err := listOf(rows, err, "list hosts", func(r sqlcdb.ListActiveHostsWithOverrideRow) configs.AffectedHost {
		return configs.AffectedHost{HostID: r.ID, Hostname: r.Hostname, AgentID: r.AgentID, Override: r.OverrideData}
	})
	if err != nil {
		return nil, 0, err
	}
	return out, int(total), nil
}

var _ configs.Repository = (*Store)(nil)
