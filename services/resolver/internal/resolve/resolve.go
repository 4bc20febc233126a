// Package resolve computes hosts' effective configs: it merges the environment default of each config
// type with the host's override (libs/agentconfig does the type-specific merge) and answers the
// resolver's use cases: one host with all or some types (Resolve); a batch of agents' fetches as the
// distinct configs and the distinct sets they form, each with its hosts (ResolveSets); and one type
// across a page of an environment's hosts, for the fan-out of a config-change event, into the same sets
// (ResolvePush). Those two are the resolve_sets contract delivery builds fetch replies and pushed
// commands from, without grouping hosts again; environment-level configs are merged once per row
// version (the environment cache). It reads rows through the Store port and knows nothing of SQL or
// NATS.
package resolve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// Domain errors; the NATS edge maps them to protocol error codes. Anything else is internal.
var (
	// ErrNotFound: the host (or environment) does not exist or the host is revoked.
	ErrNotFound = errors.New("not found")
	// ErrInvalidRequest: the request is malformed (bad id, unknown config type, bad paging).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrContractMismatch: the request is of another contract version than this resolver speaks (a
	// rolling upgrade in progress); the caller retries, by then talking to a resolver of its version.
	ErrContractMismatch = errors.New("contract mismatch")
	// ErrUnavailable: the store cannot be reached or takes no work right now (a database outage);
	// the same request may succeed later. Store adapters wrap their outages with it.
	ErrUnavailable = errors.New("store unavailable")
)

// DefaultMaxPage is the default and maximum number of hosts in one push page. With UUID host and agent
// ids a host without an override costs about 100 bytes of JSON, so a full page of them stays well under
// NATS's default 1 MiB max payload; pages with large overrides are cut earlier by the byte budget.
const DefaultMaxPage = 5000

// maxTypes bounds the Types list of one request (there are far fewer registered types; duplicates are
// folded), so a hostile request cannot make the resolver loop over a huge list.
const maxTypes = 256

// Options tune a Resolver.
type Options struct {
	// MaxPage caps the hosts of one push page; 0 means DefaultMaxPage.
	MaxPage int
	// Signer, when set, turns signing on: every effective config of a sets or push reply carries
	// its signed statement and every host of a sets reply its identity statement. Statements needs
	// to be set with it.
	Signer     Signer
	Statements StatementStore
	// SignObserver, if set, counts the signatures made.
	SignObserver SignObserver
	// TrustedKeys, if set, is the signed trusted-key list every sets reply carries (key rotation).
	TrustedKeys *protocol.Signed
	// EnvCacheEntries bounds the environment cache of ResolveSets; 0 means DefaultEnvCacheEntries.
	EnvCacheEntries int
}

// Resolver answers resolve requests from the rows its Store reads.
type Resolver struct {
	store   Store
	maxPage int
	notary  *notary // nil: signing off
	trusted *protocol.Signed
	envs    *envCache

	envHits, envMisses atomic.Int64
}

// New returns a Resolver reading through store.
func New(store Store, opts Options) *Resolver {
	if opts.MaxPage <= 0 {
		opts.MaxPage = DefaultMaxPage
	}
	r := &Resolver{store: store, maxPage: opts.MaxPage, envs: newEnvCache(opts.EnvCacheEntries), trusted: opts.TrustedKeys}
	if opts.Signer != nil {
		r.notary = &notary{signer: opts.Signer, store: opts.Statements, observer: opts.SignObserver}
	}
	return r
}

// Resolve returns the effective configs of one host, for the requested types or every registered type.
// A type appears in the reply when it has a row at either level (a tombstone-only type has null data and
// the tombstone's version, so an agent can drop it). With Explain each config carries its provenance.
// The host and its rows are read in one query.
func (r *Resolver) Resolve(ctx context.Context, req protocol.ResolveRequest) (protocol.ResolveReply, error) {
	types, err := requestTypes(req.Types)
	if err != nil {
		return protocol.ResolveReply{}, err
	}
	hl, err := r.lookupHost(ctx, req, types)
	if err != nil {
		return protocol.ResolveReply{}, err
	}
	return hostReply(hl, types, req.Explain)
}

// hostReply merges hl's rows of types into its reply.
func hostReply(hl HostLayers, types []string, explain bool) (protocol.ResolveReply, error) {
	configs := make(map[string]protocol.EffectiveConfig, len(types))
	for _, t := range types {
		env, hasEnv := hl.Layers.Environment[t]
		over, hasHost := hl.Layers.Host[t]
		if !hasEnv && !hasHost {
			continue
		}
		ec, err := effective(hl.Host, t, env, over, explain)
		if err != nil {
			return protocol.ResolveReply{}, err
		}
		configs[t] = ec
	}
	return protocol.ResolveReply{Host: hostRef(hl.Host), Configs: configs}, nil
}

