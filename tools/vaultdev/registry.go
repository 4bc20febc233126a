package main

import (
	"github.com/hashicorp/vault/sdk/helper/consts"
	"github.com/hashicorp/vault/sdk/logical"
)

// builtinRegistry is the plugin catalog's view of the builtin plugins this dev Vault ships:
// Transit and AppRole only. Vault's own registry (helper/builtinplugins) links every builtin
// plugin and their cloud SDKs, which this tool neither needs nor wants to compile.
type builtinRegistry map[consts.PluginType]map[string]logical.Factory

var _ interface {
	Contains(name string, pluginType consts.PluginType) bool
	Get(name string, pluginType consts.PluginType) (func() (interface{}, error), bool)
	Keys(pluginType consts.PluginType) []string
	DeprecationStatus(name string, pluginType consts.PluginType) (consts.DeprecationStatus, bool)
} = builtinRegistry{}

func (r builtinRegistry) Contains(name string, pluginType consts.PluginType) bool {
	_, ok := r[pluginType][name]
	return ok
}

func (r builtinRegistry) Get(name string, pluginType consts.PluginType) (func() (interface{}, error), bool) {
	f, ok := r[pluginType][name]
	if !ok {
		return nil, false
	}
	return func() (interface{}, error) { return f, nil }, true
}

func (r builtinRegistry) Keys(pluginType consts.PluginType) []string {
	keys := make([]string, 0, len(r[pluginType]))
	for name := range r[pluginType] {
		keys = append(keys, name)
	}
	return keys
}

func (r builtinRegistry) DeprecationStatus(name string, pluginType consts.PluginType) (consts.DeprecationStatus, bool) {
	if !r.Contains(name, pluginType) {
		return consts.Unknown, false
	}
	return consts.Supported, true
}
