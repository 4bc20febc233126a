package resolver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/resolver"
	"github.com/configsync/configsync/services/resolver/internal/postgres"
	rsv "github.com/configsync/configsync/services/resolver/internal/resolve"
	"github.com/configsync/configsync/services/resolver/internal/seed"
)

// setsRequest is a resolve_sets request of this contract.
func setsRequest(types []string, agents ...string) protocol.ResolveSetsRequest {
	return protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract, AgentIDs: agents, Types: types}
}

// hostsOf expands a resolve_sets reply into one ResolveReply per host, in reply order.
func hostsOf(t *testing.T, reply protocol.ResolveSetsReply) []protocol.ResolveReply {
	t.Helper()
	if err := reply.Check(); err != nil {
		t.Fatalf("reply fails its contract check: %v", err)
	}
	var out []protocol.ResolveReply
	for _, set := range reply.Sets {
		for _, h := range set.Hosts {
			r := protocol.ResolveReply{Host: protocol.HostRef{HostID: h.HostID, AgentID: h.AgentID, ClientID: set.ClientID, EnvironmentID: set.EnvironmentID},
				Configs: map[string]protocol.EffectiveConfig{}}
			for typ, n := range set.Configs {
				r.Configs[typ] = reply.Configs[n]
			}
			out = append(out, r)
		}
	}
	return out
}

// resolve_sets answers each host exactly as resolve does, across environments and clients, with
// overrides, tombstones and environment-only types; unknown and revoked agents are reported missing.
func TestResolveSets(t *testing.T) {
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
		req := setsRequest(types, append(slices.Clone(agents), "agent-404", "agent-0")...)
		reply, code := call[protocol.ResolveSetsReply](t, s.client, protocol.ResolveSetsSubject, req)
		if code != "" {
			t.Fatalf("resolve_sets %v: error %s", types, code)
		}
		if !sameSet(reply.Missing, "agent-3", "agent-404") || len(reply.Missing) != 2 || len(reply.Remaining) != 0 {
			t.Fatalf("missing %v, remaining %v", reply.Missing, reply.Remaining)
		}
		var got []string
		for _, h := range hostsOf(t, reply) {
			got = append(got, h.Host.AgentID)
			want := resolve(t, s.client, protocol.ResolveRequest{AgentID: h.Host.AgentID, Types: types})
			if !reflect.DeepEqual(testinfra.JSONValue(t, h), testinfra.JSONValue(t, want)) {
				t.Errorf("%s (types %v):\n resolve_sets %+v\n resolve      %+v", h.Host.AgentID, types, h, want)
			}
		}
		// prod's environment-only configs are sent once for its three hosts.
		if n := len(reply.Configs); n > 10 {
			t.Errorf("%d configs in the reply; shared ones are repeated", n)
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"agent-0", "agent-1", "agent-2", "agent-4", "agent-5"}) {
			t.Errorf("hosts %v, want each known agent once", got)
		}
	}
}

func TestResolveSetsErrorCodes(t *testing.T) {
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
		{"no agents", setsRequest(nil)},
		{"too many agents", setsRequest(nil, tooMany...)},
		{"bad agent id", setsRequest(nil, "agent-web-1", "a.b")},
		{"unknown type", setsRequest([]string{"nope"}, "agent-web-1")},
		{"unknown field", json.RawMessage(`{"contract":1,"agent_ids":["agent-web-1"],"agent_id":"x"}`)},
		{"wrong type", json.RawMessage(`{"contract":1,"agent_ids":"agent-web-1"}`)},
		{"huge", json.RawMessage(`{"contract":1,"agent_ids":["` + strings.Repeat("a", 500<<10) + `"]}`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, code := call[json.RawMessage](t, s.client, protocol.ResolveSetsSubject, c.req); code != protocol.CodeInvalidRequest {
				t.Fatalf("code %q, want %q", code, protocol.CodeInvalidRequest)
			}
		})
	}
	// A request of another contract (a delivery newer or older than this resolver, mid-upgrade), with
	// fields this resolver does not know, is a contract mismatch, never read as if it were its own.
	for _, body := range []string{`{"contract":2,"agent_ids":["agent-web-1"],"stage":"canary"}`, `{"agent_ids":["agent-web-1"]}`} {
		if _, code := call[json.RawMessage](t, s.client, protocol.ResolveSetsSubject, json.RawMessage(body)); code != protocol.CodeContractMismatch {
			t.Errorf("%s: code %q, want %q", body, code, protocol.CodeContractMismatch)
		}
	}
	reply, code := call[protocol.ResolveSetsReply](t, s.client, protocol.ResolveSetsSubject, setsRequest(nil, "agent-web-1"))
	if code != "" || len(hostsOf(t, reply)) != 1 || reply.Contract != protocol.ResolveSetsContract {
		t.Fatalf("resolve_sets after errors: %+v, %s", reply, code)
	}
}

