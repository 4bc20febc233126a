package agentconfig

import "encoding/json"

// Layer is one stored level of a config for a host: the environment default or the host override.
type Layer struct {
	Data    json.RawMessage // nil: no row, or a tombstone left by a deleted override
	Version int64           // 0: no row
}

// Sources of an effective config, as the spec names them.
const (
	SourceEnvironment  = "environment"
	SourceHostOverride = "host_override"
	SourceMerged       = "merged"
)

// Effective is the config a host runs for one type.
type Effective struct {
	ConfigType         string
	Data               json.RawMessage // nil when neither layer has data
	Version            int64           // max(EnvironmentVersion, HostVersion)
	Source             string          // SourceEnvironment, SourceHostOverride, SourceMerged or ""
	EnvironmentVersion int64
	HostVersion        int64
	Provenance         Provenance
}

// LayerState is what anti-entropy needs of a Layer: its version and whether it holds data (a row
// without data is a tombstone; Version 0 means no row).
type LayerState struct {
	Version int64
	Present bool
}

// ExpectedState is what a host should hold for one config type: Version, and whether it should hold
// the type at all (false: deleted at both levels, the agent must drop it).
type ExpectedState struct {
	Version int64
	Present bool
}

// ExpectedVersion is the effective version of a type from its two layers' versions (tombstones
// included): the larger one.
func ExpectedVersion(env, host int64) int64 { return max(env, host) }

// Expected is what a host should hold for one type given its two layers, without merging any data.
// Resolve follows the same rule (its Version and whether it has data), so ack-ingest's anti-entropy,
// which reads only versions, and the resolver, which merges, always agree on what a host should hold.
func Expected(env, host LayerState) ExpectedState {
	return ExpectedState{Version: ExpectedVersion(env.Version, host.Version), Present: env.Present || host.Present}
}

// Resolve applies the spec's resolution rules to the two layers of one config type:
//
//   - environment only: its data as-is, source "environment";
//   - host override only: its data as-is, source "host_override";
//   - both: Merge by the type's strategy, source "merged";
//   - neither: no data and no source.
//
// The version is max(env.Version, host.Version) in every case, tombstones included: all versions come
// from one sequence, so deleting an override still moves the host's effective version forward.
func Resolve(configType string, env, host Layer) (Effective, error) {
	if !Known(configType) {
		return Effective{}, unknownType(configType)
	}
	hasEnv, hasHost := !IsNull(env.Data), !IsNull(host.Data)
	exp := Expected(LayerState{env.Version, hasEnv}, LayerState{host.Version, hasHost})
	eff := Effective{
		ConfigType:         configType,
		Version:            exp.Version,
		EnvironmentVersion: env.Version,
		HostVersion:        host.Version,
		Provenance:         Provenance{Entries: []ProvenanceEntry{}},
	}
	if !exp.Present {
		return eff, nil
	}
	switch {
	case hasEnv && hasHost:
		eff.Source = SourceMerged
	case hasEnv:
		eff.Source = SourceEnvironment
	default:
		eff.Source = SourceHostOverride
	}
	data, prov, err := Merge(configType, env.Data, host.Data)
	if err != nil {
		return Effective{}, err
	}
	eff.Data, eff.Provenance = data, prov
	return eff, nil
}
