package protocol

import (
	"strings"
	"testing"
)

func TestConfigChangedValidate(t *testing.T) {
	env := ConfigChanged{EventID: "e1", Scope: ScopeEnvironment, ClientID: "c", EnvironmentID: "env", ConfigType: "labels", Version: 3}
	host := env
	host.Scope, host.HostID, host.AgentID = ScopeHost, "h", "a"
	tombstone := host
	tombstone.Deleted, tombstone.Version = true, 0
	for name, ev := range map[string]ConfigChanged{"environment": env, "host": host, "host delete at version 0": tombstone} {
		if err := ev.Validate(); err != nil {
			t.Errorf("%s event: %v", name, err)
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*ConfigChanged)
		want   string
	}{
		{"no event id", func(ev *ConfigChanged) { ev.EventID = "" }, "event_id is required"},
		{"no scope", func(ev *ConfigChanged) { ev.Scope = "" }, "unknown scope"},
		{"unknown scope", func(ev *ConfigChanged) { ev.Scope = "planted-scope" }, "unknown scope"},
		{"no environment", func(ev *ConfigChanged) { ev.EnvironmentID = "" }, "environment_id is required"},
		{"host event without host", func(ev *ConfigChanged) { ev.Scope = ScopeHost }, "host_id is required"},
		{"no config type", func(ev *ConfigChanged) { ev.ConfigType = "" }, "invalid config_type"},
		{"malformed config type", func(ev *ConfigChanged) { ev.ConfigType = "Labels; planted" }, "invalid config_type"},
		{"negative version", func(ev *ConfigChanged) { ev.Version = -1 }, "negative version"},
	} {
		ev := env
		tc.mutate(&ev)
		err := ev.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "planted") {
			t.Errorf("%s: message %q echoes a value", tc.name, err)
		}
	}
}
