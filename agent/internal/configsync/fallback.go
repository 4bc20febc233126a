// Package configsync brings the agent's live config in line with the backend: at startup it fetches
// every config (after the boot jitter), populates the cache and applies each type through the
// fallback chain — NATS, then the disk cache (skipping redacted collector entries), then nothing (the
// local YAML default); afterwards it re-fetches in the background until a fetch succeeds, and again
// after every reconnect.
package configsync

import (
	"encoding/json"

	"github.com/configsync/configsync/agent/internal/configcache"
	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// Source says which link of the chain a config came from.
type Source string

// Fallback chain links, highest priority first.
const (
	SourceNATS  Source = "nats"
	SourceCache Source = "cache"
	SourceLocal Source = "local" // the local YAML default, or built-in defaults when Data is nil
)

// Resolved is the config chosen for one type.
type Resolved struct {
	ConfigType string
	Data       json.RawMessage // nil: no config at any level (built-in defaults)
	Version    int64
	Source     Source
}

// Resolver walks the fallback chain.
type Resolver struct {
	Cache *configcache.Cache
	Local map[string]json.RawMessage
}

// Resolve picks the config of one type. reply is the fetch reply, nil when the fetch failed.
//
//  1. NATS: the reply's config for the type.
//  2. Disk cache: the cached entry, unless it is redacted — a redacted collector cannot reach its
//     service, so the agent waits for the backend to deliver the secret again.
//  3. Nothing: the local YAML default (Data nil when there is none either).
//
// A successful fetch that does not carry the type means the backend has no config for it, so the
// cache is not consulted; only a type the backend could not deliver (type_errors) falls back to it.
func (r Resolver) Resolve(configType string, reply *protocol.FetchReply) Resolved {
	if reply != nil {
		if data, ok := reply.Configs[configType]; ok && !agentconfig.IsNull(data) {
			return Resolved{ConfigType: configType, Data: data, Version: reply.Versions[configType], Source: SourceNATS}
		}
	}
	useCache := reply == nil
	if reply != nil {
		_, useCache = reply.TypeErrors[configType]
	}
	if useCache {
		// Only collectors carry injected secrets, so in practice only collector entries are redacted.
		if e, ok := r.Cache.Get(configType); ok && !e.Redacted {
			return Resolved{ConfigType: configType, Data: e.Data, Version: e.Version, Source: SourceCache}
		}
	}
	return Resolved{ConfigType: configType, Data: r.Local[configType], Source: SourceLocal}
}
