package resolver_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver"
)

// resolve_agents answers each host exactly as resolve does, across environments and clients, with
// overrides, tombstones and environment-only types; unknown and revoked agents are reported missing.
func TestResolveAgents(t *testing.T) {
	s := newStack(t, 1, resolver.Config{})
	prod := s.db.Environment("prod")
	stage := s.db.Environment("stage")
	s.db.PutEnv(prod, "labels", `{"static":{"env":"prod","team":"core"}}`)
	s.db.PutEnv(prod, "healthcheck", `{"interval_seconds":60,"timeout_seconds":5}`)
	s.db.PutEnv(prod, "tracing", `{"enabled":true,"sample_ratio":0.5}`)
	s.db.DeleteEnv(prod, "tracing")
	s.db.PutEnv(stage, "labels", `{"static":{"env":"stage"}}`)
	var agents []string
	for i := range 6 {
		env := prod
		if i >= 4 {
			env = stage
		}
		agent := fmt.Sprintf("agent-%d", i)
		host := s.db.Host(env, fmt.Sprintf("web-%d", i), agent)
		agents = append(agents, agent)
		switch i {
		case 1:
			s.db.PutHost(host, "labels", `{"static":{"team":"web"}}`)
		case 2:
			s.db.PutHost(host, "healthcheck", `{"timeout_seconds":9}`)
			s.db.DeleteHost(host, "healthcheck")
		case 3:
			s.db.Revoke(host)
		case 5:
			s.db.PutHost(host, "agent_settings", `{"log_level":"debug"}`)
		}
	}

	for _, types := range [][]string{nil, {"labels", "tracing"}} {
		req := protocol.ResolveAgentsRequest{AgentIDs: append(slices.Clone(agents), "agent-404", "agent-0"), Types: types}
		reply, code := call[protocol.ResolveAgentsReply](t, s.client, protocol.ResolveAgentsSubject, req)
		if code != "" {
			t.Fatalf("resolve_agents %v: error %s", types, code)
		}
		if !sameSet(reply.Missing, "agent-3", "agent-404") || len(reply.Missing) != 2 || len(reply.Remaining) != 0 {
			t.Fatalf("missing %v, remaining %v", reply.Missing, reply.Remaining)
		}
		var got []string
		for i := range reply.Hosts {
			h, err := reply.Resolved(i)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, h.Host.AgentID)
			want := resolve(t, s.client, protocol.ResolveRequest{AgentID: h.Host.AgentID, Types: types})
			if !reflect.DeepEqual(normalize(t, h), normalize(t, want)) {
				t.Errorf("%s (types %v):\n resolve_agents %+v\n resolve        %+v", h.Host.AgentID, types, h, want)
			}
		}
		// prod's environment-only configs are sent once for its three hosts.
		if n := len(reply.Configs); n > 10 {
			t.Errorf("%d configs in the reply; shared ones are repeated", n)
		}
		if !slices.Equal(got, []string{"agent-0", "agent-1", "agent-2", "agent-4", "agent-5"}) {
			t.Errorf("hosts %v, want each known agent once, in request order", got)
		}
	}
}

// normalize re-encodes a reply so that equal JSON documents compare equal.
func normalize(t *testing.T, r protocol.ResolveReply) any {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestResolveAgentsErrorCodes(t *testing.T) {
	s := newStack(t, 1, resolver.Config{})
	env := s.db.Environment("prod")
	s.db.Host(env, "web-1", "agent-web-1")
	tooMany := make([]string, protocol.MaxResolveAgents+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("agent-%d", i)
	}
	cases := []struct {
		name string
		req  any
	}{
		{"no agents", protocol.ResolveAgentsRequest{}},
		{"too many agents", protocol.ResolveAgentsRequest{AgentIDs: tooMany}},
		{"bad agent id", protocol.ResolveAgentsRequest{AgentIDs: []string{"agent-web-1", "a.b"}}},
		{"unknown type", protocol.ResolveAgentsRequest{AgentIDs: []string{"agent-web-1"}, Types: []string{"nope"}}},
		{"unknown field", json.RawMessage(`{"agent_ids":["agent-web-1"],"agent_id":"x"}`)},
		{"wrong type", json.RawMessage(`{"agent_ids":"agent-web-1"}`)},
		{"huge", json.RawMessage(`{"agent_ids":["` + strings.Repeat("a", 500<<10) + `"]}`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, code := call[json.RawMessage](t, s.client, protocol.ResolveAgentsSubject, c.req); code != protocol.CodeInvalidRequest {
				t.Fatalf("code %q, want %q", code, protocol.CodeInvalidRequest)
			}
		})
	}
	reply, code := call[protocol.ResolveAgentsReply](t, s.client, protocol.ResolveAgentsSubject,
		protocol.ResolveAgentsRequest{AgentIDs: []string{"agent-web-1"}})
	if code != "" || len(reply.Hosts) != 1 {
		t.Fatalf("resolve_agents after errors: %+v, %s", reply, code)
	}
}
