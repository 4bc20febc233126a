package resolve

import (
	"context"
	"time"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// Host is a host that can receive configs (not revoked).
type Host struct {
	ID            string
	AgentID       string
	ClientID      string
	EnvironmentID string
}

// Layers are the stored rows of one host's two levels, keyed by config type. A row with nil Data is a
// tombstone (deleted, but its version still counts); a type without a row is absent from the map.
// Environment is the host's environment layer: where a staged rollout gives the host one of its own
// (rollout_layers), that layer replaces the environment's row of the type.
type Layers struct {
	Environment map[string]agentconfig.Layer
	Host        map[string]agentconfig.Layer
}

// HostLayers is a host with the rows of its two levels.
type HostLayers struct {
	Host   Host
	Layers Layers
}

// EnvironmentLayer is one environment's row of one config type. Layer is zero when there is no row.
type EnvironmentLayer struct {
	ClientID string
	Layer    agentconfig.Layer
	HasRow   bool
}

// HostPageQuery selects one page of an environment's hosts in host id order.
type HostPageQuery struct {
	EnvironmentID string
	ConfigType    string
	// HostIDs restricts the page to these hosts; nil means every host of the environment.
	HostIDs []string
	// OnlineSince keeps only hosts whose last heartbeat is at or after it; nil keeps all. With OnlineAt
	// also set, a host is kept too while it is online at OnlineAt by its own heartbeat interval
	// (protocol.Online with the window OnlineAt - OnlineSince).
	OnlineSince *time.Time
	OnlineAt    *time.Time
	// After is the host id cursor (exclusive); empty starts at the beginning.
	After string
	Limit int
}

// PageHost is one host of a page with its override row of the page's config type. Override is nil when
// the host has no row (it then takes the environment's effective config unchanged).
type PageHost struct {
	HostID   string
	AgentID  string
	Override *agentconfig.Layer
	// Staged is the host's own environment layer of the type when a staged rollout gives it one (it
	// replaces the environment's row for this host); nil otherwise.
	Staged *agentconfig.Layer
}

// FetchHost is a host of a batch of fetches with its own rows (overrides and tombstones) of the
// requested types; a type without a row is absent from Overrides.
type FetchHost struct {
	Host      Host
	Overrides map[string]agentconfig.Layer
	// Staged holds, by type, the version of the host's own environment layer where a staged rollout
	// gives it one (it replaces the environment's row for this host); its data is read by
	// Store.StagedLayers and cached by version.
	Staged map[string]int64
	// Identity is the host's stored identity statement, read with the host (nil when it has none yet:
	// the resolver then signs and stores one).
	Identity *protocol.Signed
}

// StagedKey names a staged environment layer: a version a rollout gave hosts of an environment's type.
type StagedKey struct {
	EnvironmentID string
	ConfigType    string
	Version       int64
}

// FetchRows is what a batch of fetches reads in one query: its hosts with their own rows, and for each
// of their environments the version of each of its rows (environment id -> type -> version), without
// the rows' data (the Resolver keeps that in its environment cache).
type FetchRows struct {
	Hosts               []FetchHost
	EnvironmentVersions map[string]map[string]int64
}

// identities returns the stored identity statements read with the hosts, by host id.
func (f FetchRows) identities() map[string]*protocol.Signed {
	out := make(map[string]*protocol.Signed, len(f.Hosts))
	for _, h := range f.Hosts {
		if h.Identity != nil {
			out[h.Host.ID] = h.Identity
		}
	}
	return out
}

// Store reads the config tables. Implementations return an error wrapping ErrNotFound for a host that
// does not exist or is revoked and for an environment that does not exist. IDs passed in are valid UUIDs
// and agent ids valid agent ids.
type Store interface {
	// LayersByHostID returns the host with its rows of the given types at both levels, in one query.
	LayersByHostID(ctx context.Context, hostID string, types []string) (HostLayers, error)
	// LayersByAgentID returns the host of the agent id with its rows of the given types at both levels,
	// in one query.
	LayersByAgentID(ctx context.Context, agentID string, types []string) (HostLayers, error)
	// FetchRows returns the hosts of the given agent ids (unknown and revoked ones left out) with their
	// own rows of the given types, their stored identity statements and their environments' row
	// versions, in one query.
	FetchRows(ctx context.Context, agentIDs, types []string) (FetchRows, error)
	// EnvironmentRows returns the rows of the given types of the given environments (environment id
	// -> type -> row), in one query.
	EnvironmentRows(ctx context.Context, environmentIDs, types []string) (map[string]map[string]agentconfig.Layer, error)
	// EnvironmentLayer returns the environment's row of one type, in one query.
	EnvironmentLayer(ctx context.Context, environmentID, configType string) (EnvironmentLayer, error)
	// HostPage returns up to q.Limit hosts with their overrides of q.ConfigType, in one query.
	HostPage(ctx context.Context, q HostPageQuery) ([]PageHost, error)
	// StagedLayers returns the data of the given staged environment layers, in one query.
	StagedLayers(ctx context.Context, keys []StagedKey) (map[StagedKey]agentconfig.Layer, error)
}
