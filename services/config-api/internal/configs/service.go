package configs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

// Limits of the read models.
const (
	// DryRunHostLimit caps the hosts a dry run shows (the total is always reported).
	DryRunHostLimit = 50
	// MaxRevisions caps one page of history.
	MaxRevisions = 500
)

// Service is the config use cases.
type Service struct {
	repo         Repository
	environments Environments
	hosts        Hosts
	resolver     Resolver
	guard        *tenancy.Guard
}

// NewService returns a Service.
func NewService(repo Repository, environments Environments, hosts Hosts, resolver Resolver, guard *tenancy.Guard) *Service {
	return &Service{repo: repo, environments: environments, hosts: hosts, resolver: resolver, guard: guard}
}

// CheckType fails with a 400-class fault unless configType is registered.
func CheckType(configType string) error {
	if !agentconfig.Known(configType) {
		return fault.InvalidCode("unknown_config_type", fmt.Sprintf("unknown config type %q", configType), nil)
	}
	return nil
}

// Validate checks config data against its type's registry entry.
func Validate(configType string, data json.RawMessage) error {
	if err := CheckType(configType); err != nil {
		return err
	}
	if agentconfig.IsNull(data) {
		return fault.Invalidf("config_data is required")
	}
	err := agentconfig.Validate(configType, data)
	if err == nil {
		return nil
	}
	if errors.Is(err, agentconfig.ErrUnknownType) {
		return fault.InvalidCode("unknown_config_type", fmt.Sprintf("unknown config type %q", configType), err)
	}
	var ve *agentconfig.ValidationError
	if errors.As(err, &ve) {
		return fault.InvalidCode("invalid_config", ve.Error(), nil)
	}
	return fault.InvalidCode("invalid_config", "config_data is invalid", err)
}

// Put writes the config of ref (environment default or host override) after validating it.
func (s *Service) Put(ctx context.Context, p tenancy.Principal, ref Ref, data json.RawMessage, cond Precondition) (Record, error) {
	if err := Validate(ref.ConfigType, data); err != nil {
		return Record{}, err
	}
	return s.update(ctx, p, ref, guarded(cond, Write{Action: ActionPut, Data: data}))
}

// guarded decides a write of w: the target must be writable and cond must hold on its effective
// version.
func guarded(cond Precondition, w Write) func(Current) (Write, error) {
	return func(cur Current) (Write, error) {
		if err := writable(cur); err != nil {
			return Write{}, err
		}
		if err := cond.check(cur.Effective()); err != nil {
			return Write{}, err
		}
		return w, nil
	}
}

// Delete deletes the config of ref, keeping a tombstone with a new version so that the deletion is
// pushed and no effective version goes back. Deleting what does not exist is a NotFound.
func (s *Service) Delete(ctx context.Context, p tenancy.Principal, ref Ref, cond Precondition) (Record, error) {
	if err := CheckType(ref.ConfigType); err != nil {
		return Record{}, err
	}
	write := guarded(cond, Write{Action: ActionDelete})
	return s.update(ctx, p, ref, func(cur Current) (Write, error) {
		if !cur.Row.Live() {
			return Write{}, missingConfig(ref)
		}
		return write(cur)
	})
}

// Rollback writes the data of an earlier revision again, as a new version recorded as a rollback.
func (s *Service) Rollback(ctx context.Context, p tenancy.Principal, ref Ref, revision int64, cond Precondition) (Record, error) {
	if err := CheckType(ref.ConfigType); err != nil {
		return Record{}, err
	}
	if err := s.authorize(ctx, p, ref); err != nil {
		return Record{}, err
	}
	rev, err := s.repo.Revision(ctx, ref, revision)
	if fault.Is(err, fault.NotFound) {
		return Record{}, fault.NotFoundf("revision %d of %s not found", revision, ref.ConfigType)
	}
	if err != nil {
		return Record{}, fmt.Errorf("configs: rollback: %w", err)
	}
	if rev.NewData == nil {
		return Record{}, fault.Invalidf("revision %d deleted the config; use DELETE to delete it again", revision)
	}
	// The registry may have tightened since: the old data must still be valid.
	if err := Validate(ref.ConfigType, rev.NewData); err != nil {
		return Record{}, err
	}
	return s.update(ctx, p, ref, guarded(cond, Write{Action: ActionRollback, Data: rev.NewData}))
}

// Revisions lists the history of ref, newest first.
func (s *Service) Revisions(ctx context.Context, p tenancy.Principal, ref Ref, limit int) ([]Revision, error) {
	if err := CheckType(ref.ConfigType); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > MaxRevisions {
		limit = MaxRevisions
	}
	if err := s.authorize(ctx, p, ref); err != nil {
		return nil, err
	}
	revs, err := s.repo.Revisions(ctx, ref, limit)
	if err != nil {
		return nil, fmt.Errorf("configs: revisions: %w", err)
	}
	return revs, nil
}

// EnvironmentConfig returns the live config of one type of an environment.
func (s *Service) EnvironmentConfig(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, configType string) (Record, error) {
	if err := CheckType(configType); err != nil {
		return Record{}, err
	}
	if _, err := s.environments.Environment(ctx, p, environmentID); err != nil {
		return Record{}, err
	}
	ref := Ref{Scope: protocol.ScopeEnvironment, ID: environmentID, ConfigType: configType}
	rec, err := s.repo.EnvironmentConfig(ctx, environmentID, configType)
	if fault.Is(err, fault.NotFound) || (err == nil && !rec.Live()) {
		return Record{}, missingConfig(ref)
	}
	if err != nil {
		return Record{}, fmt.Errorf("configs: get environment config: %w", err)
	}
	return rec, nil
}

