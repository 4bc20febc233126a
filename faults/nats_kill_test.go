package faults_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/configsync/configsync/agent/agentrun"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/delivery"
)

// TestNATSKilledMidEnvironmentPush kills the NATS server while delivery is half-way through an
// environment-wide push, then restarts it (same port, same JetStream store, as after a crash).
//
// Setup: every service in-process, each with its own reconnecting NATS connection, and six real
// agents (agentrun, the library cmd/agent runs), because what is under test here is the agents'
// behaviour across the outage: reconnect, re-fetch, and not applying a redelivered version twice. The
// config type is labels, and each host's override adds a dynamic label whose command appends a line to
// a file of that agent: the labels callback runs it synchronously on every apply, so the file counts
// the agent's applies from outside, whatever path (startup, push, re-fetch) they take. A wire tap on
// each agent's connection records the pushes it gets and the acks it sends. Delivery pushes one host
// per page and the resolver's page query is gated, so the kill lands after exactly one agent was
// pushed and acknowledged and before the others were: mid-push by construction, not by timing. The
// redone fan-out is held the same way until every agent has reconnected and re-fetched, so each agent
// meets the redelivered push holding the version already.
//
// Proves: every agent converges to the new version (its cache holds it), every agent's ack lands in
// host_config_apply_status (none lost), the interrupted fan-out is redone to the end, and no agent
// applies the new version more than once.
func TestNATSKilledMidEnvironmentPush(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	gate := newPageGate()
	s.startBackend(gate, func(c *delivery.Config) { c.PushPageSize = 1 })
	api := s.startAPI()
	ten := api.newTenant("nats-kill")
	hosts := api.registerHosts(ten.EnvID, "web", 6)

	const typ = "labels"
	probes := t.TempDir()
	applies := func(a *realAgent) int {
		b, _ := os.ReadFile(filepath.Join(probes, a.host.AgentID))
		return strings.Count(string(b), "\n")
	}
	for _, h := range hosts {
		api.putHost(h.ID, typ, fmt.Sprintf(`{"dynamic":[{"name":"applied","source":"command","interval":"1h",
			"command":["sh","-c","echo x >> %s; echo ok"]}]}`, filepath.Join(probes, h.AgentID)))
	}
	// Newer than every override: the effective version of every host.
	v1 := api.putEnv(ten.EnvID, typ, `{"static":{"rollout":"one"}}`)
	// The probe label runs a shell, which the agent's local policy must list (the resolved binary).
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	pol := agentrun.DefaultConfig().Policy
	pol.Commands = []string{sh}
	agents := make([]*realAgent, len(hosts))
	for i, h := range hosts {
		agents[i] = startRealAgentWithPolicy(t, s, h, pol)
	}
	s.waitApplied(30*time.Second, hosts, typ, v1)
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		for _, h := range hosts {
			if !s.heartbeatSeen(h.ID) {
				return errors.New("no heartbeat from " + h.AgentID)
			}
		}
		return nil
	}, "every agent's first heartbeat to be stored")
	// The agents took v1 from their startup fetch; its fan-out (a page per host) may still be running.
	// Armed now, the gate would hold one of its pages instead of v2's.
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		return s.consumerIdle(protocol.EventsStream, "configsync-delivery-push")
	}, "the fan-outs of the setup to finish")

	gate.arm(1)
	for _, a := range agents {
		if n := applies(a); n != 1 {
			t.Fatalf("agent %s applied labels %d times at startup, want 1", a.host.AgentID, n)
		}
	}
	v2 := api.putEnv(ten.EnvID, typ, `{"static":{"rollout":"two"}}`)
	var pushedBefore []string
	testinfra.EventuallyNoError(t, 20*time.Second, func() error {
		pushedBefore = pushedBefore[:0]
		for _, h := range hosts {
			if s.applyStatus(h.ID, typ).Version == v2 {
				pushedBefore = append(pushedBefore, h.AgentID)
			}
		}
		if gate.holding() > 0 && len(pushedBefore) == 1 {
			return nil
		}
		return fmt.Errorf("%d page queries held, hosts acknowledged v%d: %v", gate.holding(), v2, pushedBefore)
	}, "the first host pushed and acknowledged, the next page held")

	s.nats.Shutdown()
	testinfra.EventuallyNoError(t, 20*time.Second, func() error {
		if s.logged("push failed, will redo", map[string]any{"version": v2}) > 0 {
			return nil
		}
		return errors.New("no \"push failed, will redo\" yet")
	}, "delivery to give up the interrupted fan-out")
	// Release the held query (its answer goes nowhere) and hold the redone fan-out at its first page
	// until every agent has reconnected and re-fetched: then each agent already holds the new version
	// when the redone push reaches it, whatever the agents' reconnect timing.
	gate.open()
	gate.arm(0)
	s.nats.Restart(t)

	testinfra.EventuallyNoError(t, 60*time.Second, func() error {
		for _, a := range agents {
			if len(a.logLines("nats reconnected")) == 0 || len(a.logLines("config fetch succeeded")) == 0 {
				return fmt.Errorf("agent %s has not reconnected and re-fetched yet", a.host.AgentID)
			}
			if v, _ := a.cached(typ); v != v2 {
				return fmt.Errorf("agent %s caches %s v%d", a.host.AgentID, typ, v)
			}
		}
		return nil
	}, "every agent to reconnect, re-fetch and cache the new version")
	s.waitApplied(60*time.Second, hosts, typ, v2)
	testinfra.Eventually(t, 30*time.Second, func() bool {
		return gate.holding() > 0
	}, "the event to be redelivered and its fan-out to reach the gate")
	pushesBefore := make([]int, len(agents))
	for i, a := range agents {
		pushesBefore[i] = a.commands(typ, v2)
	}
	gate.open()
	testinfra.EventuallyNoError(t, 60*time.Second, func() error {
		if s.logged("push done", map[string]any{"version": v2}) > 0 {
			return nil
		}
		return errors.New("no \"push done\" for the new version")
	}, "the redone fan-out to run to the end")
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		return s.consumerIdle("CONFIGSYNC_EVENTS", "configsync-delivery-push")
	}, "delivery's event consumer to settle")
	barrier(t, s.nc, agents)

	t.Logf("pushed and acknowledged before the kill: %v", pushedBefore)
	for i, a := range agents {
		t.Logf("agent %s: %d pushes of v%d received (%d after the restart), %d acks of it sent, labels applied %d times",
			a.host.AgentID, a.commands(typ, v2), v2, a.commands(typ, v2)-pushesBefore[i], len(a.acked(typ, v2)), applies(a))
		if a.commands(typ, v2) == pushesBefore[i] {
			t.Errorf("agent %s never received the redone push of %s v%d", a.host.AgentID, typ, v2)
		}
		// Once at startup (v1), once for v2: a redelivered version must not be applied again.
		if n := applies(a); n != 2 {
			t.Errorf("agent %s applied %s %d times, want 2 (v%d at startup, v%d once)", a.host.AgentID, typ, n, v1, v2)
		}
		if a.err != nil {
			t.Errorf("agent %s stopped: %v", a.host.AgentID, a.err)
		}
		if t.Failed() {
			for _, l := range strings.Split(string(a.log.Bytes()), "\n") {
				if strings.Contains(l, "config") || strings.Contains(l, "label") || strings.Contains(l, "nats") {
					t.Logf("agent %s log: %.300s", a.host.AgentID[:8], l)
				}
			}
		}
	}
}

