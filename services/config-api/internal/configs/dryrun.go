package configs

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

// DryRun is what a write would make of the affected hosts' effective config, without writing.
type DryRun struct {
	ConfigType string
	// TotalHosts counts every affected active host; Hosts shows at most DryRunHostLimit of them.
	TotalHosts int
	Hosts      []DryRunHost
}

// DryRunHost is one affected host's effective config after the write.
type DryRunHost struct {
	HostID     uuid.UUID
	Hostname   string
	AgentID    string
	ConfigData json.RawMessage
	Source     string
	// Before is the host's effective config now (nil when it has none), for a diff.
	Before json.RawMessage
}

// DryRunPut validates data and returns the effective config the affected hosts would get if it were
// written at ref: every active host of the environment (merged with its own override), or the one host.
func (s *Service) DryRunPut(ctx context.Context, p tenancy.Principal, ref Ref, data json.RawMessage) (DryRun, error) {
	if err := Validate(ref.ConfigType, data); err != nil {
		return DryRun{}, err
	}
	out := DryRun{ConfigType: ref.ConfigType, Hosts: []DryRunHost{}}
	if ref.Scope == protocol.ScopeHost {
		h, err := s.hosts.Get(ctx, p, ref.ID)
		if err != nil {
			return DryRun{}, err
		}
		if h.RevokedAt != nil {
			return out, nil
		}
		env, err := s.liveEnvironmentData(ctx, h.EnvironmentID, ref.ConfigType)
		if err != nil {
			return DryRun{}, err
		}
		host, err := dryRunHost(ref.ConfigType, env, data, AffectedHost{HostID: h.ID, Hostname: h.Hostname, AgentID: h.AgentID})
		if err != nil {
			return DryRun{}, err
		}
		reply, err := s.resolver.Resolve(ctx, protocol.ResolveRequest{HostID: h.ID.String(), Types: []string{ref.ConfigType}})
		if err != nil {
			return DryRun{}, fmt.Errorf("configs: dry run: resolve host %s: %w", h.ID, err)
		}
		if ec, ok := reply.Configs[ref.ConfigType]; ok && !agentconfig.IsNull(ec.ConfigData) {
			host.Before = ec.ConfigData
		}
		out.TotalHosts, out.Hosts = 1, []DryRunHost{host}
		return out, nil
	}
	if _, err := s.environments.Environment(ctx, p, ref.ID); err != nil {
		return DryRun{}, err
	}
	affected, total, err := s.repo.AffectedHosts(ctx, ref.ID, ref.ConfigType, DryRunHostLimit)
	if err != nil {
		return DryRun{}, fmt.Errorf("configs: dry run: %w", err)
	}
	out.TotalHosts = total
	current, err := s.liveEnvironmentData(ctx, ref.ID, ref.ConfigType)
	if err != nil {
		return DryRun{}, err
	}
	for _, a := range affected {
		host, err := dryRunHost(ref.ConfigType, data, a.Override, a)
		if err != nil {
			return DryRun{}, err
		}
		if current != nil || a.Override != nil {
			before, err := agentconfig.Resolve(ref.ConfigType, agentconfig.Layer{Data: current}, agentconfig.Layer{Data: a.Override})
			if err != nil {
				return DryRun{}, fmt.Errorf("configs: dry run merge for host %s: %w", a.HostID, err)
			}
			if !agentconfig.IsNull(before.Data) {
				host.Before = before.Data
			}
		}
		out.Hosts = append(out.Hosts, host)
	}
	return out, nil
}

func dryRunHost(configType string, env, host json.RawMessage, a AffectedHost) (DryRunHost, error) {
	eff, err := agentconfig.Resolve(configType, agentconfig.Layer{Data: env}, agentconfig.Layer{Data: host})
	if err != nil {
		return DryRunHost{}, fmt.Errorf("configs: dry run merge for host %s: %w", a.HostID, err)
	}
	return DryRunHost{HostID: a.HostID, Hostname: a.Hostname, AgentID: a.AgentID, ConfigData: eff.Data, Source: eff.Source}, nil
}

// liveEnvironmentData is the data of an environment's live config of configType (nil: none, or
// deleted).
func (s *Service) liveEnvironmentData(ctx context.Context, environmentID uuid.UUID, configType string) (json.RawMessage, error) {
	rec, err := s.repo.EnvironmentConfig(ctx, environmentID, configType)
	switch {
	case err == nil && rec.Live():
		return rec.Data, nil
	case err != nil && !fault.Is(err, fault.NotFound):
		return nil, fmt.Errorf("configs: dry run: %w", err)
	}
	return nil, nil
}
