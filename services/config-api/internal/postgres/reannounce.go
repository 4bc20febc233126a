package postgres

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/postgres/sqlcdb"
)

// maxReannounceAttempts bounds the runs of one re-announce transaction when PostgreSQL aborts it as a
// deadlock victim (its multi-row locks can meet another batch's, e.g. a heartbeat batch on hosts).
const maxReannounceAttempts = 3

// Reannounce is configs.Repository.Reannounce: one transaction that finds the live configs refs selects,
// locks their targets (hosts, then environments, each in id order), re-reads their rows under those
// locks and stores fn's Write for each through write, exactly as Update stores one. fn sees every row
// as it was before this transaction wrote any.
func (s *Store) Reannounce(ctx context.Context, refs configs.CredentialRefs, actor string, fn func(configs.Current) (configs.Write, bool)) ([]configs.Record, error) {
	var out []configs.Record
	run := func(tx pgx.Tx, q *sqlcdb.Queries) error {
		out = nil
		targets, err := lockReferencing(ctx, q, refs)
		if err != nil || len(targets) == 0 {
			return err
		}
		currents, err := readCurrents(ctx, q, targets, refs.ConfigType)
		if err != nil {
			return err
		}
		for _, cur := range currents {
			w, ok := fn(cur)
			if !ok {
				continue
			}
			rec, err := write(ctx, tx, q, cur, refs.ConfigType, w, actor)
			if err != nil {
				return err
			}
			out = append(out, rec)
		}
		return nil
	}
	var err error
	for attempt := 1; ; attempt++ {
		err = s.inTx(ctx, run)
		if err == nil || attempt == maxReannounceAttempts || !retryable(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// lockReferencing returns the targets (environments, then active hosts) of refs' client whose live config
// references the credential, locked the way Update locks one target. The rows are found before the locks
// are taken: a config written in between was written after the credential changed, so its own event
// already carries the change, and fn sees each row as it is under the lock. Every target is locked
// FOR NO KEY UPDATE in one order, hosts before environments (the order of a host write: host, then its
// environment), each by id, so re-announces and config writes cannot deadlock one another.
func lockReferencing(ctx context.Context, q *sqlcdb.Queries, refs configs.CredentialRefs) ([]configs.Target, error) {
	envIDs, hostIDs, err := findReferencing(ctx, q, refs)
	if err != nil || len(envIDs) == 0 && len(hostIDs) == 0 {
		return nil, err
	}
	var hosts []sqlcdb.LockHostsRow
	if len(hostIDs) > 0 {
		if hosts, err = q.LockHosts(ctx, sqlcdb.LockHostsParams{Ids: hostIDs, ClientID: refs.ClientID}); err != nil {
			return nil, fmt.Errorf("postgres: lock hosts: %w", err)
		}
	}
	lockIDs := append([]uuid.UUID(nil), envIDs...)
	for _, h := range hosts {
		lockIDs = append(lockIDs, h.EnvironmentID)
	}
	envs, err := q.LockEnvironments(ctx, sqlcdb.LockEnvironmentsParams{Ids: lockIDs, ClientID: refs.ClientID})
	if err != nil {
		return nil, fmt.Errorf("postgres: lock environments: %w", err)
	}
	locked := make(map[uuid.UUID]bool, len(envs))
	for _, e := range envs {
		locked[e.ID] = true
	}
	targets := make([]configs.Target, 0, len(envIDs)+len(hosts))
	for _, id := range envIDs {
		if locked[id] {
			targets = append(targets, configs.Target{Scope: protocol.ScopeEnvironment, ClientID: refs.ClientID, EnvironmentID: id})
		}
	}
	for _, h := range hosts {
		if locked[h.EnvironmentID] {
			targets = append(targets, hostTarget(h.ID, h.ClientID, h.EnvironmentID, h.AgentID, h.RevokedAt))
		}
	}
	return targets, nil
}

// CredentialUse is configs.Repository.CredentialUse: the queries lockReferencing starts from, outside
// any transaction.
func (s *Store) CredentialUse(ctx context.Context, refs configs.CredentialRefs) (configs.CredentialUse, error) {
	envIDs, hostIDs, err := findReferencing(ctx, s.q, refs)
	if err != nil {
		return configs.CredentialUse{}, err
	}
	return configs.CredentialUse{ConfigType: refs.ConfigType, Environments: envIDs, Hosts: hostIDs}, nil
}

// findReferencing returns the environments, and the active hosts, of refs' client whose live config of
// refs' type references the credential, each in id order.
func findReferencing(ctx context.Context, q *sqlcdb.Queries, refs configs.CredentialRefs) (envIDs, hostIDs []uuid.UUID, err error) {
	envIDs, err = q.ListCredentialEnvironmentConfigs(ctx, sqlcdb.ListCredentialEnvironmentConfigsParams{
		ClientID: refs.ClientID, ConfigType: refs.ConfigType, CredentialID: refs.CredentialID})
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: find environment configs referencing a credential: %w", err)
	}
	hostIDs, err = q.ListCredentialHostConfigs(ctx, sqlcdb.ListCredentialHostConfigsParams{
		ClientID: refs.ClientID, ConfigType: refs.ConfigType, CredentialID: refs.CredentialID})
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: find host configs referencing a credential: %w", err)
	}
	return envIDs, hostIDs, nil
}

// readCurrents is readCurrent for many locked targets, in two queries (a re-announce may hold thousands
// of host overrides; the round trips are what it costs).
func readCurrents(ctx context.Context, q *sqlcdb.Queries, targets []configs.Target, configType string) ([]configs.Current, error) {
	var envIDs, hostIDs []uuid.UUID
	for _, t := range targets {
		envIDs = append(envIDs, t.EnvironmentID)
		if t.Scope == protocol.ScopeHost {
			hostIDs = append(hostIDs, t.HostID)
		}
	}
	envRows, err := q.ListEnvironmentConfigsOfType(ctx, sqlcdb.ListEnvironmentConfigsOfTypeParams{EnvironmentIds: envIDs, ConfigType: configType})
	if err != nil {
		return nil, fmt.Errorf("postgres: read environment configs: %w", err)
	}
	envs := make(map[uuid.UUID]configs.Record, len(envRows))
	for _, r := range envRows {
		envs[r.EnvironmentID] = fromEnvConfig(r)
	}
	hosts := map[uuid.UUID]configs.Record{}
	if len(hostIDs) > 0 {
		hostRows, err := q.ListHostConfigsOfType(ctx, sqlcdb.ListHostConfigsOfTypeParams{HostIds: hostIDs, ConfigType: configType})
		if err != nil {
			return nil, fmt.Errorf("postgres: read host configs: %w", err)
		}
		for _, r := range hostRows {
			hosts[r.HostID] = fromHostConfig(r)
		}
	}
	// Each Current gets its own copies, as readCurrent's callers do.
	lookup := func(m map[uuid.UUID]configs.Record, id uuid.UUID) *configs.Record {
		rec, ok := m[id]
		if !ok {
			return nil
		}
		return &rec
	}
	out := make([]configs.Current, len(targets))
	for i, t := range targets {
		out[i] = configs.Current{Target: t}
		if t.Scope == protocol.ScopeEnvironment {
			out[i].Row = lookup(envs, t.EnvironmentID)
			continue
		}
		out[i].Env = lookup(envs, t.EnvironmentID)
		out[i].Row = lookup(hosts, t.HostID)
	}
	return out, nil
}
