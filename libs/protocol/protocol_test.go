package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func roundTrip[T any](t *testing.T, in T) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatalf("marshal %T: %v", in, err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("unmarshal %T: %v", in, err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("%T round trip changed the value:\n in: %#v\nout: %#v\njson: %s", in, in, out, b)
	}
}

func TestRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	roundTrip(t, FetchRequest{AgentID: "550e8400-e29b-41d4-a716-446655440000"})
	roundTrip(t, FetchReply{
		Configs:      map[string]json.RawMessage{"healthcheck": json.RawMessage(`{"interval_seconds":60}`)},
		Versions:     map[string]int64{"healthcheck": 1, "labels": 7},
		SecretFields: map[string][]string{"collectors": {"/0/password"}},
		TypeErrors:   map[string]Error{"collectors": {Code: CodeCredentialFailed, Message: "credential not found"}},
	})
	roundTrip(t, Command{CommandID: "c1", Type: CommandConfigUpdate, ConfigType: "labels", Version: 4,
		Payload: json.RawMessage(`{"static":{"env":"prod"}}`), SecretFields: []string{"/0/password"}, IssuedAt: now})
	roundTrip(t, Ack{AgentID: "a", ConfigType: "collectors", Version: 5, Status: AckFailed, Error: "dial tcp: connection refused", AppliedAt: now})
	roundTrip(t, Heartbeat{AgentID: "a", SentAt: now, AgentVersion: "1.0.0", ConfigHash: "ab", ConfigVersion: 3,
		ConfigVersions: map[string]int64{"collectors": 5, "intervals": 2}})
	roundTrip(t, ConfigChanged{EventID: "e", Scope: ScopeHost, ClientID: "c", EnvironmentID: "e", HostID: "h", AgentID: "a",
		ConfigType: "labels", Version: 9, Deleted: true, Actor: "token:ops", OccurredAt: now})
	roundTrip(t, ResolveRequest{AgentID: "a", Types: []string{"labels"}, Explain: true})
	roundTrip(t, ResolveReply{Host: HostRef{HostID: "h", AgentID: "a", ClientID: "c", EnvironmentID: "e"},
		Configs: map[string]EffectiveConfig{"labels": {ConfigType: "labels", ConfigData: json.RawMessage(`{"static":{}}`),
			Version: 3, Source: "merged", EnvironmentVersion: 1, HostVersion: 3}}})
	roundTrip(t, ResolveSetsRequest{Contract: ResolveSetsContract, AgentIDs: []string{"a", "b"}, Types: []string{"labels"}})
	roundTrip(t, ResolveSetsReply{Contract: ResolveSetsContract,
		Configs: []EffectiveConfig{{ConfigType: "labels", ConfigData: json.RawMessage(`{"static":{}}`), Version: 3, Source: "environment", EnvironmentVersion: 3}},
		Sets: []ConfigSet{{ClientID: "c", EnvironmentID: "e", Configs: map[string]int{"labels": 0},
			Hosts: []SetHost{{HostID: "h", AgentID: "a"}, {HostID: "h2", AgentID: "a2"}}}},
		Missing:   []string{"b"},
		Remaining: []string{"c"},
		Failed:    []AgentError{{AgentID: "d", Error: Error{Code: CodeInternal, Message: "too large"}}}})
	roundTrip(t, Error{Code: CodeUnavailable, Message: "busy", RetryAfterMS: 1500})
	roundTrip(t, ResolvePushRequest{Contract: ResolveSetsContract, EnvironmentID: "e", ConfigType: "labels", HostIDs: []string{"h"},
		EnvironmentVersion: 7, OnlineSince: &now, OnlineAt: &now, After: "x", Limit: 10})
	roundTrip(t, ResolveSetsReply{Contract: ResolveSetsContract,
		Configs:   []EffectiveConfig{{ConfigType: "labels", ConfigData: json.RawMessage(`{}`), Version: 1, Source: "environment", EnvironmentVersion: 1}},
		Sets:      []ConfigSet{{ClientID: "c", EnvironmentID: "e", Configs: map[string]int{"labels": 0}, Hosts: []SetHost{{HostID: "h", AgentID: "a"}}}},
		NextAfter: "h"})
	roundTrip(t, CredentialCreateRequest{ClientID: "c", Name: "db", Secret: map[string]string{"password": "pw"}})
	roundTrip(t, CredentialListReply{Credentials: []CredentialMeta{{ID: "i", ClientID: "c", Name: "db", Fields: []string{"password"}, KeyVersion: "local:v1", CreatedAt: now, UpdatedAt: now}}})
	roundTrip(t, InjectRequest{Items: []InjectItem{{Key: "k", ClientID: "c", EnvironmentID: "e", Collectors: json.RawMessage(`[{"type":"mysql","name":"p","credential_id":"x"}]`)}}})
	roundTrip(t, InjectReply{Results: []InjectResult{{Key: "k", Error: &Error{Code: CodeCredentialFailed, Message: "m"}}}})
}

