package scenario

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestRealConnectionsAgainstDevstack runs the herd and a push with every agent on its own TLS connection
// as its own NATS user (the creds its registration issued): devstack's server grants each user only its
// own subjects, so every fetch answered and every ack persisted shows the agents used their own
// identities, inboxes and command subscriptions.
func TestRealConnectionsAgainstDevstack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	backend, _ := devstackBackend(ctx, t)
	const agents = 30
	var log bytes.Buffer
	runner := New(Options{
		Agents: agents, Scenarios: map[string]bool{Push: true, Herd: true},
		Jitter: 500 * time.Millisecond, FetchTimeout: 10 * time.Second, HeartbeatInterval: 10 * time.Second,
		Timeout: time.Minute, Pushes: 1, Credentials: 1, RegisterConcurrency: 4,
		Real: &RealConnections{SourceAddrs: 3, Concurrency: 8},
	}, backend, &log)
	res, err := runner.Run(ctx)
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, log.String())
	}
	s := res.ConnectStorm
	if s == nil || s.Conns != agents || s.Failed != 0 || s.Latency.Count != agents || s.SourceAddrs != 3 {
		t.Fatalf("connect storm = %+v", s)
	}
	if s.RSSAfter == 0 || s.CPU[CPUNATSServer] <= 0 || s.CPUPer10k != time.Duration(float64(s.CPU[CPUNATSServer])/(float64(agents)/10000)) {
		t.Errorf("the server's cost of the storm was not measured apart from the services': %+v", s)
	}
	if res.Fleet.Conns != agents {
		t.Errorf("fleet connections = %d, want one per agent (%d)", res.Fleet.Conns, agents)
	}
	if h := res.Herd; h == nil || h.OK != agents || h.Failed != 0 {
		t.Fatalf("herd = %+v", h)
	}
	p := res.Push
	if p == nil || !p.Complete || len(p.Runs) != 1 || p.Runs[0].Applied != agents || p.Runs[0].Persisted.Count != agents {
		t.Fatalf("push = %+v", p)
	}
	if f := res.Fleet; f.Commands != agents || f.AcksSent != agents || f.Foreign != 0 {
		t.Errorf("fleet = %+v", f)
	}
}