// Two resolver replicas over one database, each with its own environment cache, both warm: every
// write (an environment change, a deletion, a new host override) is served by both from their next
// request on. The cache takes an entry only at the version the database reports for the batch, so no
// replica depends on seeing the change's event.
func TestResolveSetsTwoReplicasSeeEveryWrite(t *testing.T) {
	pool := testinfra.Postgres(t)
	db := seed.New(t, pool)
	env := db.Environment("prod")
	v1 := db.PutEnv(env, "labels", `{"static":{"env":"prod","rev":"1"}}`)
	db.PutEnv(env, "healthcheck", `{"interval_seconds":60,"timeout_seconds":5}`)
	host := db.Host(env, "web-1", "agent-1")
	db.Host(env, "web-2", "agent-2")
	replicas := []*rsv.Resolver{rsv.New(postgres.NewStore(pool), rsv.Options{}), rsv.New(postgres.NewStore(pool), rsv.Options{})}
	ctx := context.Background()
	labels := func(r *rsv.Resolver, agent string) protocol.EffectiveConfig {
		t.Helper()
		reply, err := r.ResolveSets(ctx, setsRequest(nil, "agent-1", "agent-2"))
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hostsOf(t, reply) {
			if h.Host.AgentID == agent {
				return h.Configs["labels"]
			}
		}
		t.Fatalf("%s not answered: %+v", agent, reply)
		return protocol.EffectiveConfig{}
	}
	check := func(step, agent, data string, version int64) {
		t.Helper()
		for i, r := range replicas {
			got := labels(r, agent)
			if got.Version != version {
				t.Errorf("%s: replica %d serves %s version %d, want %d", step, i, agent, got.Version, version)
				continue
			}
			if data == "null" { // a tombstone: no data (encoded as null on the wire)
				if len(got.ConfigData) != 0 && string(got.ConfigData) != "null" {
					t.Errorf("%s: replica %d serves %s labels %s, want none", step, i, agent, got.ConfigData)
				}
				continue
			}
			jsonEqual(t, fmt.Sprintf("%s: replica %d %s labels", step, i, agent), got.ConfigData, data)
		}
	}
	for range 2 { // the second round comes from the caches
		check("warm", "agent-2", `{"static":{"env":"prod","rev":"1"}}`, v1)
	}
	for i, r := range replicas {
		if st := r.EnvCacheStats(); st.Hits == 0 || st.Misses != 1 {
			t.Fatalf("replica %d cache stats %+v, want hits and exactly one miss", i, st)
		}
	}

	v2 := db.PutEnv(env, "labels", `{"static":{"env":"prod","rev":"2"}}`)
	check("environment write", "agent-2", `{"static":{"env":"prod","rev":"2"}}`, v2)
	v := db.PutHost(host, "labels", `{"static":{"team":"web"}}`)
	check("host override", "agent-1", `{"static":{"env":"prod","rev":"2","team":"web"}}`, v)
	check("host override, other host", "agent-2", `{"static":{"env":"prod","rev":"2"}}`, v2)
	v = db.DeleteEnv(env, "labels")
	check("environment deletion", "agent-2", `null`, v)
}
