package resolve

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// ResolveSets resolves the hosts of many agents (a batch of fetches) into their distinct effective
// configs and the distinct sets those form, each set with the hosts that hold it: the contract
// delivery builds its replies from without grouping hosts again.
//
// Cost: one query reads the hosts, their own rows and the versions of their environments' rows
// (Store.FetchRows). Environment-level configs come from the environment cache when it holds the
// current version, else from one more query for the environments that changed; they are merged once
// per version, not per host or per batch. So a batch of hosts without overrides costs one indexed
// query whatever its size, and nothing else in the database.
//
// Configs are numbered in order of first use by the sets, so the configs of the first k sets are a
// prefix of Configs (the NATS adapter relies on it to cut a reply to the max payload).
func (r *Resolver) ResolveSets(ctx context.Context, req protocol.ResolveSetsRequest) (protocol.ResolveSetsReply, error) {
	if req.Contract != protocol.ResolveSetsContract {
		return protocol.ResolveSetsReply{}, fmt.Errorf("%w: request of contract %d, this resolver speaks %d", ErrContractMismatch, req.Contract, protocol.ResolveSetsContract)
	}
	ids, err := agentIDs(req.AgentIDs)
	if err != nil {
		return protocol.ResolveSetsReply{}, err
	}
	types, err := requestTypes(req.Types)
	if err != nil {
		return protocol.ResolveSetsReply{}, err
	}
	rows, err := r.store.FetchRows(ctx, ids, types)
	if err != nil {
		return protocol.ResolveSetsReply{}, fmt.Errorf("resolve sets: read %d hosts: %w", len(ids), err)
	}
	envs, err := r.environments(ctx, rows.EnvironmentVersions, types)
	if err != nil {
		return protocol.ResolveSetsReply{}, err
	}
	staged, err := r.stagedLayers(ctx, rows.Hosts)
	if err != nil {
		return protocol.ResolveSetsReply{}, err
	}

	byAgent := make(map[string]*FetchHost, len(rows.Hosts))
	for i := range rows.Hosts {
		byAgent[rows.Hosts[i].Host.AgentID] = &rows.Hosts[i]
	}
	reply := protocol.ResolveSetsReply{Contract: protocol.ResolveSetsContract, Configs: []protocol.EffectiveConfig{}, Sets: []protocol.ConfigSet{},
		TrustedKeys: r.trusted}
	var pending []pendingStatement   // signing: one per entry of reply.Configs, by index
	var found []Host                 // signing: the hosts of the reply, for their identity statements
	envConfig := map[StagedKey]int{} // environment id, type, version -> index in Configs
	envSet := map[string]int{}       // environment id (+ staged versions) -> its set of hosts without a row of their own
	for _, id := range ids {
		h, ok := byAgent[id]
		if !ok {
			reply.Missing = append(reply.Missing, id)
			continue
		}
		host := protocol.SetHost{HostID: h.Host.ID, AgentID: h.Host.AgentID}
		found = append(found, h.Host)
		shared := len(h.Overrides) == 0
		setKey := h.Host.EnvironmentID + stagedSignature(h.Staged)
		if n, ok := envSet[setKey]; ok && shared {
			reply.Sets[n].Hosts = append(reply.Sets[n].Hosts, host)
			continue
		}
		set := protocol.ConfigSet{ClientID: h.Host.ClientID, EnvironmentID: h.Host.EnvironmentID,
			Configs: make(map[string]int, len(types)), Hosts: []protocol.SetHost{host}}
		for _, t := range types {
			env, hasEnv := envs[h.Host.EnvironmentID][t]
			if v, ok := h.Staged[t]; ok {
				// A staged rollout gives this host its own environment layer of the type.
				env, hasEnv = staged[StagedKey{EnvironmentID: h.Host.EnvironmentID, ConfigType: t, Version: v}], true
			}
			over, hasHost := h.Overrides[t]
			switch {
			case hasHost:
				ec, err := effective(h.Host, t, env.layer, over, false)
				if err != nil {
					return protocol.ResolveSetsReply{}, err
				}
				set.Configs[t] = len(reply.Configs)
				reply.Configs = append(reply.Configs, ec)
				pending = append(pending, pendingStatement{clientID: h.Host.ClientID,
					key: StatementKey{Scope: scopeOf(h.Host, true), ConfigType: t, Version: ec.Version}})
			case hasEnv:
				k := StagedKey{EnvironmentID: h.Host.EnvironmentID, ConfigType: t, Version: env.layer.Version}
				n, ok := envConfig[k]
				if !ok {
					n = len(reply.Configs)
					envConfig[k] = n
					reply.Configs = append(reply.Configs, env.effective)
					pending = append(pending, pendingStatement{clientID: h.Host.ClientID,
						key: StatementKey{Scope: scopeOf(h.Host, false), ConfigType: t, Version: env.effective.Version}})
				}
				set.Configs[t] = n
			}
		}
		if shared {
			envSet[setKey] = len(reply.Sets)
		}
		reply.Sets = append(reply.Sets, set)
	}
	if err := r.signSets(ctx, &reply, pending, found); err != nil {
		return protocol.ResolveSetsReply{}, fmt.Errorf("resolve sets: %w", err)
	}
	return reply, nil
}

