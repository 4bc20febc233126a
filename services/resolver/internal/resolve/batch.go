package resolve

import (
	"context"
	"errors"
	"fmt"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/libs/protocol"
)

// ResolveBatch resolves one config type for one page of an environment's hosts, from one read of the
// environment's row and one read of the page's hosts joined with their overrides; the merges happen in
// memory. The environment's effective config is sent once; only hosts with a row of their own (an
// override or a tombstone) carry a result. Fitting the reply into a message is the transport's
// business: it may cut the page short and move NextAfter back.
func (r *Resolver) ResolveBatch(ctx context.Context, req protocol.ResolveBatchRequest) (protocol.ResolveBatchReply, error) {
	q, limit, err := r.batchQuery(req)
	if err != nil {
		return protocol.ResolveBatchReply{}, err
	}
	env, err := r.store.EnvironmentLayer(ctx, q.EnvironmentID, q.ConfigType)
	if errors.Is(err, ErrNotFound) {
		return protocol.ResolveBatchReply{}, fmt.Errorf("%w: environment %s", ErrNotFound, q.EnvironmentID)
	}
	if err != nil {
		return protocol.ResolveBatchReply{}, fmt.Errorf("resolve batch: environment %s: %w", q.EnvironmentID, err)
	}
	envConfig := protocol.EffectiveConfig{ConfigType: q.ConfigType}
	if env.HasRow {
		eff, err := agentconfig.Resolve(q.ConfigType, env.Layer, agentconfig.Layer{})
		if err != nil {
			return protocol.ResolveBatchReply{}, fmt.Errorf("resolve batch: %s of environment %s: %w", q.ConfigType, q.EnvironmentID, err)
		}
		if envConfig, err = effectiveConfig(eff, false); err != nil {
			return protocol.ResolveBatchReply{}, err
		}
	}

	// One host more than the page tells whether another page follows.
	q.Limit = limit + 1
	hosts, err := r.store.HostPage(ctx, q)
	if err != nil {
		return protocol.ResolveBatchReply{}, fmt.Errorf("resolve batch: hosts of environment %s: %w", q.EnvironmentID, err)
	}

	reply := protocol.ResolveBatchReply{
		EnvironmentID: q.EnvironmentID,
		ClientID:      env.ClientID,
		ConfigType:    q.ConfigType,
		Environment:   envConfig,
		Hosts:         make([]protocol.BatchHost, 0, min(len(hosts), limit)),
	}
	envScoped := map[int]bool{} // hosts whose result is a staged environment layer alone
	for i, h := range hosts {
		if i == limit {
			reply.NextAfter = reply.Hosts[len(reply.Hosts)-1].HostID
			break
		}
		bh := protocol.BatchHost{HostID: h.HostID, AgentID: h.AgentID}
		if h.Staged != nil {
			// A staged rollout gives this host its own environment layer: its result is its own,
			// signed in the environment's scope unless an override merges into it.
			var over agentconfig.Layer
			if h.Override != nil {
				over = *h.Override
			}
			eff, err := agentconfig.Resolve(q.ConfigType, *h.Staged, over)
			if err != nil {
				return protocol.ResolveBatchReply{}, fmt.Errorf("resolve batch: merge %s for host %s: %w", q.ConfigType, h.HostID, err)
			}
			ec, err := effectiveConfig(eff, false)
			if err != nil {
				return protocol.ResolveBatchReply{}, err
			}
			bh.Override = &ec
			if h.Override == nil {
				envScoped[len(reply.Hosts)] = true
			}
		} else if h.Override != nil {
			eff, err := agentconfig.Resolve(q.ConfigType, env.Layer, *h.Override)
			if err != nil {
				return protocol.ResolveBatchReply{}, fmt.Errorf("resolve batch: merge %s for host %s: %w", q.ConfigType, h.HostID, err)
			}
			ec, err := effectiveConfig(eff, false)
			if err != nil {
				return protocol.ResolveBatchReply{}, err
			}
			bh.Override = &ec
		}
		reply.Hosts = append(reply.Hosts, bh)
	}
	if err := r.signBatch(ctx, &reply, envScoped); err != nil {
		return protocol.ResolveBatchReply{}, fmt.Errorf("resolve batch: %w", err)
	}
	return reply, nil
}

// signBatch attaches statements to a page when signing is on: the environment's config in the
// environment's scope (one statement for every host that runs it), each override in its agent's, and
// a staged environment layer without an override (envScoped, by index in Hosts) in the environment's.
func (r *Resolver) signBatch(ctx context.Context, reply *protocol.ResolveBatchReply, envScoped map[int]bool) error {
	if r.notary == nil {
		return nil
	}
	var pending []pendingStatement
	if reply.Environment.Version > 0 {
		pending = append(pending, pendingStatement{clientID: reply.ClientID, ec: &reply.Environment,
			key: StatementKey{Scope: signing.EnvironmentScope(reply.EnvironmentID), ConfigType: reply.ConfigType, Version: reply.Environment.Version}})
	}
	for i := range reply.Hosts {
		h := &reply.Hosts[i]
		if h.Override == nil {
			continue
		}
		scope := signing.AgentScope(h.AgentID)
		if envScoped[i] {
			scope = signing.EnvironmentScope(reply.EnvironmentID)
		}
		pending = append(pending, pendingStatement{clientID: reply.ClientID, ec: h.Override,
			key: StatementKey{Scope: scope, ConfigType: reply.ConfigType, Version: h.Override.Version}})
	}
	return r.notary.attach(ctx, pending)
}

// batchQuery validates req and turns it into the store query and the page size.
func (r *Resolver) batchQuery(req protocol.ResolveBatchRequest) (HostPageQuery, int, error) {
	envID, err := parseID("environment_id", req.EnvironmentID)
	if err != nil {
		return HostPageQuery{}, 0, err
	}
	if req.ConfigType == "" {
		return HostPageQuery{}, 0, fmt.Errorf("%w: config_type is required", ErrInvalidRequest)
	}
	if !agentconfig.Known(req.ConfigType) {
		return HostPageQuery{}, 0, fmt.Errorf("%w: unknown config type %q", ErrInvalidRequest, truncate(req.ConfigType))
	}
	q := HostPageQuery{EnvironmentID: envID, ConfigType: req.ConfigType, OnlineSince: req.OnlineSince}
	if req.OnlineSince != nil {
		q.OnlineAt = req.OnlineAt
	}
	if req.After != "" {
		if q.After, err = parseID("after", req.After); err != nil {
			return HostPageQuery{}, 0, err
		}
	}
	if len(req.HostIDs) > 0 {
		q.HostIDs = make([]string, len(req.HostIDs))
		for i, id := range req.HostIDs {
			if q.HostIDs[i], err = parseID("host_ids", id); err != nil {
				return HostPageQuery{}, 0, err
			}
		}
	}
	limit := req.Limit
	switch {
	case limit < 0:
		return HostPageQuery{}, 0, fmt.Errorf("%w: limit must not be negative", ErrInvalidRequest)
	case limit == 0, limit > r.maxPage:
		limit = r.maxPage
	}
	return q, limit, nil
}
