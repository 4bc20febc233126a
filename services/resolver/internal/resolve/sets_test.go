package resolve_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// setsFleet is eight agents over two environments: agent-2 overrides labels, agent-3 holds a
// tombstone of healthcheck, agent-5 is revoked, agent-7 (other environment) has tracing of its own.
func setsFleet() *fakeStore {
	const other = "e0000000-0000-0000-0000-000000000002"
	s := newFakeStore()
	s.addEnv(env, client)
	s.addEnv(other, client)
	s.putEnv(env, "labels", `{"static":{"env":"prod","team":"core"}}`, 1)
	s.putEnv(env, "healthcheck", `{"interval_seconds":60}`, 2)
	s.putEnv(other, "labels", `{"static":{"env":"stage"}}`, 3)
	for i := 1; i <= 8; i++ {
		e := env
		if i > 6 {
			e = other
		}
		s.addHost(fakeHost{Host: resolve.Host{ID: id(i), AgentID: fmt.Sprintf("agent-%d", i), EnvironmentID: e}, revoked: i == 5})
	}
	s.putHost(id(2), "labels", `{"static":{"team":"web"}}`, 10)
	s.putHost(id(3), "healthcheck", "", 11) // tombstone
	s.putHost(id(7), "tracing", `{"enabled":true}`, 12)
	return s
}

func setsRequest(agents ...string) protocol.ResolveSetsRequest {
	return protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract, AgentIDs: agents}
}

// expandSets gives each agent of a reply its configs by type, as a receiver reads them.
func expandSets(t *testing.T, reply protocol.ResolveSetsReply) map[string]map[string]protocol.EffectiveConfig {
	t.Helper()
	if err := reply.Check(); err != nil {
		t.Fatalf("reply fails its contract check: %v", err)
	}
	out := map[string]map[string]protocol.EffectiveConfig{}
	for _, set := range reply.Sets {
		for _, h := range set.Hosts {
			if _, dup := out[h.AgentID]; dup {
				t.Fatalf("agent %s in two sets", h.AgentID)
			}
			out[h.AgentID] = map[string]protocol.EffectiveConfig{}
			for typ, n := range set.Configs {
				out[h.AgentID][typ] = reply.Configs[n]
			}
		}
	}
	return out
}

// ResolveSets reads the store once for the whole request and gives each host what Resolve gives it;
// hosts without overrides in one environment form one set, every config is sent once, and
// environment-only configs must not leak into hosts with overrides or across environments.
func TestResolveSetsMatchesResolve(t *testing.T) {
	s := setsFleet()
	r := resolve.New(s, resolve.Options{})
	ctx := context.Background()
	var agents []string
	for i := 1; i <= 8; i++ {
		agents = append(agents, fmt.Sprintf("agent-%d", i))
	}
	reply, err := r.ResolveSets(ctx, setsRequest(append(agents, "agent-1", "agent-99")...))
	if err != nil {
		t.Fatal(err)
	}
	if s.fetchCalls != 1 || s.envReads != 1 {
		t.Fatalf("%d host reads and %d environment reads, want 1 and 1", s.fetchCalls, s.envReads)
	}
	if reply.Contract != protocol.ResolveSetsContract {
		t.Fatalf("contract %d", reply.Contract)
	}
	if !reflect.DeepEqual(reply.Missing, []string{"agent-5", "agent-99"}) {
		t.Fatalf("missing = %v", reply.Missing)
	}
	got := expandSets(t, reply)
	if len(got) != 7 {
		t.Fatalf("%d agents answered, want 7 (each known agent once)", len(got))
	}
	for agent, configs := range got {
		want, err := r.Resolve(ctx, protocol.ResolveRequest{AgentID: agent})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(configs, want.Configs) {
			t.Errorf("%s:\n ResolveSets %+v\n Resolve     %+v", agent, configs, want.Configs)
		}
	}
	// Sets: prod without overrides (agents 1, 4, 6), agent-2, agent-3, stage without overrides (agent
	// 8), agent-7. Configs: prod's labels and healthcheck, agent-2's labels, agent-3's healthcheck
	// tombstone, stage's labels, agent-7's tracing.
	if len(reply.Sets) != 5 {
		t.Errorf("%d sets, want 5: %+v", len(reply.Sets), reply.Sets)
	}
	if len(reply.Configs) != 6 {
		t.Errorf("%d distinct configs, want 6: %+v", len(reply.Configs), reply.Configs)
	}
}

