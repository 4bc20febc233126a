package natsapi

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/delivery/internal/deliver"
)

const agent = "550e8400-e29b-41d4-a716-446655440000"

func TestDecodeFetchRequest(t *testing.T) {
	got, err := decodeFetchRequest(protocol.FetchSubject(agent), []byte(`{"agent_id":"`+agent+`"}`))
	if err != nil || got != agent {
		t.Fatalf("got %q, %v", got, err)
	}
	cases := map[string]struct {
		subject, body string
		want          error
	}{
		"other agent":  {protocol.FetchSubject(agent), `{"agent_id":"someone-else"}`, deliver.ErrForbidden},
		"no agent":     {protocol.FetchSubject(agent), `{}`, deliver.ErrInvalidRequest},
		"not json":     {protocol.FetchSubject(agent), `agent`, deliver.ErrInvalidRequest},
		"bad subject":  {"configsync.agent.a*b.config.fetch", `{"agent_id":"a*b"}`, deliver.ErrInvalidRequest},
		"wrong type":   {protocol.FetchSubject(agent), `{"agent_id":7}`, deliver.ErrInvalidRequest},
		"empty body":   {protocol.FetchSubject(agent), ``, deliver.ErrInvalidRequest},
		"huge payload": {protocol.FetchSubject(agent), `{"agent_id":"` + agent + `","pad":"` + string(make([]byte, 5000)) + `"}`, deliver.ErrInvalidRequest},
	}
	for name, c := range cases {
		if _, err := decodeFetchRequest(c.subject, []byte(c.body)); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", name, err, c.want)
		}
	}
}

func TestDecodeConfigChanged(t *testing.T) {
	ev, err := decodeConfigChanged([]byte(`{"event_id":"e1","scope":"host","client_id":"c","environment_id":"env","host_id":"h","agent_id":"a","config_type":"labels","version":9,"deleted":true,"occurred_at":"2026-05-01T12:00:00Z"}`))
	if err != nil || ev.HostID != "h" || ev.Version != 9 || !ev.Deleted {
		t.Fatalf("ev %+v, %v", ev, err)
	}
	for name, body := range map[string]string{
		"no event id":     `{"scope":"environment","environment_id":"env","config_type":"labels"}`,
		"no scope":        `{"event_id":"e","environment_id":"env","config_type":"labels"}`,
		"host without id": `{"event_id":"e","scope":"host","environment_id":"env","config_type":"labels"}`,
		"no environment":  `{"event_id":"e","scope":"environment","config_type":"labels"}`,
		"bad type":        `{"event_id":"e","scope":"environment","environment_id":"env","config_type":"../x"}`,
		"negative":        `{"event_id":"e","scope":"environment","environment_id":"env","config_type":"labels","version":-1}`,
		"not json":        `{`,
	} {
		if _, err := decodeConfigChanged([]byte(body)); !errors.Is(err, deliver.ErrInvalidRequest) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func FuzzDecodeFetchRequest(f *testing.F) {
	f.Add(protocol.FetchSubject(agent), []byte(`{"agent_id":"`+agent+`"}`))
	f.Add(protocol.FetchSubject("a"), []byte(`{"agent_id":"b"}`))
	f.Add("configsync.agent..config.fetch", []byte(`{"agent_id":""}`))
	f.Add(protocol.FetchSubject("a"), []byte(`{"agent_id":"a\u0000"}`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		got, err := decodeFetchRequest(subject, data)
		if err != nil {
			if !errors.Is(err, deliver.ErrInvalidRequest) && !errors.Is(err, deliver.ErrForbidden) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		token, ok := protocol.AgentIDFromSubject(subject)
		if !ok || token != got || !protocol.ValidAgentID(got) {
			t.Fatalf("accepted agent %q on subject %q", got, subject)
		}
		var req protocol.FetchRequest
		if json.Unmarshal(data, &req) != nil || req.AgentID != got {
			t.Fatalf("accepted a payload that does not name %q", got)
		}
	})
}

func FuzzDecodeConfigChanged(f *testing.F) {
	f.Add([]byte(`{"event_id":"e1","scope":"environment","client_id":"c","environment_id":"env","config_type":"collectors","version":3,"occurred_at":"2026-05-01T12:00:00Z"}`))
	f.Add([]byte(`{"event_id":"e1","scope":"host","environment_id":"env","host_id":"h","config_type":"labels","version":9,"deleted":true}`))
	f.Add([]byte(`{"scope":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := decodeConfigChanged(data)
		if err != nil {
			if !errors.Is(err, deliver.ErrInvalidRequest) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if ev.EventID == "" || ev.EnvironmentID == "" || !protocol.ValidConfigTypeName(ev.ConfigType) || ev.Version < 0 {
			t.Fatalf("accepted %+v", ev)
		}
		switch ev.Scope {
		case protocol.ScopeEnvironment:
		case protocol.ScopeHost:
			if ev.HostID == "" {
				t.Fatalf("host event without host accepted: %+v", ev)
			}
		default:
			t.Fatalf("scope %q accepted", ev.Scope)
		}
	})
}

// The request an agent sends is recognised without decoding; near misses are decoded as before.
func TestDecodeFetchRequestPlainForm(t *testing.T) {
	data, _ := json.Marshal(protocol.FetchRequest{AgentID: agent})
	if !isPlainFetchRequest(data, agent) {
		t.Fatalf("%s is not recognised as the plain request", data)
	}
	for _, body := range []string{
		`{"agent_id":"` + agent + `"} `, `{"AGENT_ID":"` + agent + `"}`, `{ "agent_id":"` + agent + `"}`,
		`{"agent_id":"` + agent[:10] + `"}`, `{"agent_id":"` + agent + `x"}`, `{"agent_id":"` + agent + `","x":1}`,
	} {
		if isPlainFetchRequest([]byte(body), agent) {
			t.Errorf("%s taken for the plain request", body)
		}
		got, err := decodeFetchRequest(protocol.FetchSubject(agent), []byte(body))
		var req protocol.FetchRequest
		uerr := json.Unmarshal([]byte(body), &req)
		if (err == nil) != (uerr == nil && req.AgentID == agent) || (err == nil && got != agent) {
			t.Errorf("%s: got %q, %v; json decodes %q, %v", body, got, err, req.AgentID, uerr)
		}
	}
}