// effective merges one type's rows of host.
func effective(host Host, t string, env, over agentconfig.Layer, explain bool) (protocol.EffectiveConfig, error) {
	eff, err := agentconfig.Resolve(t, env, over)
	if err != nil {
		return protocol.EffectiveConfig{}, fmt.Errorf("resolve: merge %s for host %s: %w", t, host.ID, err)
	}
	ec, err := effectiveConfig(eff, explain)
	if err != nil {
		return protocol.EffectiveConfig{}, fmt.Errorf("resolve: %s for host %s: %w", t, host.ID, err)
	}
	return ec, nil
}

func hostRef(h Host) protocol.HostRef {
	return protocol.HostRef{HostID: h.ID, AgentID: h.AgentID, ClientID: h.ClientID, EnvironmentID: h.EnvironmentID}
}

// lookupHost reads the host named by req (host_id or agent_id) with its rows of types.
func (r *Resolver) lookupHost(ctx context.Context, req protocol.ResolveRequest, types []string) (HostLayers, error) {
	switch {
	case req.HostID != "" && req.AgentID != "":
		return HostLayers{}, fmt.Errorf("%w: set host_id or agent_id, not both", ErrInvalidRequest)
	case req.HostID != "":
		id, err := parseID("host_id", req.HostID)
		if err != nil {
			return HostLayers{}, err
		}
		hl, err := r.store.LayersByHostID(ctx, id, types)
		if errors.Is(err, ErrNotFound) {
			return HostLayers{}, fmt.Errorf("%w: host %s", ErrNotFound, id)
		}
		if err != nil {
			return HostLayers{}, fmt.Errorf("resolve: host %s: %w", id, err)
		}
		return hl, nil
	case req.AgentID != "":
		if !protocol.ValidAgentID(req.AgentID) {
			return HostLayers{}, fmt.Errorf("%w: agent_id must be 1-128 letters, digits, '-' or '_'", ErrInvalidRequest)
		}
		hl, err := r.store.LayersByAgentID(ctx, req.AgentID, types)
		if errors.Is(err, ErrNotFound) {
			return HostLayers{}, fmt.Errorf("%w: agent %s", ErrNotFound, req.AgentID)
		}
		if err != nil {
			return HostLayers{}, fmt.Errorf("resolve: agent %s: %w", req.AgentID, err)
		}
		return hl, nil
	default:
		return HostLayers{}, fmt.Errorf("%w: host_id or agent_id is required", ErrInvalidRequest)
	}
}

// requestTypes validates the requested types (folding duplicates, keeping order) or returns every
// registered type when none is requested.
func requestTypes(requested []string) ([]string, error) {
	if len(requested) == 0 {
		return agentconfig.TypeNames(), nil
	}
	if len(requested) > maxTypes {
		return nil, fmt.Errorf("%w: at most %d types per request", ErrInvalidRequest, maxTypes)
	}
	types := make([]string, 0, len(requested))
	for _, t := range requested {
		if !agentconfig.Known(t) {
			return nil, fmt.Errorf("%w: unknown config type %q", ErrInvalidRequest, truncate(t))
		}
		if !slices.Contains(types, t) {
			types = append(types, t)
		}
	}
	return types, nil
}

// parseID checks that id is a UUID and returns its canonical form.
func parseID(field, id string) (string, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return "", fmt.Errorf("%w: %s must be a UUID", ErrInvalidRequest, field)
	}
	return u.String(), nil
}

// effectiveConfig converts a merge result to its wire form.
func effectiveConfig(eff agentconfig.Effective, explain bool) (protocol.EffectiveConfig, error) {
	ec := protocol.EffectiveConfig{
		ConfigType:         eff.ConfigType,
		ConfigData:         eff.Data,
		Version:            eff.Version,
		Source:             eff.Source,
		EnvironmentVersion: eff.EnvironmentVersion,
		HostVersion:        eff.HostVersion,
	}
	if explain {
		p, err := json.Marshal(eff.Provenance)
		if err != nil {
			return protocol.EffectiveConfig{}, fmt.Errorf("encode provenance: %w", err)
		}
		ec.Provenance = p
	}
	return ec, nil
}

// truncate shortens a client-supplied value quoted in an error message.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