// The environment cache: a second batch of the same environments reads only the hosts; a write to an
// environment (a newer row version, as the database reports it) is served from the very next batch,
// by every Resolver that shares the database, whether or not it served the environment before.
func TestResolveSetsEnvironmentCache(t *testing.T) {
	s := setsFleet()
	ctx := context.Background()
	a, b := resolve.New(s, resolve.Options{}), resolve.New(s, resolve.Options{})
	labels := func(r *resolve.Resolver) string {
		t.Helper()
		reply, err := r.ResolveSets(ctx, setsRequest("agent-1", "agent-4"))
		if err != nil {
			t.Fatal(err)
		}
		got := expandSets(t, reply)
		if len(reply.Sets) != 1 || len(got) != 2 {
			t.Fatalf("sets %+v, want one set of agent-1 and agent-4", reply.Sets)
		}
		return string(got["agent-4"]["labels"].ConfigData)
	}
	if got := labels(a); got != `{"static":{"env":"prod","team":"core"}}` {
		t.Fatalf("labels = %s", got)
	}
	reads := s.envReads
	for range 3 {
		labels(a)
	}
	if s.envReads != reads {
		t.Fatalf("%d environment reads for cached batches, want none", s.envReads-reads)
	}
	if st := a.EnvCacheStats(); st.Hits != 3 || st.Misses != 1 {
		t.Fatalf("cache stats %+v, want 3 hits and 1 miss", st)
	}
	labels(b) // b caches the old version too

	s.putEnv(env, "labels", `{"static":{"env":"prod","team":"platform"}}`, 20)
	for name, r := range map[string]*resolve.Resolver{"a": a, "b": b} {
		if got := labels(r); got != `{"static":{"env":"prod","team":"platform"}}` {
			t.Errorf("replica %s after the write: labels = %s", name, got)
		}
	}
	// A deletion is a newer tombstone: the agents get the version with null data.
	s.putEnv(env, "labels", "", 21)
	reply, err := b.ResolveSets(ctx, setsRequest("agent-1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := expandSets(t, reply)["agent-1"]["labels"]; got.Version != 21 || (len(got.ConfigData) != 0 && string(got.ConfigData) != "null") {
		t.Errorf("after the deletion: labels = %+v", got)
	}
}

func TestResolveSetsInvalid(t *testing.T) {
	s := oneHost()
	r := resolve.New(s, resolve.Options{})
	tooMany := make([]string, protocol.MaxResolveAgents+1)
	for i := range tooMany {
		tooMany[i] = "agent-1"
	}
	for _, req := range []protocol.ResolveSetsRequest{
		setsRequest(),
		setsRequest(tooMany...),
		setsRequest("agent-1", ""),
		setsRequest("agent 1"),
		{Contract: protocol.ResolveSetsContract, AgentIDs: []string{"agent-1"}, Types: []string{"nope"}},
	} {
		if _, err := r.ResolveSets(context.Background(), req); !errors.Is(err, resolve.ErrInvalidRequest) {
			t.Errorf("%.80v: err = %v, want ErrInvalidRequest", req, err)
		}
	}
	for _, contract := range []int{0, protocol.ResolveSetsContract + 1} {
		req := protocol.ResolveSetsRequest{Contract: contract, AgentIDs: []string{"agent-1"}}
		if _, err := r.ResolveSets(context.Background(), req); !errors.Is(err, resolve.ErrContractMismatch) {
			t.Errorf("contract %d: err = %v, want ErrContractMismatch", contract, err)
		}
	}
	if s.fetchCalls != 0 {
		t.Errorf("invalid requests reached the store %d times", s.fetchCalls)
	}
}