// Check accepts a consistent reply of this contract and refuses another contract, an index out of
// range and an index naming a config of another type.
func TestResolveSetsReplyCheck(t *testing.T) {
	good := func() ResolveSetsReply {
		return ResolveSetsReply{Contract: ResolveSetsContract,
			Configs: []EffectiveConfig{{ConfigType: "labels", ConfigData: json.RawMessage(`{"static":{}}`), Version: 3}},
			Sets:    []ConfigSet{{ClientID: "c", EnvironmentID: "e", Configs: map[string]int{"labels": 0}, Hosts: []SetHost{{HostID: "h", AgentID: "a"}}}}}
	}
	if err := good().Check(); err != nil {
		t.Fatalf("Check of a consistent reply: %v", err)
	}
	bad := map[string]func(*ResolveSetsReply){
		"other contract": func(r *ResolveSetsReply) { r.Contract = ResolveSetsContract + 1 },
		"no contract":    func(r *ResolveSetsReply) { r.Contract = 0 },
		"index too high": func(r *ResolveSetsReply) { r.Sets[0].Configs["labels"] = 1 },
		"negative index": func(r *ResolveSetsReply) { r.Sets[0].Configs["labels"] = -1 },
		"type mismatch":  func(r *ResolveSetsReply) { r.Sets[0].Configs = map[string]int{"intervals": 0} },
	}
	for name, mutate := range bad {
		r := good()
		mutate(&r)
		if err := r.Check(); err == nil {
			t.Errorf("%s: Check accepted %+v", name, r)
		}
	}
}

// The spec's payloads must decode into the protocol types unchanged.
func TestSpecPayloads(t *testing.T) {
	var ack Ack
	if err := json.Unmarshal([]byte(`{"agent_id":"550e8400-e29b-41d4-a716-446655440000","config_type":"collectors","version":5,"status":"failed","error":"dial tcp: connection refused"}`), &ack); err != nil {
		t.Fatal(err)
	}
	if ack.Status != AckFailed || ack.Version != 5 || ack.Error != "dial tcp: connection refused" {
		t.Fatalf("ack decoded wrong: %+v", ack)
	}
	var reply FetchReply
	if err := json.Unmarshal([]byte(`{"configs":{"watch_files":{"paths":["/etc","/opt"],"exclude_patterns":["*.swp"]},"healthcheck":{"interval_seconds":60,"timeout_seconds":5}},"versions":{"watch_files":3,"healthcheck":1}}`), &reply); err != nil {
		t.Fatal(err)
	}
	if len(reply.Configs) != 2 || reply.Versions["watch_files"] != 3 {
		t.Fatalf("fetch reply decoded wrong: %+v", reply)
	}
	var hb Heartbeat
	if err := json.Unmarshal([]byte(`{"agent_version":"1.0.0","config_hash":"a1b2","config_version":3,"config_versions":{"collectors":5,"intervals":2,"labels":1,"watch_files":3}}`), &hb); err != nil {
		t.Fatal(err)
	}
	if hb.ConfigVersion != 3 || hb.ConfigVersions["collectors"] != 5 {
		t.Fatalf("heartbeat decoded wrong: %+v", hb)
	}
}

func TestSubjects(t *testing.T) {
	id := "550e8400-e29b-41d4-a716-446655440000"
	cases := map[string]string{
		FetchSubject(id):     "configsync.agent." + id + ".config.fetch",
		AckSubject(id):       "configsync.agent." + id + ".config.ack",
		HeartbeatSubject(id): "configsync.agent." + id + ".heartbeat",
		CommandSubject(id):   "configsync.cmd." + id,
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("subject %q, want %q", got, want)
		}
	}
	if got, ok := AgentIDFromSubject(FetchSubject(id)); !ok || got != id {
		t.Errorf("AgentIDFromSubject = %q, %v", got, ok)
	}
	for _, bad := range []string{"configsync.agent.", "configsync.agent.a*b.x", "other.agent.a.x", "configsync.agent.abc"} {
		if _, ok := AgentIDFromSubject(bad); ok {
			t.Errorf("AgentIDFromSubject(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "a.b", "a*", ">", "a b"} {
		if ValidAgentID(bad) {
			t.Errorf("ValidAgentID(%q) = true", bad)
		}
	}
}

func TestValidConfigTypeName(t *testing.T) {
	for _, ok := range []string{"collectors", "log_shipping", "a1"} {
		if !ValidConfigTypeName(ok) {
			t.Errorf("ValidConfigTypeName(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "1abc", "Labels", "a.b", "a-b", string(make([]byte, MaxConfigTypeLen+1))} {
		if ValidConfigTypeName(bad) {
			t.Errorf("ValidConfigTypeName(%q) = true", bad)
		}
	}
}
