package agentconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

type mergeCase struct {
	name            string
	env, host, want string
}

func runMergeCases(t *testing.T, configType string, cases []mergeCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := Merge(configType, json.RawMessage(tt.env), json.RawMessage(tt.host))
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(got) {
				t.Fatalf("merge output is not valid JSON: %s", got)
			}
			assertJSON(t, got, tt.want)
		})
	}
}

// The spec's example, verbatim.
func TestMerge_Collectors_SpecExample(t *testing.T) {
	env := `[{"type": "mysql", "name": "primary"}, {"type": "redis", "name": "cache"}]`
	host := `[{"type": "mysql", "name": "primary", "interval": "30s"}]`
	want := `[{"type":"mysql","name":"primary","interval":"30s"},{"type":"redis","name":"cache"}]`
	got, _, err := Merge(Collectors, json.RawMessage(env), json.RawMessage(host))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want { // order of entries and of members is kept exactly
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// The spec's "Disabling inherited collectors" example.
func TestMerge_Collectors_SpecDisableExample(t *testing.T) {
	env := `[{"type": "mysql", "name": "primary"}, {"type": "redis", "name": "cache"}]`
	host := `[{"type": "mysql", "name": "primary", "enabled": false}]`
	got, prov, err := Merge(Collectors, json.RawMessage(env), json.RawMessage(host))
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, got, `[{"type":"redis","name":"cache"}]`)
	want := Provenance{
		Entries: []ProvenanceEntry{{Path: "collectors[redis/cache]", Layer: LayerEnvironment}},
		Removed: []ProvenanceEntry{{Path: "collectors[mysql/primary]", Layer: LayerHost}},
	}
	if !reflect.DeepEqual(prov, want) {
		t.Errorf("provenance %+v, want %+v", prov, want)
	}
}

func TestMerge_Collectors_Rules(t *testing.T) {
	runMergeCases(t, Collectors, []mergeCase{
		{name: "rule1_env_order_kept",
			env:  `[{"type":"tcp","name":"c"},{"type":"tcp","name":"a"},{"type":"tcp","name":"b"}]`,
			host: `[]`,
			want: `[{"type":"tcp","name":"c"},{"type":"tcp","name":"a"},{"type":"tcp","name":"b"}]`},
		{name: "rule3_host_replaces_in_place",
			env:  `[{"type":"tcp","name":"a","address":"a:1"},{"type":"tcp","name":"b","address":"b:1"},{"type":"tcp","name":"c"}]`,
			host: `[{"type":"tcp","name":"b","address":"b:2"}]`,
			want: `[{"type":"tcp","name":"a","address":"a:1"},{"type":"tcp","name":"b","address":"b:2"},{"type":"tcp","name":"c"}]`},
		{name: "rule3_replacement_is_whole_not_deep",
			env:  `[{"type":"mysql","name":"db","host":"h","port":3306,"interval":"10s"}]`,
			host: `[{"type":"mysql","name":"db","port":3307}]`,
			want: `[{"type":"mysql","name":"db","port":3307}]`},
		{name: "rule4_unmatched_host_appended_in_host_order",
			env:  `[{"type":"tcp","name":"a"}]`,
			host: `[{"type":"http","name":"z"},{"type":"http","name":"y"}]`,
			want: `[{"type":"tcp","name":"a"},{"type":"http","name":"z"},{"type":"http","name":"y"}]`},
		{name: "identity_needs_type_and_name",
			env:  `[{"type":"mysql","name":"main"}]`,
			host: `[{"type":"postgres","name":"main"}]`,
			want: `[{"type":"mysql","name":"main"},{"type":"postgres","name":"main"}]`},
		{name: "identity_compares_decoded_strings",
			env:  `[{"type":"tcp","name":"a"}]`,
			host: `[{"type":"tcp","name":"\u0061","address":"x:1"}]`,
			want: `[{"type":"tcp","name":"a","address":"x:1"}]`},
		{name: "rule5_enabled_false_removes_env_entry",
			env:  `[{"type":"tcp","name":"a"},{"type":"tcp","name":"b"},{"type":"tcp","name":"c"}]`,
			host: `[{"type":"tcp","name":"b","enabled":false}]`,
			want: `[{"type":"tcp","name":"a"},{"type":"tcp","name":"c"}]`},
		{name: "rule5_host_only_disabled_entry_not_added",
			env:  `[{"type":"tcp","name":"a"}]`,
			host: `[{"type":"tcp","name":"ghost","enabled":false}]`,
			want: `[{"type":"tcp","name":"a"}]`},
		{name: "enabled_true_replaces",
			env:  `[{"type":"tcp","name":"a","enabled":false}]`,
			host: `[{"type":"tcp","name":"a","enabled":true}]`,
			want: `[{"type":"tcp","name":"a","enabled":true}]`},
		{name: "env_disabled_entry_kept_when_host_silent",
			env:  `[{"type":"tcp","name":"a","enabled":false}]`,
			host: `[{"type":"tcp","name":"b"}]`,
			want: `[{"type":"tcp","name":"a","enabled":false},{"type":"tcp","name":"b"}]`},
		{name: "replace_remove_and_append_together",
			env:  `[{"type":"mysql","name":"primary"},{"type":"redis","name":"cache"},{"type":"http","name":"api"}]`,
			host: `[{"type":"http","name":"new"},{"type":"redis","name":"cache","enabled":false},{"type":"mysql","name":"primary","interval":"5s"}]`,
			want: `[{"type":"mysql","name":"primary","interval":"5s"},{"type":"http","name":"api"},{"type":"http","name":"new"}]`},
		{name: "empty_env_list",
			env:  `[]`,
			host: `[{"type":"tcp","name":"a"},{"type":"tcp","name":"b","enabled":false}]`,
			want: `[{"type":"tcp","name":"a"}]`},
		{name: "unknown_members_copied_verbatim",
			env:  `[{"type":"tcp","name":"a","x-note":{"n":1.50,"s":"\u00e9"}}]`,
			host: `[]`,
			want: `[{"type":"tcp","name":"a","x-note":{"n":1.50,"s":"é"}}]`},
	})
}

func TestMerge_Shallow_Rules(t *testing.T) {
	for _, typ := range []string{Intervals, AgentSettings, ChangeDetection, WatchFiles, Healthcheck, Tracing, LogShipping} {
		t.Run(typ, func(t *testing.T) {
			runMergeCases(t, typ, []mergeCase{
				{name: "host_key_replaces_env_key", env: `{"a":1,"b":2}`, host: `{"b":3}`, want: `{"a":1,"b":3}`},
				{name: "env_only_keys_kept", env: `{"a":1,"b":2,"c":3}`, host: `{"d":4}`, want: `{"a":1,"b":2,"c":3,"d":4}`},
				{name: "nested_object_replaced_not_merged", env: `{"n":{"x":1,"y":2}}`, host: `{"n":{"y":3}}`, want: `{"n":{"y":3}}`},
				{name: "arrays_replaced_not_merged", env: `{"paths":["/etc","/opt"]}`, host: `{"paths":["/var/log"]}`, want: `{"paths":["/var/log"]}`},
				{name: "host_null_value_replaces", env: `{"a":1}`, host: `{"a":null}`, want: `{"a":null}`},
				{name: "empty_host_object_changes_nothing", env: `{"a":1}`, host: `{}`, want: `{"a":1}`},
			})
		})
	}
	// Key order: environment order, then host-only keys in host order.
	got, _, err := Merge(Intervals, json.RawMessage(`{"metrics":"1s", "heartbeat":"2s"}`), json.RawMessage(`{"processes":"4s","metrics":"9s","inventory":"3s"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"metrics":"9s","heartbeat":"2s","processes":"4s","inventory":"3s"}`; string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// The spec's pull example: watch_files merged with a host override of paths.
func TestMerge_Shallow_WatchFilesExample(t *testing.T) {
	got, _, err := Merge(WatchFiles,
		json.RawMessage(`{"paths": ["/etc", "/opt"], "exclude_patterns": ["*.log"]}`),
		json.RawMessage(`{"paths": ["/etc", "/opt", "/var/log"]}`))
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, got, `{"paths": ["/etc", "/opt", "/var/log"], "exclude_patterns": ["*.log"]}`)
}

func TestMerge_Labels_Rules(t *testing.T) {
	runMergeCases(t, Labels, []mergeCase{
		{name: "static_shallow_host_keys_win",
			env:  `{"static":{"env":"prod","team":"core"}}`,
			host: `{"static":{"env":"staging","rack":"r1"}}`,
			want: `{"static":{"env":"staging","team":"core","rack":"r1"}}`},
		{name: "static_only_in_env", env: `{"static":{"a":"1"}}`, host: `{"dynamic":[]}`, want: `{"static":{"a":"1"},"dynamic":[]}`},
		{name: "static_only_in_host", env: `{"dynamic":[]}`, host: `{"static":{"a":"1"}}`, want: `{"dynamic":[],"static":{"a":"1"}}`},
		{name: "dynamic_same_name_replaced_in_place",
			env:  `{"dynamic":[{"name":"a","source":"env","env":"A"},{"name":"b","source":"env","env":"B"}]}`,
			host: `{"dynamic":[{"name":"a","source":"file","path":"/etc/a"}]}`,
			want: `{"dynamic":[{"name":"a","source":"file","path":"/etc/a"},{"name":"b","source":"env","env":"B"}]}`},
		{name: "dynamic_new_name_appended",
			env:  `{"dynamic":[{"name":"a","source":"env","env":"A"}]}`,
			host: `{"dynamic":[{"name":"c","source":"command","command":["hostname"]}]}`,
			want: `{"dynamic":[{"name":"a","source":"env","env":"A"},{"name":"c","source":"command","command":["hostname"]}]}`},
		{name: "dynamic_enabled_false_is_not_special",
			env:  `{"dynamic":[{"name":"a","source":"env","env":"A"}]}`,
			host: `{"dynamic":[{"name":"a","enabled":false}]}`,
			want: `{"dynamic":[{"name":"a","enabled":false}]}`},
		{name: "other_keys_shallow",
			env:  `{"static":{"a":"1"},"x":{"k":1},"y":2}`,
			host: `{"x":{"j":2}}`,
			want: `{"static":{"a":"1"},"x":{"j":2},"y":2}`},
		{name: "static_of_unexpected_kind_replaced_whole",
			env:  `{"static":{"a":"1"}}`,
			host: `{"static":"oops"}`,
			want: `{"static":"oops"}`},
	})
}

func TestMerge_LogCollection_Rules(t *testing.T) {
	runMergeCases(t, LogCollection, []mergeCase{
		{name: "files_same_name_replaced_in_place",
			env:  `{"files":[{"name":"syslog","path":"/var/log/syslog"},{"name":"auth","path":"/var/log/auth.log"}]}`,
			host: `{"files":[{"name":"syslog","path":"/var/log/messages"}]}`,
			want: `{"files":[{"name":"syslog","path":"/var/log/messages"},{"name":"auth","path":"/var/log/auth.log"}]}`},
		{name: "files_new_name_appended",
			env:  `{"files":[{"name":"syslog","path":"/var/log/syslog"}]}`,
			host: `{"files":[{"name":"app","path":"/opt/app/*.log"}]}`,
			want: `{"files":[{"name":"syslog","path":"/var/log/syslog"},{"name":"app","path":"/opt/app/*.log"}]}`},
		{name: "journald_shallow",
			env:  `{"journald":{"enabled":true,"units":["sshd"],"read_from_tail":true}}`,
			host: `{"journald":{"enabled":false}}`,
			want: `{"journald":{"enabled":false,"units":["sshd"],"read_from_tail":true}}`},
		{name: "journald_host_units_fully_replace_env_units",
			env:  `{"journald":{"units":["sshd","cron"]}}`,
			host: `{"journald":{"units":["nginx"]}}`,
			want: `{"journald":{"units":["nginx"]}}`},
		{name: "other_keys_shallow",
			env:  `{"enabled":true,"flush_interval":"5s","files":[]}`,
			host: `{"flush_interval":"1s"}`,
			want: `{"enabled":true,"flush_interval":"1s","files":[]}`},
	})
}

func TestMerge_SingleLayer_AsIs(t *testing.T) {
	for _, typ := range TypeNames() {
		data := json.RawMessage(`{ "a" : 1.50 }`)
		if typ == Collectors {
			// A host-only list is used as-is: even a disabled entry stays (the agent skips it).
			data = json.RawMessage(`[ {"type":"tcp","name":"a","enabled":false} ]`)
		}
		for _, c := range []struct {
			name      string
			env, host json.RawMessage
		}{{"env_only", data, nil}, {"host_only", nil, data}, {"host_tombstone_null", data, json.RawMessage("null")}} {
			got, _, err := Merge(typ, c.env, c.host)
			if err != nil || string(got) != string(data) {
				t.Errorf("%s %s: got %s, %v; want the layer unchanged", typ, c.name, got, err)
			}
		}
	}
}

func TestMerge_Neither(t *testing.T) {
	got, prov, err := Merge(Labels, nil, json.RawMessage(" null "))
	if err != nil || got != nil || len(prov.Entries) != 0 || prov.Entries == nil {
		t.Fatalf("got %s, %+v, %v", got, prov, err)
	}
}

func TestMerge_Errors(t *testing.T) {
	if _, _, err := Merge("nope", nil, nil); !errors.Is(err, ErrUnknownType) {
		t.Errorf("unknown type: %v", err)
	}
	tests := []struct {
		typ, env, host, want string
	}{
		{Intervals, `{"a":`, `{}`, "environment layer"},
		{Intervals, `{}`, `{"a":1,"a":2}`, "host layer"},
		{Collectors, `{}`, `[]`, "environment layer is not an array"},
		{Labels, `{}`, `[]`, "host layer is not an object"},
	}
	for _, tt := range tests {
		_, _, err := Merge(tt.typ, json.RawMessage(tt.env), json.RawMessage(tt.host))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Merge(%s, %s, %s) error = %v, want %q", tt.typ, tt.env, tt.host, err, tt.want)
		}
	}
	// A single layer of the wrong shape is still used as-is (it was validated when written).
	if got, _, err := Merge(Collectors, json.RawMessage(`{}`), nil); err != nil || string(got) != `{}` {
		t.Errorf("single layer of the wrong shape: %s, %v", got, err)
	}
}

func TestMerge_Provenance(t *testing.T) {
	tests := []struct {
		name, typ, env, host string
		want                 Provenance
	}{
		{name: "shallow_both", typ: Intervals,
			env: `{"metrics":"1m","heartbeat":"30s"}`, host: `{"heartbeat":"10s","processes":"5m"}`,
			want: Provenance{Entries: []ProvenanceEntry{
				{"metrics", LayerEnvironment}, {"heartbeat", LayerHostReplacedEnvironment}, {"processes", LayerHost}}}},
		{name: "shallow_env_only", typ: Tracing, env: `{"enabled":true,"sample_ratio":0.1}`,
			want: Provenance{Entries: []ProvenanceEntry{{"enabled", LayerEnvironment}, {"sample_ratio", LayerEnvironment}}}},
		{name: "shallow_host_only", typ: Tracing, host: `{"enabled":true}`,
			want: Provenance{Entries: []ProvenanceEntry{{"enabled", LayerHost}}}},
		{name: "collectors", typ: Collectors,
			env:  `[{"type":"mysql","name":"primary"},{"type":"redis","name":"cache"},{"type":"http","name":"api"}]`,
			host: `[{"type":"mysql","name":"primary","interval":"30s"},{"type":"tcp","name":"ssh"},{"type":"http","name":"api","enabled":false}]`,
			want: Provenance{
				Entries: []ProvenanceEntry{
					{"collectors[mysql/primary]", LayerHostReplacedEnvironment},
					{"collectors[redis/cache]", LayerEnvironment},
					{"collectors[tcp/ssh]", LayerHost}},
				Removed: []ProvenanceEntry{{"collectors[http/api]", LayerHost}}}},
		{name: "collectors_host_only_lists_disabled_too", typ: Collectors,
			host: `[{"type":"tcp","name":"a","enabled":false}]`,
			want: Provenance{Entries: []ProvenanceEntry{{"collectors[tcp/a]", LayerHost}}}},
		{name: "labels", typ: Labels,
			env:  `{"static":{"env":"prod","team":"core"},"dynamic":[{"name":"hostname","source":"command","command":["hostname"]}]}`,
			host: `{"static":{"env":"dev","app.kubernetes.io/name":"x"},"dynamic":[{"name":"hostname","source":"env","env":"HOST"},{"name":"az","source":"file","path":"/az"}]}`,
			want: Provenance{Entries: []ProvenanceEntry{
				{"static.env", LayerHostReplacedEnvironment},
				{"static.team", LayerEnvironment},
				{`static["app.kubernetes.io/name"]`, LayerHost},
				{"dynamic[hostname]", LayerHostReplacedEnvironment},
				{"dynamic[az]", LayerHost}}}},
		{name: "labels_env_only_is_fine_grained", typ: Labels,
			env:  `{"static":{"env":"prod"},"dynamic":[{"name":"h","source":"env","env":"H"}]}`,
			want: Provenance{Entries: []ProvenanceEntry{{"static.env", LayerEnvironment}, {"dynamic[h]", LayerEnvironment}}}},
		{name: "labels_static_kind_mismatch", typ: Labels,
			env: `{"static":{"env":"prod"}}`, host: `{"static":[]}`,
			want: Provenance{Entries: []ProvenanceEntry{{"static", LayerHostReplacedEnvironment}}}},
		{name: "log_collection", typ: LogCollection,
			env:  `{"files":[{"name":"syslog"},{"name":"auth"}],"journald":{"units":["sshd"],"enabled":true},"enabled":true}`,
			host: `{"files":[{"name":"auth","path":"/x"}],"journald":{"units":["cron"]}}`,
			want: Provenance{Entries: []ProvenanceEntry{
				{"files[syslog]", LayerEnvironment},
				{"files[auth]", LayerHostReplacedEnvironment},
				{"journald.units", LayerHostReplacedEnvironment},
				{"journald.enabled", LayerEnvironment},
				{"enabled", LayerEnvironment}}}},
		{name: "entry_without_identity_uses_position", typ: Collectors,
			env: `[{"type":"tcp"}]`, host: `[{"type":"tcp","name":"a"}]`,
			want: Provenance{Entries: []ProvenanceEntry{{"collectors[0]", LayerEnvironment}, {"collectors[tcp/a]", LayerHost}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var env, host json.RawMessage
			if tt.env != "" {
				env = json.RawMessage(tt.env)
			}
			if tt.host != "" {
				host = json.RawMessage(tt.host)
			}
			_, prov, err := Merge(tt.typ, env, host)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(prov, tt.want) {
				t.Errorf("got  %+v\nwant %+v", prov, tt.want)
			}
		})
	}
}

func TestMerge_ProvenanceJSON(t *testing.T) {
	b, err := json.Marshal(Provenance{Entries: []ProvenanceEntry{{"metrics", LayerHost}}})
	if err != nil || string(b) != `{"entries":[{"path":"metrics","layer":"host"}]}` {
		t.Fatalf("got %s, %v", b, err)
	}
}

// referenceCollectorsMerge is the spec's collectors algorithm written plainly over decoded values.
func referenceCollectorsMerge(env, host []map[string]any) []map[string]any {
	out := append([]map[string]any(nil), env...)
	for _, h := range host {
		disabled := h["enabled"] == false
		found := -1
		for i, e := range out {
			if e["type"] == h["type"] && e["name"] == h["name"] {
				found = i
				break
			}
		}
		switch {
		case found >= 0 && disabled:
			out = append(out[:found], out[found+1:]...)
		case found >= 0:
			out[found] = h
		case !disabled:
			out = append(out, h)
		}
	}
	return out
}

// Large lists take the indexed path; both paths must agree with the reference algorithm.
func TestMerge_Collectors_MatchesReference(t *testing.T) {
	for _, size := range []int{3, 20, 200} {
		var env, host []map[string]any
		for i := range size {
			env = append(env, map[string]any{"type": "tcp", "name": fmt.Sprintf("c%d", i), "address": fmt.Sprintf("h%d:1", i)})
		}
		for i := 0; i < size; i += 3 {
			host = append(host, map[string]any{"type": "tcp", "name": fmt.Sprintf("c%d", i), "address": "over:2"})
			host = append(host, map[string]any{"type": "tcp", "name": fmt.Sprintf("c%d", i+1), "enabled": false})
			host = append(host, map[string]any{"type": "http", "name": fmt.Sprintf("c%d", i), "url": "http://x"})
		}
		envJSON, _ := json.Marshal(env)
		hostJSON, _ := json.Marshal(host)
		got, prov, err := Merge(Collectors, envJSON, hostJSON)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(referenceCollectorsMerge(env, host))
		assertJSON(t, got, string(want))
		var n []any
		_ = json.Unmarshal(got, &n)
		if len(prov.Entries) != len(n) {
			t.Errorf("size %d: %d provenance entries for %d collectors", size, len(prov.Entries), len(n))
		}
	}
}
