package agentconfig

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// The registered config types.
const (
	Collectors      = "collectors"
	Intervals       = "intervals"
	Labels          = "labels"
	ChangeDetection = "change_detection"
	LogCollection   = "log_collection"
	AgentSettings   = "agent_settings"
	WatchFiles      = "watch_files"
	Healthcheck     = "healthcheck"
	Tracing         = "tracing"
	LogShipping     = "log_shipping"
)

// Merge strategies reported in TypeInfo.MergeStrategy.
const (
	MergeShallow       = "shallow"
	MergeCollectors    = "collectors_by_type_and_name"
	MergeLabels        = "labels_static_shallow_dynamic_by_name"
	MergeLogCollection = "log_collection_files_by_name_journald_shallow"
)

// MaxConfigSize is the largest config document accepted, in bytes (256 KiB).
const MaxConfigSize = 256 << 10

// ErrUnknownType is wrapped by every error about a config type that is not registered.
var ErrUnknownType = errors.New("agentconfig: unknown config type")

func unknownType(configType string) error {
	return fmt.Errorf("%w %q", ErrUnknownType, configType)
}

// TypeInfo describes a registered config type.
type TypeInfo struct {
	Name          string
	MergeStrategy string
	Description   string
	Schema        json.RawMessage // JSON Schema, draft 2020-12
}

// configType is one entry of the registry.
type configType struct {
	name        string
	strategy    string
	description string
	root        *rule
	merge       func(m *merger, env, host int32) // mergeBy[strategy]
	schema      []byte
}

// mergeBy is the merge each strategy names.
var mergeBy = map[string]func(m *merger, env, host int32){
	MergeShallow:       mergeShallow,
	MergeCollectors:    mergeCollectors,
	MergeLabels:        mergeLabels,
	MergeLogCollection: mergeLogCollection,
}

//go:embed schemas/*.json
var schemaFiles embed.FS

var registry = func() map[string]*configType {
	types := []*configType{
		{name: Collectors, strategy: MergeCollectors, root: collectorsRule,
			description: "Metric collector definitions (e.g. MySQL, Redis, HTTP checks): a JSON array of collector objects."},
		{name: Intervals, strategy: MergeShallow, root: intervalsRule,
			description: "Polling intervals for metrics, inventory, heartbeat and processes, as duration strings."},
		{name: Labels, strategy: MergeLabels, root: labelsRule,
			description: "Static key-value labels and dynamic label generators (file, command, env)."},
		{name: ChangeDetection, strategy: MergeShallow, root: changeDetectionRule,
			description: "File change detection paths, interval and enable/disable toggle."},
		{name: LogCollection, strategy: MergeLogCollection, root: logCollectionRule,
			description: "Log file paths, journald units and collection settings."},
		{name: AgentSettings, strategy: MergeShallow, root: agentSettingsRule,
			description: "Agent-level tuning: collector timeout, memory limit, log level."},
		{name: WatchFiles, strategy: MergeShallow, root: watchFilesRule,
			description: "File watch scanner paths, exclude patterns, sensitive files and maximum file size."},
		{name: Healthcheck, strategy: MergeShallow, root: healthcheckRule,
			description: "Health check interval and timeout, in seconds."},
		{name: Tracing, strategy: MergeShallow, root: tracingRule,
			description: "Distributed-tracing toggle and trace sample ratio (0 to 1)."},
		{name: LogShipping, strategy: MergeShallow, root: logShippingRule,
			description: "Agent self-log shipping toggle and minimum level (error, warn, info, debug)."},
	}
	m := make(map[string]*configType, len(types))
	for _, t := range types {
		schema, err := schemaFiles.ReadFile("schemas/" + t.name + ".json")
		if err != nil {
			panic("agentconfig: missing embedded schema for " + t.name)
		}
		t.schema = schema
		if t.merge = mergeBy[t.strategy]; t.merge == nil {
			panic("agentconfig: no merge for strategy " + t.strategy + " of " + t.name)
		}
		m[t.name] = t
	}
	return m
}()

var typeNames = func() []string {
	names := make([]string, 0, len(registry))
	for name := range registry {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}()

// TypeNames returns the registered config type names, sorted.
func TypeNames() []string { return slices.Clone(typeNames) }

// Known reports whether configType is registered.
func Known(configType string) bool {
	_, ok := registry[configType]
	return ok
}

// Types describes every registered type, sorted by name.
func Types() []TypeInfo {
	infos := make([]TypeInfo, 0, len(typeNames))
	for _, name := range typeNames {
		t := registry[name]
		infos = append(infos, TypeInfo{
			Name:          t.name,
			MergeStrategy: t.strategy,
			Description:   t.description,
			Schema:        slices.Clone(t.schema),
		})
	}
	return infos
}
