package resolve

import (
	"context"
	"errors"
	"fmt"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// ResolvePush resolves one config type for one page of an environment's hosts (the fan-out of a
// config-change event) into the resolve_sets contract: the distinct effective configs of the page and
// the distinct sets they form, each with its hosts, so delivery injects and encodes once per set and
// never groups hosts itself. The page costs one read of the environment's row and one read of the
// page's hosts joined with their rows of the type; the environment's config is merged once per version
// (the environment cache), each host row on top of it.
//
// With EnvironmentVersion set (an environment-scope event at that version) only the hosts whose
// environment layer resolves to that version are answered: the others are not changed by the event. A
// page may so hold fewer hosts than it read; NextAfter still moves past every host read. Fitting the
// reply into a message is the transport's business: it may cut the page short and move NextAfter back.
func (r *Resolver) ResolvePush(ctx context.Context, req protocol.ResolvePushRequest) (protocol.ResolveSetsReply, error) {
	if err := checkContract(req.Contract); err != nil {
		return protocol.ResolveSetsReply{}, err
	}
	q, limit, err := r.pushQuery(req)
	if err != nil {
		return protocol.ResolveSetsReply{}, err
	}
	env, err := r.store.EnvironmentLayer(ctx, q.EnvironmentID, q.ConfigType)
	if errors.Is(err, ErrNotFound) {
		return protocol.ResolveSetsReply{}, fmt.Errorf("%w: environment %s", ErrNotFound, q.EnvironmentID)
	}
	if err != nil {
		return protocol.ResolveSetsReply{}, fmt.Errorf("resolve push: environment %s: %w", q.EnvironmentID, err)
	}
	envs := map[string]envEntry{}
	if env.HasRow {
		e, err := r.environmentEntry(q.EnvironmentID, q.ConfigType, env.Layer)
		if err != nil {
			return protocol.ResolveSetsReply{}, err
		}
		envs[q.ConfigType] = e
	}

	// One host more than the page tells whether another page follows.
	q.Limit = limit + 1
	hosts, err := r.store.HostPage(ctx, q)
	if err != nil {
		return protocol.ResolveSetsReply{}, fmt.Errorf("resolve push: hosts of environment %s: %w", q.EnvironmentID, err)
	}
	b := r.newSetBuilder([]string{q.ConfigType}, false)
	b.envHosts = min(len(hosts), limit)          // one environment: most of the page is its set
	own := make(map[string]agentconfig.Layer, 1) // read only by add, reused across hosts
	for i, h := range hosts {
		if i == limit {
			b.reply.NextAfter = hosts[i-1].HostID
			break
		}
		// The environment layer is the environment's row, or the host's own where a staged rollout
		// gives it one (a stage start's event names that version: only the stage's hosts are pushed).
		hostEnvs, layer, staged := envs, env.Layer.Version, ""
		if h.Staged != nil {
			k := StagedKey{EnvironmentID: q.EnvironmentID, ConfigType: q.ConfigType, Version: h.Staged.Version}
			e, err := r.stagedEntry(k, *h.Staged)
			if err != nil {
				return protocol.ResolveSetsReply{}, err
			}
			hostEnvs, layer, staged = map[string]envEntry{q.ConfigType: e}, h.Staged.Version, stagedSignature(map[string]int64{q.ConfigType: h.Staged.Version})
		}
		if req.EnvironmentVersion != 0 && layer != req.EnvironmentVersion {
			continue
		}
		host := Host{ID: h.HostID, AgentID: h.AgentID, ClientID: env.ClientID, EnvironmentID: q.EnvironmentID}
		clear(own)
		if h.Override != nil {
			own[q.ConfigType] = *h.Override
		}
		if err := b.add(host, own, hostEnvs, staged); err != nil {
			return protocol.ResolveSetsReply{}, err
		}
	}
	// Commands carry config statements only: hosts' identities travel with fetches.
	if err := r.signSets(ctx, &b.reply, b.pending, b.found, nil); err != nil {
		return protocol.ResolveSetsReply{}, fmt.Errorf("resolve push: %w", err)
	}
	return b.reply, nil
}

// environmentEntry returns the environment-level entry of one row: from the cache when it holds the
// row's version, else merged and cached.
func (r *Resolver) environmentEntry(envID, configType string, row agentconfig.Layer) (envEntry, error) {
	k := envKey{EnvironmentID: envID, ConfigType: configType}
	if e, ok := r.envs.get(k, row.Version); ok {
		return e, nil
	}
	eff, err := agentconfig.Resolve(configType, row, agentconfig.Layer{})
	if err != nil {
		return envEntry{}, fmt.Errorf("resolve: merge %s of environment %s: %w", configType, envID, err)
	}
	ec, err := effectiveConfig(eff, false)
	if err != nil {
		return envEntry{}, fmt.Errorf("resolve: %s of environment %s: %w", configType, envID, err)
	}
	e := envEntry{layer: row, effective: ec}
	r.envs.put(k, e)
	return e, nil
}

// pushQuery validates req and turns it into the store query and the page size.
func (r *Resolver) pushQuery(req protocol.ResolvePushRequest) (HostPageQuery, int, error) {
	envID, err := parseID("environment_id", req.EnvironmentID)
	if err != nil {
		return HostPageQuery{}, 0, err
	}
	switch {
	case req.ConfigType == "":
		return HostPageQuery{}, 0, fmt.Errorf("%w: config_type is required", ErrInvalidRequest)
	case !agentconfig.Known(req.ConfigType):
		return HostPageQuery{}, 0, fmt.Errorf("%w: unknown config type %q", ErrInvalidRequest, truncate(req.ConfigType))
	case req.EnvironmentVersion < 0:
		return HostPageQuery{}, 0, fmt.Errorf("%w: environment_version must not be negative", ErrInvalidRequest)
	case len(req.HostIDs) > protocol.MaxResolveAgents:
		return HostPageQuery{}, 0, fmt.Errorf("%w: at most %d host_ids per request", ErrInvalidRequest, protocol.MaxResolveAgents)
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
