package configs

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/fault"
)

func row(version int64, live bool) *Record {
	r := &Record{Version: version, Data: json.RawMessage(`{}`)}
	if !live {
		now := time.Now()
		r.Data, r.DeletedAt = nil, &now
	}
	return r
}

func TestCurrentEffective(t *testing.T) {
	env, host := protocol.ScopeEnvironment, protocol.ScopeHost
	for _, tc := range []struct {
		name     string
		cur      Current
		version  int64
		existing bool
	}{
		{"env: none", Current{Target: Target{Scope: env}}, 0, false},
		{"env: live", Current{Target: Target{Scope: env}, Row: row(4, true)}, 4, true},
		{"env: tombstone", Current{Target: Target{Scope: env}, Row: row(6, false)}, 6, false},
		{"host: nothing", Current{Target: Target{Scope: host}}, 0, false},
		{"host: env only", Current{Target: Target{Scope: host}, Env: row(3, true)}, 3, true},
		{"host: override only", Current{Target: Target{Scope: host}, Row: row(5, true)}, 5, true},
		{"host: both", Current{Target: Target{Scope: host}, Row: row(5, true), Env: row(8, true)}, 8, true},
		{"host: override tombstone newer than env", Current{Target: Target{Scope: host}, Row: row(9, false), Env: row(3, true)}, 9, true},
		{"host: both tombstones", Current{Target: Target{Scope: host}, Row: row(9, false), Env: row(10, false)}, 10, false},
	} {
		v, ok := tc.cur.Effective()
		if v != tc.version || ok != tc.existing {
			t.Errorf("%s: got (%d, %v), want (%d, %v)", tc.name, v, ok, tc.version, tc.existing)
		}
	}
}

func TestPreconditionCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cond    Precondition
		version int64
		exists  bool
		fails   bool
	}{
		{"none, missing", Precondition{}, 0, false, false},
		{"none, present", Precondition{}, 3, true, false},
		{"star, present", Precondition{Any: true}, 3, true, false},
		{"star, missing", Precondition{Any: true}, 3, false, true},
		{"match", Precondition{Versions: []int64{2, 3}}, 3, true, false},
		{"stale", Precondition{Versions: []int64{2}}, 3, true, true},
		{"deleted", Precondition{Versions: []int64{3}}, 3, false, true},
	} {
		err := tc.cond.check(tc.version, tc.exists)
		if (err != nil) != tc.fails || (err != nil && !fault.Is(err, fault.PreconditionFailed)) {
			t.Errorf("%s: err %v", tc.name, err)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		typ, data, code string
	}{
		{"watch_files", `{"paths": ["/etc"]}`, ""},
		{"firewall", `{}`, "unknown_config_type"},
		{"watch_files", `null`, "invalid_request"},
		{"watch_files", ``, "invalid_request"},
		{"watch_files", `{"pathz": []}`, "invalid_config"},
		{"tracing", `{"sample_ratio": 2}`, "invalid_config"},
	} {
		err := Validate(tc.typ, json.RawMessage(tc.data))
		if tc.code == "" {
			if err != nil {
				t.Errorf("%s %s: %v", tc.typ, tc.data, err)
			}
			continue
		}
		var fe *fault.Error
		if !errors.As(err, &fe) || fe.Kind != fault.Invalid || (fe.Code != tc.code && !(tc.code == "invalid_request" && fe.Code == "")) {
			t.Errorf("%s %s: %v, want %s", tc.typ, tc.data, err, tc.code)
		}
	}
}

func TestChangeEvent(t *testing.T) {
	tgt := Target{Scope: protocol.ScopeHost, AgentID: "a-1"}
	ev := ChangeEvent(tgt, Record{ConfigType: "labels", Version: 7}, "ops", time.Unix(0, 0))
	if !ev.Deleted || ev.AgentID != "a-1" || ev.HostID == "" || ev.Version != 7 || ev.EventID == "" {
		t.Fatalf("%+v", ev)
	}
	ev = ChangeEvent(Target{Scope: protocol.ScopeEnvironment}, Record{ConfigType: "labels", Version: 8, Data: json.RawMessage(`{}`)}, "ops", time.Now())
	if ev.Deleted || ev.HostID != "" || ev.AgentID != "" {
		t.Fatalf("%+v", ev)
	}
}