// signSets attaches statements to a sets reply when signing is on: each distinct config gets the
// statement of its (scope, type, version), read from the store or signed once and stored, so a config
// shared by a whole environment is signed once for all its hosts; each host gets its identity
// statement. pending[i] is the key of reply.Configs[i]; found are the reply's hosts.
func (r *Resolver) signSets(ctx context.Context, reply *protocol.ResolveSetsReply, pending []pendingStatement, found []Host) error {
	if r.notary == nil {
		return nil
	}
	for i := range pending {
		// Entries of the environment cache are copied into the reply, so the statement is set on
		// the reply's copy and never on the cached entry.
		pending[i].ec = &reply.Configs[i]
	}
	if err := r.notary.attach(ctx, pending); err != nil {
		return err
	}
	ids, err := r.notary.identities(ctx, found)
	if err != nil {
		return err
	}
	for i := range reply.Sets {
		for j := range reply.Sets[i].Hosts {
			reply.Sets[i].Hosts[j].Identity = ids[reply.Sets[i].Hosts[j].HostID]
		}
	}
	return nil
}

// environments returns the rows (and environment-level effective configs) of the given environments
// at the given versions: from the cache where it holds exactly those versions, the rest read in one
// query and cached.
func (r *Resolver) environments(ctx context.Context, versions map[string]map[string]int64, types []string) (map[string]map[string]envEntry, error) {
	out := make(map[string]map[string]envEntry, len(versions))
	var stale []string
	for envID, rows := range versions {
		entries := make(map[string]envEntry, len(rows))
		for t, v := range rows {
			e, ok := r.envs.get(envKey{EnvironmentID: envID, ConfigType: t}, v)
			if !ok {
				stale = append(stale, envID)
				break
			}
			entries[t] = e
		}
		out[envID] = entries
	}
	if len(stale) == 0 {
		r.envHits.Add(int64(len(versions)))
		return out, nil
	}
	r.envHits.Add(int64(len(versions) - len(stale)))
	r.envMisses.Add(int64(len(stale)))
	slices.Sort(stale)
	read, err := r.store.EnvironmentRows(ctx, stale, types)
	if err != nil {
		return nil, fmt.Errorf("resolve sets: read %d environments: %w", len(stale), err)
	}
	for _, envID := range stale {
		// What the second read returns may be newer than the versions the first one saw (a write in
		// between): the newer rows are served, as a fetch a moment later would.
		entries := make(map[string]envEntry, len(read[envID]))
		for _, t := range slices.Sorted(maps.Keys(read[envID])) {
			row := read[envID][t]
			eff, err := agentconfig.Resolve(t, row, agentconfig.Layer{})
			if err != nil {
				return nil, fmt.Errorf("resolve sets: merge %s of environment %s: %w", t, envID, err)
			}
			ec, err := effectiveConfig(eff, false)
			if err != nil {
				return nil, fmt.Errorf("resolve sets: %s of environment %s: %w", t, envID, err)
			}
			e := envEntry{layer: row, effective: ec}
			r.envs.put(envKey{EnvironmentID: envID, ConfigType: t}, e)
			entries[t] = e
		}
		out[envID] = entries
	}
	return out, nil
}