// TestAckInFlightWhenNATSDies loses one agent's acknowledgement the way a NATS crash loses it: the agent
// has written the ack to its socket, the server dies before reading it, the agent reconnects.
//
// Setup: everything in-process with one real agent whose wire tap swallows the bytes carrying its ack
// of the new version and then cuts the connection (what the agent sees when the server dies with
// unread bytes in its socket buffer). Killing the whole server at that exact instant cannot be timed;
// cutting this one connection at that byte is the same event for the agent, deterministically.
//
// Proves (or, today, disproves): no ack is lost: the host's apply status reaches the new version
// after the agent reconnects and re-syncs.
func TestAckInFlightWhenNATSDies(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startBackend(nil, nil)
	api := s.startAPI()
	ten := api.newTenant("ack-in-flight")
	h := api.registerHosts(ten.EnvID, "solo", 1)[0]

	const typ = "healthcheck"
	v1 := api.putEnv(ten.EnvID, typ, `{"interval_seconds":60,"timeout_seconds":5}`)
	var armed atomic.Bool // lose the first ack of a version newer than v1
	lost := make(chan int64, 1)
	agent := startRealAgent(t, s, h, func(w *wireTap) {
		w.lose = func(subject string, payload []byte) bool {
			var ack protocol.Ack
			if subject != protocol.AckSubject(h.AgentID) || json.Unmarshal(payload, &ack) != nil || ack.Version <= v1 {
				return false
			}
			if armed.CompareAndSwap(true, false) {
				lost <- ack.Version
				return true
			}
			return false
		}
	})
	s.waitApplied(30*time.Second, []host{h}, typ, v1)
	testinfra.Eventually(t, 30*time.Second, func() bool {
		return s.heartbeatSeen(h.ID)
	}, "the agent's heartbeat to be stored")

	armed.Store(true)
	v2 := api.putEnv(ten.EnvID, typ, `{"interval_seconds":30,"timeout_seconds":5}`)
	testinfra.Eventually(t, 30*time.Second, func() bool {
		return len(agent.acked(typ, v2)) > 0 && len(agent.logLines("nats reconnected")) > 0 && len(agent.logLines("config fetch succeeded")) > 0
	}, "the agent to apply the new version, lose its ack and reconnect")
	if v := <-lost; v != v2 {
		t.Fatalf("lost the ack of v%d, want v%d", v, v2)
	}
	testinfra.EventuallyNoError(t, 20*time.Second, func() error {
		a := s.applyStatus(h.ID, typ)
		if a.Version == v2 {
			return nil
		}
		return fmt.Errorf("apply status %+v; the agent sent %d acks of v%d (the first was lost in flight)", a, len(agent.acked(typ, v2)), v2)
	}, "the lost ack to be made good after the reconnect")
}
