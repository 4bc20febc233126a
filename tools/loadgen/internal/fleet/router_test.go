package fleet

import "testing"

func TestRouterDemultiplexesByLastToken(t *testing.T) {
	a, b := newAgent("agent-a", nil, nil), newAgent("agent_b-2", nil, nil)
	r := NewRouter([]*Agent{a, b})
	if r.Len() != 2 {
		t.Fatalf("Len = %d", r.Len())
	}
	cases := []struct {
		subject string
		want    *Agent
	}{
		{"configsync.cmd.agent-a", a},
		{"configsync.cmd.agent_b-2", b},
		{"configsync.cmd.agent-c", nil},              // not ours: a real agent sharing the account
		{"configsync.cmd.", nil},                     // no token
		{"configsync.cmd.agent-a.extra", nil},        // more tokens than a command subject has
		{"configsync.agent.agent-a.config.ack", nil}, // not a command subject
		{"configsync.cmdx.agent-a", nil},
		{"", nil},
	}
	for _, c := range cases {
		got, ok := r.Route(c.subject)
		if got != c.want || ok != (c.want != nil) {
			t.Errorf("Route(%q) = %v, %v; want %v", c.subject, got, ok, c.want)
		}
	}
}

func TestRouterIsSafeForConcurrentLookups(t *testing.T) {
	agents := make([]*Agent, 100)
	for i := range agents {
		agents[i] = newAgent("a"+string(rune('A'+i%26))+string(rune('a'+i/26)), nil, nil)
	}
	r := NewRouter(agents)
	done := make(chan struct{})
	for w := 0; w < 4; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for _, a := range agents {
				if got, ok := r.Route("configsync.cmd." + a.ID); !ok || got != a {
					t.Errorf("Route(%s) = %v", a.ID, got)
				}
			}
		}()
	}
	for w := 0; w < 4; w++ {
		<-done
	}
}
