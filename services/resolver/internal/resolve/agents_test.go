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

// ResolveAgents reads the store once for the whole request and answers each host as Resolve does;
// environment-only configs, merged once per environment and request, must not leak into hosts with
// overrides or across environments.
func TestResolveAgentsMatchesResolve(t *testing.T) {
	const other = "e0000000-0000-0000-0000-000000000002"
	s := newFakeStore()
	s.addEnv(env, client)
	s.addEnv(other, client)
	s.putEnv(env, "labels", `{"static":{"env":"prod","team":"core"}}`, 1)
	s.putEnv(env, "healthcheck", `{"interval_seconds":60}`, 2)
	s.putEnv(other, "labels", `{"static":{"env":"stage"}}`, 3)
	var agents []string
	for i := 1; i <= 8; i++ {
		e := env
		if i > 6 {
			e = other
		}
		agent := fmt.Sprintf("agent-%d", i)
		agents = append(agents, agent)
		s.addHost(fakeHost{Host: resolve.Host{ID: id(i), AgentID: agent, EnvironmentID: e}, revoked: i == 5})
	}
	s.putHost(id(2), "labels", `{"static":{"team":"web"}}`, 10)
	s.putHost(id(3), "healthcheck", "", 11) // tombstone
	s.putHost(id(7), "tracing", `{"enabled":true}`, 12)
	r := resolve.New(s, resolve.Options{})
	ctx := context.Background()

	reply, err := r.ResolveAgents(ctx, protocol.ResolveAgentsRequest{AgentIDs: append(agents, "agent-1", "agent-99")})
	if err != nil {
		t.Fatal(err)
	}
	if s.agentCalls != 1 {
		t.Fatalf("%d store reads, want 1", s.agentCalls)
	}
	if !reflect.DeepEqual(reply.Missing, []string{"agent-5", "agent-99"}) {
		t.Fatalf("missing = %v", reply.Missing)
	}
	if len(reply.Hosts) != 7 {
		t.Fatalf("%d hosts, want 7 (each known agent once)", len(reply.Hosts))
	}
	for i := range reply.Hosts {
		h, err := reply.Resolved(i)
		if err != nil {
			t.Fatal(err)
		}
		want, err := r.Resolve(ctx, protocol.ResolveRequest{AgentID: h.Host.AgentID})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(h, want) {
			t.Errorf("%s:\n ResolveAgents %+v\n Resolve       %+v", h.Host.AgentID, h, want)
		}
	}
	// Environment-only configs are shared: prod's labels and healthcheck and stage's labels, plus the
	// configs of hosts with a row of their own: agent-2's merged labels, agent-3's healthcheck (its
	// override is a tombstone) and agent-7's tracing.
	if len(reply.Configs) != 6 {
		t.Errorf("%d distinct configs, want 6: %+v", len(reply.Configs), reply.Configs)
	}
}

func TestResolveAgentsInvalid(t *testing.T) {
	s := oneHost()
	r := resolve.New(s, resolve.Options{})
	tooMany := make([]string, protocol.MaxResolveAgents+1)
	for i := range tooMany {
		tooMany[i] = "agent-1"
	}
	for _, req := range []protocol.ResolveAgentsRequest{
		{},
		{AgentIDs: tooMany},
		{AgentIDs: []string{"agent-1", ""}},
		{AgentIDs: []string{"agent 1"}},
		{AgentIDs: []string{"agent-1"}, Types: []string{"nope"}},
	} {
		if _, err := r.ResolveAgents(context.Background(), req); !errors.Is(err, resolve.ErrInvalidRequest) {
			t.Errorf("%.80v: err = %v, want ErrInvalidRequest", req, err)
		}
	}
	if s.agentCalls != 0 {
		t.Errorf("invalid requests reached the store %d times", s.agentCalls)
	}
}
