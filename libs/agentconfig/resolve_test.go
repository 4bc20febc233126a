package agentconfig

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestResolve_EnvOnly(t *testing.T) {
	env := Layer{Data: json.RawMessage(`{"interval_seconds": 60}`), Version: 4}
	eff, err := Resolve(Healthcheck, env, Layer{})
	if err != nil {
		t.Fatal(err)
	}
	if string(eff.Data) != string(env.Data) || eff.Source != SourceEnvironment || eff.Version != 4 ||
		eff.EnvironmentVersion != 4 || eff.HostVersion != 0 || eff.ConfigType != Healthcheck {
		t.Errorf("got %+v", eff)
	}
	if len(eff.Provenance.Entries) != 1 || eff.Provenance.Entries[0] != (ProvenanceEntry{"interval_seconds", LayerEnvironment}) {
		t.Errorf("provenance %+v", eff.Provenance)
	}
}

func TestResolve_HostOnly(t *testing.T) {
	host := Layer{Data: json.RawMessage(`[{"type":"tcp","name":"ssh","address":"localhost:22"}]`), Version: 9}
	eff, err := Resolve(Collectors, Layer{}, host)
	if err != nil {
		t.Fatal(err)
	}
	if string(eff.Data) != string(host.Data) || eff.Source != SourceHostOverride || eff.Version != 9 || eff.HostVersion != 9 {
		t.Errorf("got %+v", eff)
	}
}

func TestResolve_Both(t *testing.T) {
	env := Layer{Data: json.RawMessage(`{"paths": ["/etc", "/opt"], "exclude_patterns": ["*.log"]}`), Version: 3}
	host := Layer{Data: json.RawMessage(`{"paths": ["/etc", "/opt", "/var/log"]}`), Version: 2}
	eff, err := Resolve(WatchFiles, env, host)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, eff.Data, `{"paths": ["/etc", "/opt", "/var/log"], "exclude_patterns": ["*.log"]}`)
	if eff.Source != SourceMerged || eff.Version != 3 || eff.EnvironmentVersion != 3 || eff.HostVersion != 2 {
		t.Errorf("got %+v", eff)
	}
	if len(eff.Provenance.Entries) != 2 {
		t.Errorf("provenance %+v", eff.Provenance)
	}
}

func TestResolve_Neither(t *testing.T) {
	eff, err := Resolve(Labels, Layer{}, Layer{})
	if err != nil {
		t.Fatal(err)
	}
	if eff.Data != nil || eff.Source != "" || eff.Version != 0 || eff.ConfigType != Labels {
		t.Errorf("got %+v", eff)
	}
}

// A deleted host override (tombstone) still counts for the version, so a host never moves backwards.
func TestResolve_TombstoneVersion(t *testing.T) {
	tests := []struct {
		name       string
		env, host  Layer
		wantSource string
		wantVer    int64
	}{
		{"host_tombstone_over_env", Layer{Data: json.RawMessage(`{"level":"info"}`), Version: 5}, Layer{Version: 8}, SourceEnvironment, 8},
		{"host_tombstone_null_data", Layer{Data: json.RawMessage(`{"level":"info"}`), Version: 5}, Layer{Data: json.RawMessage(`null`), Version: 8}, SourceEnvironment, 8},
		{"tombstone_only", Layer{}, Layer{Version: 12}, "", 12},
		{"both_tombstones", Layer{Version: 7}, Layer{Version: 6}, "", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eff, err := Resolve(LogShipping, tt.env, tt.host)
			if err != nil {
				t.Fatal(err)
			}
			if eff.Source != tt.wantSource || eff.Version != tt.wantVer {
				t.Errorf("source %q version %d, want %q %d", eff.Source, eff.Version, tt.wantSource, tt.wantVer)
			}
			if tt.wantSource == "" && eff.Data != nil {
				t.Errorf("data %s, want nil", eff.Data)
			}
		})
	}
}

func TestResolve_Errors(t *testing.T) {
	if _, err := Resolve("nope", Layer{}, Layer{}); !errors.Is(err, ErrUnknownType) {
		t.Errorf("unknown type: %v", err)
	}
	if _, err := Resolve(Intervals, Layer{Data: json.RawMessage(`{`), Version: 1}, Layer{}); err == nil {
		t.Error("invalid JSON: want an error")
	}
}