// EnvironmentConfigs lists the live configs of an environment.
func (s *Service) EnvironmentConfigs(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID) ([]Record, error) {
	if _, err := s.environments.Environment(ctx, p, environmentID); err != nil {
		return nil, err
	}
	recs, err := s.repo.EnvironmentConfigs(ctx, environmentID)
	if err != nil {
		return nil, fmt.Errorf("configs: list environment configs: %w", err)
	}
	return recs, nil
}

// Effective returns a host's effective config of one type, as the resolver merges it. With explain,
// the resolver's merge provenance is included.
func (s *Service) Effective(ctx context.Context, p tenancy.Principal, hostID uuid.UUID, configType string, explain bool) (protocol.EffectiveConfig, error) {
	if err := CheckType(configType); err != nil {
		return protocol.EffectiveConfig{}, err
	}
	reply, err := s.resolve(ctx, p, hostID, []string{configType}, explain)
	if err != nil {
		return protocol.EffectiveConfig{}, err
	}
	ec, ok := reply.Configs[configType]
	if !ok || agentconfig.IsNull(ec.ConfigData) {
		return protocol.EffectiveConfig{}, fault.NotFoundf("host %s has no %s config", hostID, configType)
	}
	ec.ConfigType = configType
	return ec, nil
}

// EffectiveAll returns every effective config of a host, by type (deleted types left out).
func (s *Service) EffectiveAll(ctx context.Context, p tenancy.Principal, hostID uuid.UUID) ([]protocol.EffectiveConfig, error) {
	return s.effectiveAll(ctx, p, hostID, false)
}

// ExplainAll is EffectiveAll with the resolver's merge provenance of every type (one resolve).
func (s *Service) ExplainAll(ctx context.Context, p tenancy.Principal, hostID uuid.UUID) ([]protocol.EffectiveConfig, error) {
	return s.effectiveAll(ctx, p, hostID, true)
}

func (s *Service) effectiveAll(ctx context.Context, p tenancy.Principal, hostID uuid.UUID, explain bool) ([]protocol.EffectiveConfig, error) {
	reply, err := s.resolve(ctx, p, hostID, nil, explain)
	if err != nil {
		return nil, err
	}
	out := make([]protocol.EffectiveConfig, 0, len(reply.Configs))
	for _, name := range agentconfig.TypeNames() {
		ec, ok := reply.Configs[name]
		if !ok || agentconfig.IsNull(ec.ConfigData) {
			continue
		}
		ec.ConfigType = name
		out = append(out, ec)
	}
	return out, nil
}

func (s *Service) resolve(ctx context.Context, p tenancy.Principal, hostID uuid.UUID, types []string, explain bool) (protocol.ResolveReply, error) {
	if _, err := s.hosts.Get(ctx, p, hostID); err != nil {
		return protocol.ResolveReply{}, err
	}
	reply, err := s.resolver.Resolve(ctx, protocol.ResolveRequest{HostID: hostID.String(), Types: types, Explain: explain})
	if err != nil {
		return protocol.ResolveReply{}, fmt.Errorf("configs: resolve host %s: %w", hostID, err)
	}
	return reply, nil
}

// update runs a write and turns a missing target into an audited NotFound.
func (s *Service) update(ctx context.Context, p tenancy.Principal, ref Ref, fn func(Current) (Write, error)) (Record, error) {
	rec, err := s.repo.Update(ctx, p.Filter(), ref, p.Name, fn)
	if errors.Is(err, ErrNoTarget) {
		return Record{}, s.guard.Missing(ctx, p, kindOf(ref), ref.ID)
	}
	if err != nil {
		return Record{}, fmt.Errorf("configs: write %s %s: %w", ref.Scope, ref.ConfigType, err)
	}
	return rec, nil
}

// authorize checks that the caller can see ref's environment or host.
func (s *Service) authorize(ctx context.Context, p tenancy.Principal, ref Ref) error {
	if ref.Scope == protocol.ScopeHost {
		_, err := s.hosts.Get(ctx, p, ref.ID)
		return err
	}
	_, err := s.environments.Environment(ctx, p, ref.ID)
	return err
}

func writable(cur Current) error {
	if cur.Target.Revoked {
		return fault.Conflictf("host %s is revoked", cur.Target.HostID)
	}
	if cur.ActiveRollout.Valid {
		return RolloutActive(cur.ActiveRollout.UUID)
	}
	return nil
}

// RolloutActive is the refusal of a write (or of a second rollout) of an environment's config type
// while the staged rollout id runs or is paused: abort or finish it first.
func RolloutActive(id uuid.UUID) error {
	return &fault.Error{Kind: fault.Conflict, Code: "rollout_active",
		Message: fmt.Sprintf("rollout %s of this config is active; abort it or let it finish first", id)}
}

func missingConfig(ref Ref) error {
	if ref.Scope == protocol.ScopeHost {
		return fault.NotFoundf("host %s has no %s override", ref.ID, ref.ConfigType)
	}
	return fault.NotFoundf("environment %s has no %s config", ref.ID, ref.ConfigType)
}

func kindOf(ref Ref) tenancy.Kind {
	if ref.Scope == protocol.ScopeHost {
		return tenancy.KindHost
	}
	return tenancy.KindEnvironment
}
