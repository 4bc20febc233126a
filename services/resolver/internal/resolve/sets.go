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
	if err := checkContract(req.Contract); err != nil {
		return protocol.ResolveSetsReply{}, err
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
	b := r.newSetBuilder(types, true)
	for _, id := range ids {
		h, ok := byAgent[id]
		if !ok {
			b.reply.Missing = append(b.reply.Missing, id)
			continue
		}
		hostEnvs := envs[h.Host.EnvironmentID]
		if len(h.Staged) > 0 {
			// A staged rollout gives this host its own environment layer of these types.
			hostEnvs = maps.Clone(hostEnvs)
			if hostEnvs == nil {
				hostEnvs = map[string]envEntry{}
			}
			for t, v := range h.Staged {
				hostEnvs[t] = staged[StagedKey{EnvironmentID: h.Host.EnvironmentID, ConfigType: t, Version: v}]
			}
		}
		if err := b.add(h.Host, h.Overrides, hostEnvs, stagedSignature(h.Staged)); err != nil {
			return protocol.ResolveSetsReply{}, err
		}
	}
	if err := r.signSets(ctx, &b.reply, b.pending, b.found, rows.identities()); err != nil {
		return protocol.ResolveSetsReply{}, fmt.Errorf("resolve sets: %w", err)
	}
	return b.reply, nil
}

// setBuilder groups hosts into the distinct sets of a reply (ResolveSets, ResolvePush): hosts of an
// environment without a row of their own share one set and the environment's configs; a host with
// rows of its own gets its merged configs, in a set it shares with the hosts of identical configs when
// nothing signs (a signed host config names its agent, so it is that host's alone). Configs are
// numbered in order of first use by the sets.
type setBuilder struct {
	types      []string
	sign       bool // signing on: statements to attach, no sharing of host configs
	identities bool // signing on and the hosts' identity statements wanted (fetches)
	reply      protocol.ResolveSetsReply
	pending    []pendingStatement // signing: one per entry of reply.Configs, by index
	found      []Host             // identities: the hosts of the reply
	envConfig  map[StagedKey]int  // environment id, type, version -> index in Configs
	envSet     map[string]int     // environment id (+ staged versions) -> its set of hosts without a row of their own
	hostSet    map[string]int     // unsigned: the row versions of a host's configs -> its set
	// envHosts is the room made for the hosts of an environment's set (a push page: its size).
	envHosts int
}

func (r *Resolver) newSetBuilder(types []string, identities bool) *setBuilder {
	return &setBuilder{types: types, sign: r.notary != nil, identities: r.notary != nil && identities,
		reply: protocol.ResolveSetsReply{Contract: protocol.ResolveSetsContract, Configs: []protocol.EffectiveConfig{},
			Sets: []protocol.ConfigSet{}, TrustedKeys: r.trusted},
		envConfig: map[StagedKey]int{}, envSet: map[string]int{}}
}

// add places host, with its own rows and its environment layers' entries, in its set. staged names the
// staged rollout layers among envs (stagedSignature): hosts of an environment without rows of their own
// share a set only when they resolve the same ones.
func (b *setBuilder) add(h Host, overrides map[string]agentconfig.Layer, envs map[string]envEntry, staged string) error {
	host := protocol.SetHost{HostID: h.ID, AgentID: h.AgentID}
	if b.identities {
		b.found = append(b.found, h)
	}
	if len(overrides) == 0 {
		if n, ok := b.envSet[h.EnvironmentID+staged]; ok {
			b.reply.Sets[n].Hosts = append(b.reply.Sets[n].Hosts, host)
			return nil
		}
		b.envSet[h.EnvironmentID+staged] = len(b.reply.Sets)
		b.reply.Sets = append(b.reply.Sets, b.envOnlySet(h, host, envs))
		return nil
	}
	var key string
	if !b.sign {
		// Versions name contents: hosts with the same rows hold the same configs, merged once.
		key = contentKey(h.EnvironmentID, b.types, overrides, envs)
		if n, ok := b.hostSet[key]; ok {
			b.reply.Sets[n].Hosts = append(b.reply.Sets[n].Hosts, host)
			return nil
		}
	}
	set := protocol.ConfigSet{ClientID: h.ClientID, EnvironmentID: h.EnvironmentID,
		Configs: make(map[string]int, len(b.types)), Hosts: []protocol.SetHost{host}}
	for _, t := range b.types {
		env, hasEnv := envs[t]
		over, hasHost := overrides[t]
		switch {
		case hasHost:
			ec, err := effective(h, t, env.layer, over, false)
			if err != nil {
				return err
			}
			set.Configs[t] = len(b.reply.Configs)
			b.reply.Configs = append(b.reply.Configs, ec)
			if b.sign {
				b.pending = append(b.pending, pendingStatement{clientID: h.ClientID,
					key: StatementKey{Scope: scopeOf(h, true), ConfigType: t, Version: ec.Version}})
			}
		case hasEnv:
			set.Configs[t] = b.envIndex(h, t, env)
		}
	}
	if !b.sign {
		if b.hostSet == nil {
			b.hostSet = map[string]int{}
		}
		b.hostSet[key] = len(b.reply.Sets)
	}
	b.reply.Sets = append(b.reply.Sets, set)
	return nil
}