// stagedLayers returns the staged environment layers the hosts resolve (and their environment-level
// effective configs): from the environment cache, keyed by version, where it holds them; the rest read
// in one query and cached. A version names one content for good, so an entry never goes stale.
func (r *Resolver) stagedLayers(ctx context.Context, hosts []FetchHost) (map[StagedKey]envEntry, error) {
	out := map[StagedKey]envEntry{}
	var missing []StagedKey
	for _, h := range hosts {
		for t, v := range h.Staged {
			k := StagedKey{EnvironmentID: h.Host.EnvironmentID, ConfigType: t, Version: v}
			if _, ok := out[k]; ok || slices.Contains(missing, k) {
				continue
			}
			if e, ok := r.envs.get(stagedCacheKey(k), v); ok {
				out[k] = e
				continue
			}
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	read, err := r.store.StagedLayers(ctx, missing)
	if err != nil {
		return nil, fmt.Errorf("resolve sets: read %d staged layers: %w", len(missing), err)
	}
	for _, k := range missing {
		row, ok := read[k]
		if !ok {
			return nil, fmt.Errorf("resolve sets: staged layer %d of %s of environment %s not found", k.Version, k.ConfigType, k.EnvironmentID)
		}
		e, err := envEntryOf(k.EnvironmentID, k.ConfigType, row)
		if err != nil {
			return nil, err
		}
		r.envs.put(stagedCacheKey(k), e)
		out[k] = e
	}
	return out, nil
}

// stagedCacheKey is the environment cache's key of a staged layer: its own slot per version.
func stagedCacheKey(k StagedKey) envKey {
	return envKey{EnvironmentID: k.EnvironmentID, ConfigType: k.ConfigType, Stage: strconv.FormatInt(k.Version, 10)}
}

// stagedSignature distinguishes the sets of an environment's hosts by the staged layers they resolve.
func stagedSignature(staged map[string]int64) string {
	if len(staged) == 0 {
		return ""
	}
	var b strings.Builder
	for _, t := range slices.Sorted(maps.Keys(staged)) {
		b.WriteString("\x00")
		b.WriteString(t)
		b.WriteString("=")
		b.WriteString(strconv.FormatInt(staged[t], 10))
	}
	return b.String()
}

// envEntryOf merges an environment-level row into its cache entry.
func envEntryOf(envID, t string, row agentconfig.Layer) (envEntry, error) {
	eff, err := agentconfig.Resolve(t, row, agentconfig.Layer{})
	if err != nil {
		return envEntry{}, fmt.Errorf("resolve sets: merge %s of environment %s: %w", t, envID, err)
	}
	ec, err := effectiveConfig(eff, false)
	if err != nil {
		return envEntry{}, fmt.Errorf("resolve sets: %s of environment %s: %w", t, envID, err)
	}
	return envEntry{layer: row, effective: ec}, nil
}

// EnvCacheStats is how often ResolveSets found an environment's rows in the cache at their current
// versions (hits) and how often it read them from the database (misses), counted per environment of
// a request.
type EnvCacheStats struct {
	Hits, Misses int64
	Entries      int
}

// EnvCacheStats returns the environment cache's counts so far.
func (r *Resolver) EnvCacheStats() EnvCacheStats {
	return EnvCacheStats{Hits: r.envHits.Load(), Misses: r.envMisses.Load(), Entries: r.envs.len()}
}

// agentIDs validates the agent ids of a request, folding duplicates (first occurrence wins the order).
func agentIDs(requested []string) ([]string, error) {
	switch {
	case len(requested) == 0:
		return nil, fmt.Errorf("%w: agent_ids is required", ErrInvalidRequest)
	case len(requested) > protocol.MaxResolveAgents:
		return nil, fmt.Errorf("%w: at most %d agent_ids per request", ErrInvalidRequest, protocol.MaxResolveAgents)
	}
	ids := make([]string, 0, len(requested))
	seen := make(map[string]bool, len(requested))
	for _, id := range requested {
		if !protocol.ValidAgentID(id) {
			return nil, fmt.Errorf("%w: agent_ids must be 1-128 letters, digits, '-' or '_'", ErrInvalidRequest)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}
