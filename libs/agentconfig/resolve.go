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
	eff := Effective{
		ConfigType:         configType,
		Version:            max(env.Version, host.Version),
		EnvironmentVersion: env.Version,
		HostVersion:        host.Version,
		Provenance:         Provenance{Entries: []ProvenanceEntry{}},
	}
	hasEnv, hasHost := !IsNull(env.Data), !IsNull(host.Data)
	switch {
	case hasEnv && hasHost:
		eff.Source = SourceMerged
	case hasEnv:
		eff.Source = SourceEnvironment
	case hasHost:
		eff.Source = SourceHostOverride
	default:
		return eff, nil
	}
	data, prov, err := Merge(configType, env.Data, host.Data)
	if err != nil {
		return Effective{}, err
	}
	eff.Data, eff.Provenance = data, prov
	return eff, nil
}