// envOnlySet is the set of h's environment for hosts without a row of their own.
func (b *setBuilder) envOnlySet(h Host, host protocol.SetHost, envs map[string]envEntry) protocol.ConfigSet {
	set := protocol.ConfigSet{ClientID: h.ClientID, EnvironmentID: h.EnvironmentID,
		Configs: make(map[string]int, len(b.types)), Hosts: append(make([]protocol.SetHost, 0, max(1, b.envHosts)), host)}
	for _, t := range b.types {
		if e, ok := envs[t]; ok {
			set.Configs[t] = b.envIndex(h, t, e)
		}
	}
	return set
}

// envIndex is the index of the environment-level config of type t of h's environment at e's version
// (the environment's row, or a staged rollout's layer: both signed in the environment's scope), added
// once.
func (b *setBuilder) envIndex(h Host, t string, e envEntry) int {
	k := StagedKey{EnvironmentID: h.EnvironmentID, ConfigType: t, Version: e.layer.Version}
	n, ok := b.envConfig[k]
	if !ok {
		n = len(b.reply.Configs)
		b.envConfig[k] = n
		b.reply.Configs = append(b.reply.Configs, e.effective)
		if b.sign {
			b.pending = append(b.pending, pendingStatement{clientID: h.ClientID,
				key: StatementKey{Scope: scopeOf(h, false), ConfigType: t, Version: e.effective.Version}})
		}
	}
	return n
}

// contentKey identifies a host's configs by the versions of the rows they merge: per type, the
// environment's row and the host's own. Versions come from one sequence and name contents, so equal
// keys are equal configs.
func contentKey(envID string, types []string, overrides map[string]agentconfig.Layer, envs map[string]envEntry) string {
	k := make([]byte, 0, len(envID)+len(types)*24)
	k = append(k, envID...)
	for _, t := range types {
		k = append(k, 0)
		if e, ok := envs[t]; ok {
			k = strconv.AppendInt(k, e.layer.Version, 10)
		}
		if over, ok := overrides[t]; ok {
			k = append(k, '/')
			k = strconv.AppendInt(k, over.Version, 10)
		}
	}
	return string(k)
}

// checkContract refuses a request of another contract than this resolver's (a rolling upgrade).
func checkContract(contract int) error {
	if contract != protocol.ResolveSetsContract {
		return fmt.Errorf("%w: request of contract %d, this resolver speaks %d", ErrContractMismatch, contract, protocol.ResolveSetsContract)
	}
	return nil
}

// signSets attaches statements to a sets reply when signing is on: each distinct config gets the
// statement of its (scope, type, version), read from the store or signed once and stored, so a config
// shared by a whole environment is signed once for all its hosts; each host gets its identity
// statement (known: those read with the hosts). pending[i] is the key of reply.Configs[i]; found are
// the reply's hosts.
func (r *Resolver) signSets(ctx context.Context, reply *protocol.ResolveSetsReply, pending []pendingStatement, found []Host, known map[string]*protocol.Signed) error {
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
	ids, err := r.notary.identities(ctx, found, known)
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
			e, err := r.environmentEntry(envID, t, read[envID][t])
			if err != nil {
				return nil, fmt.Errorf("resolve sets: %w", err)
			}
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
		e, err := r.stagedEntry(k, row)
		if err != nil {
			return nil, err
		}
		out[k] = e
	}
	return out, nil
}

// stagedEntry is environmentEntry for a staged rollout's layer: cached under its own key per version.
func (r *Resolver) stagedEntry(k StagedKey, row agentconfig.Layer) (envEntry, error) {
	ck := stagedCacheKey(k)
	if e, ok := r.envs.get(ck, row.Version); ok {
		return e, nil
	}
	eff, err := agentconfig.Resolve(k.ConfigType, row, agentconfig.Layer{})
	if err != nil {
		return envEntry{}, fmt.Errorf("resolve: merge staged %s of environment %s: %w", k.ConfigType, k.EnvironmentID, err)
	}
	ec, err := effectiveConfig(eff, false)
	if err != nil {
		return envEntry{}, fmt.Errorf("resolve: staged %s of environment %s: %w", k.ConfigType, k.EnvironmentID, err)
	}
	e := envEntry{layer: row, effective: ec}
	r.envs.put(ck, e)
	return e, nil
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
