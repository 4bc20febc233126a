package faults_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// fakeAgent is a simulated agent speaking libs/protocol: it records every config_update it receives
// and acknowledges each one as applied, exactly as the command arrived (it keeps no state of its own,
// so the tests see precisely what delivery sent).
type fakeAgent struct {
	id string
	nc *nats.Conn

	mu   sync.Mutex
	cmds []protocol.Command
}

// newFakeAgent subscribes a fake agent to its command subject on nc.
func newFakeAgent(t testing.TB, nc *nats.Conn, agentID string) *fakeAgent {
	t.Helper()
	a := &fakeAgent{id: agentID, nc: nc}
	sub, err := nc.Subscribe(protocol.CommandSubject(agentID), a.onCommand)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return a
}

func newFakeAgents(t testing.TB, nc *nats.Conn, hosts []host) []*fakeAgent {
	t.Helper()
	out := make([]*fakeAgent, len(hosts))
	for i, h := range hosts {
		out[i] = newFakeAgent(t, nc, h.AgentID)
	}
	return out
}

func (a *fakeAgent) onCommand(m *nats.Msg) {
	var cmd protocol.Command
	if err := json.Unmarshal(m.Data, &cmd); err != nil || cmd.Type != protocol.CommandConfigUpdate {
		return
	}
	a.mu.Lock()
	a.cmds = append(a.cmds, cmd)
	a.mu.Unlock()
	ack, _ := json.Marshal(protocol.Ack{AgentID: a.id, ConfigType: cmd.ConfigType, Version: cmd.Version,
		Status: protocol.AckApplied, AppliedAt: time.Now().UTC()})
	_ = a.nc.Publish(protocol.AckSubject(a.id), ack)
}

// received returns the commands of configType received so far, in arrival order.
func (a *fakeAgent) received(configType string) []protocol.Command {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []protocol.Command
	for _, c := range a.cmds {
		if c.ConfigType == configType {
			out = append(out, c)
		}
	}
	return out
}

// count returns how many commands of configType at version arrived.
func (a *fakeAgent) count(configType string, version int64) int {
	n := 0
	for _, c := range a.received(configType) {
		if c.Version == version {
			n++
		}
	}
	return n
}

// heartbeat publishes a heartbeat reporting versions.
func (a *fakeAgent) heartbeat(t testing.TB, hash string, versions map[string]int64) {
	t.Helper()
	var maxV int64
	for _, v := range versions {
		maxV = max(maxV, v)
	}
	hb, _ := json.Marshal(protocol.Heartbeat{AgentID: a.id, SentAt: time.Now().UTC(), AgentVersion: "fake-1",
		ConfigHash: hash, ConfigVersion: maxV, ConfigVersions: versions})
	if err := a.nc.Publish(protocol.HeartbeatSubject(a.id), hb); err != nil {
		t.Fatal(err)
	}
}

// fetch asks delivery for every config of the agent.
func (a *fakeAgent) fetch(t testing.TB) protocol.FetchReply {
	t.Helper()
	req, _ := json.Marshal(protocol.FetchRequest{AgentID: a.id})
	msg, err := testinfra.RequestAsAgent(a.nc, a.id, protocol.FetchSubject(a.id), req, 10*time.Second)
	if err != nil {
		t.Fatalf("fetch as %s: %v", a.id, err)
	}
	var reply protocol.FetchReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		t.Fatalf("fetch as %s: decode reply: %v", a.id, err)
	}
	return reply
}

// bringOnline has every fake heartbeat and waits until ack-ingest stored the heartbeats, so delivery
// counts the hosts as online.
func (s *stack) bringOnline(agents []*fakeAgent, hosts []host) {
	s.t.Helper()
	for _, a := range agents {
		a.heartbeat(s.t, "hash-online", map[string]int64{})
	}
	testinfra.EventuallyNoError(s.t, 20*time.Second, func() error {
		for _, h := range hosts {
			if !s.heartbeatSeen(h.ID) {
				return fmt.Errorf("no heartbeat stored for host %s", h.ID)
			}
		}
		return nil
	}, "fake agents' heartbeats to be stored")
}

// waitReceived waits until every fake received configType at version at least once.
func waitReceived(t testing.TB, timeout time.Duration, agents []*fakeAgent, configType string, version int64) {
	t.Helper()
	testinfra.EventuallyNoError(t, timeout, func() error {
		for _, a := range agents {
			if a.count(configType, version) == 0 {
				return fmt.Errorf("agent %s has %s versions %v", a.id, configType, versionsOf(a.received(configType)))
			}
		}
		return nil
	}, fmt.Sprintf("%s v%d to reach %d fake agents", configType, version, len(agents)))
}

func versionsOf(cmds []protocol.Command) []int64 {
	out := make([]int64, len(cmds))
	for i, c := range cmds {
		out[i] = c.Version
	}
	return out
}
