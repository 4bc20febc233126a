package faults_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/configsync/configsync/agent/agentrun"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	ackingest "github.com/configsync/configsync/services/ack-ingest"
	"github.com/configsync/configsync/services/delivery"
)

// The convergence scenarios: pushes are the fast path, never the only one. Each one loses a push in a
// different way (the host looked offline, its heartbeat interval is long, ack-ingest was down, the
// push itself was lost, the lost push was a deletion) and checks that every real agent still reaches
// its latest config, within a heartbeat interval or so of the moment the backend could know. Agents
// heartbeat every second (intervals.heartbeat, set before they start); deadlines are many heartbeats
// long, and the time each agent took is logged, never asserted.

const convergeDeadline = 30 * time.Second

// convergence is one scenario's system: services in-process, real agents, a tenant.
type convergence struct {
	t      *testing.T
	s      *stack
	api    *apiClient
	ten    tenant
	hosts  []host
	agents []*realAgent
	ingest *service
}

type convergenceOptions struct {
	agents       int
	onlineWindow time.Duration // API and delivery; 0 means 90 s
	delivery     func(*delivery.Config)
	noAckIngest  bool // start without ack-ingest (startAckIngest later)
	waitOnline   bool // wait until every agent's heartbeat is stored
}

func newConvergence(t *testing.T, o convergenceOptions) *convergence {
	t.Helper()
	if o.onlineWindow == 0 {
		o.onlineWindow = 90 * time.Second
	}
	c := &convergence{t: t, s: newStack(t)}
	c.s.startResolver(nil)
	c.s.startCredential(nil)
	c.s.startDelivery(func(cfg *delivery.Config) {
		cfg.OnlineWindow = o.onlineWindow
		if o.delivery != nil {
			o.delivery(cfg)
		}
	})
	if !o.noAckIngest {
		c.startAckIngest()
	}
	c.s.startRelay()
	c.api = c.s.startAPIWindow(o.onlineWindow)
	c.ten = c.api.newTenant("convergence")
	c.api.putEnv(c.ten.EnvID, "intervals", `{"heartbeat":"1s"}`)
	c.hosts = c.api.registerHosts(c.ten.EnvID, "conv", o.agents)
	// 1 s heartbeats keep these tests short; the default policy would refuse anything under 5 s.
	pol := agentrun.DefaultConfig().Policy
	pol.Limits.MinInterval = time.Second
	for _, h := range c.hosts {
		c.agents = append(c.agents, startRealAgentWithPolicy(t, c.s, h, pol))
	}
	eventually(t, convergeDeadline, "every agent to fetch its configs", func() (bool, string) {
		for _, a := range c.agents {
			if _, ok := a.cached("intervals"); !ok {
				return false, a.host.AgentID + " holds no intervals yet"
			}
		}
		return true, ""
	})
	if o.waitOnline {
		c.waitHeartbeats()
	}
	return c
}

func (c *convergence) startAckIngest() {
	c.ingest = c.s.startAckIngestWith(func(cfg *ackingest.Config) { cfg.RepairBackoff, cfg.RepairGrace = 2*time.Second, time.Second })
}

func (c *convergence) waitHeartbeats() {
	eventually(c.t, convergeDeadline, "every agent's heartbeat to be stored", func() (bool, string) {
		for _, h := range c.hosts {
			if !c.s.heartbeatSeen(h.ID) {
				return false, "no heartbeat from " + h.AgentID
			}
		}
		return true, ""
	})
}

// waitConverged waits until every agent of agents holds configType at version (0: does not hold it)
// and logs how long each took from since.
func (c *convergence) waitConverged(what string, agents []*realAgent, configType string, version int64, since time.Time) {
	c.t.Helper()
	took := map[string]time.Duration{}
	eventually(c.t, convergeDeadline, what, func() (bool, string) {
		for _, a := range agents {
			if _, done := took[a.host.AgentID]; done {
				continue
			}
			v, ok := a.cached(configType)
			if (version == 0 && !ok) || (version != 0 && ok && v == version) {
				took[a.host.AgentID] = time.Since(since)
				continue
			}
			return false, fmt.Sprintf("agent %s holds %s at %d (present %v), want %d", a.host.AgentID, configType, v, ok, version)
		}
		return true, ""
	})
	var worst time.Duration
	for _, d := range took {
		worst = max(worst, d)
	}
	c.t.Logf("%s: %d agents converged, slowest after %s (%v)", what, len(agents), worst.Round(time.Millisecond), took)
}

// hostsOnline returns the API's online flag of every host of the tenant's environment.
func (c *convergence) hostsOnline() map[string]bool {
	var hs []struct {
		AgentID string `json:"agent_id"`
		Online  bool   `json:"online"`
	}
	c.api.must(http.MethodGet, "/api/v1/environments/"+c.ten.EnvID+"/hosts", nil, &hs)
	out := map[string]bool{}
	for _, h := range hs {
		out[h.AgentID] = h.Online
	}
	return out
}

// loseFor returns a delivery LosePush hook losing every push of configType to agentID, and a counter
// of the pushes it lost.
func loseFor(agentID, configType string) (func(string, []byte) bool, func() int) {
	var mu sync.Mutex
	lost := 0
	hook := func(to string, command []byte) bool {
		var cmd protocol.Command
		if to != agentID || json.Unmarshal(command, &cmd) != nil || cmd.ConfigType != configType {
			return false
		}
		mu.Lock()
		lost++
		mu.Unlock()
		return true
	}
	return hook, func() int { mu.Lock(); defer mu.Unlock(); return lost }
}

// TestWriteBetweenStartupFetchAndFirstHeartbeat: the agent fetched its configs, but its first
// heartbeat is not stored yet when a config changes, so delivery does not count the host as online and
// skips it (ack-ingest is started only after the push, and delivery is told not to treat that as ingest
// lag, so the skip is certain). Once ack-ingest stores the heartbeat, anti-entropy sees the host behind
// and delivery repairs it.
func TestWriteBetweenStartupFetchAndFirstHeartbeat(t *testing.T) {
	t.Parallel()
	c := newConvergence(t, convergenceOptions{agents: 1, noAckIngest: true,
		delivery: func(cfg *delivery.Config) { cfg.IngestLagAfter = time.Hour }})
	v := c.api.putEnv(c.ten.EnvID, "labels", `{"static":{"written":"after-fetch"}}`)
	eventually(t, convergeDeadline, "the push of the write, to no host", func() (bool, string) {
		n := c.s.logged("push done", map[string]any{"config_type": "labels", "version": v, "hosts": 0})
		return n > 0, "no push done with 0 hosts yet"
	})
	if _, ok := c.agents[0].cached("labels"); ok {
		t.Fatal("the agent got labels although its host was not online")
	}
	start := time.Now()
	c.startAckIngest()
	c.waitConverged("write between startup fetch and first heartbeat", c.agents, "labels", v, start)
}

// TestLongHeartbeatIntervalStaysOnline: intervals.heartbeat is set to 5 minutes, far above the online
// window (2 s here, 90 s by default). Hosts stay online by their own interval, so the next change is
// pushed to all of them (their next heartbeat is minutes away: only the push can bring it in time) and
// the API still shows them online.
func TestLongHeartbeatIntervalStaysOnline(t *testing.T) {
	t.Parallel()
	const window = 2 * time.Second
	c := newConvergence(t, convergenceOptions{agents: 3, onlineWindow: window, waitOnline: true})
	start := time.Now()
	vi := c.api.putEnv(c.ten.EnvID, "intervals", `{"heartbeat":"5m"}`)
	c.waitConverged("intervals.heartbeat 5m applied", c.agents, "intervals", vi, start)
	eventually(t, convergeDeadline, "every host to report its 5 minute interval", func() (bool, string) {
		var n int
		if err := c.s.db.QueryRow(t.Context(), `SELECT count(*) FROM hosts WHERE environment_id = $1 AND heartbeat_interval_ms = 300000`,
			c.ten.EnvID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == len(c.hosts), fmt.Sprintf("%d of %d hosts report it", n, len(c.hosts))
	})
	// Well past the window (and past three 1 s intervals): a fixed window would call them offline.
	time.Sleep(2 * window)
	start = time.Now()
	v := c.api.putEnv(c.ten.EnvID, "labels", `{"static":{"pushed":"to-long-interval-hosts"}}`)
	c.waitConverged("env PUT with 5m heartbeats", c.agents, "labels", v, start)
	for agent, online := range c.hostsOnline() {
		if !online {
			t.Errorf("GET /hosts shows %s offline although it heartbeats every 5 minutes", agent)
		}
	}
}

// TestAckIngestDownLongerThanTheOnlineWindow: ack-ingest stops; agents keep heartbeating into the
// stream, but nothing is stored, so by their stored heartbeats every host is offline after the window
// (the API says so). Writes made meanwhile still reach every agent: delivery sees that ack-ingest's
// heartbeat consumer has heartbeats waiting and hands none out, and pushes to every host in scope.
// After ack-ingest is back, the next write converges as usual and hosts are online again.
func TestAckIngestDownLongerThanTheOnlineWindow(t *testing.T) {
	t.Parallel()
	const window = 2 * time.Second
	c := newConvergence(t, convergenceOptions{agents: 3, onlineWindow: window, waitOnline: true,
		delivery: func(cfg *delivery.Config) { cfg.IngestLagAfter = time.Second }})
	c.ingest.shutdown(t)
	eventually(t, convergeDeadline, "every host to look offline by its stored heartbeat", func() (bool, string) {
		for agent, online := range c.hostsOnline() {
			if online {
				return false, agent + " still online"
			}
		}
		return true, ""
	})
	start := time.Now()
	v1 := c.api.putEnv(c.ten.EnvID, "labels", `{"static":{"written":"while-ack-ingest-down"}}`)
	c.waitConverged("write while ack-ingest is down", c.agents, "labels", v1, start)
	if n := c.s.logged("push: ack-ingest is behind on heartbeats, pushing to every host in scope", map[string]any{"config_type": "labels"}); n == 0 {
		t.Error("delivery did not report pushing regardless of stored heartbeats")
	}

	c.startAckIngest()
	eventually(t, convergeDeadline, "hosts online again once ack-ingest is back", func() (bool, string) {
		for agent, online := range c.hostsOnline() {
			if !online {
				return false, agent + " still offline"
			}
		}
		return true, ""
	})
	start = time.Now()
	v2 := c.api.putEnv(c.ten.EnvID, "labels", `{"static":{"written":"after-ack-ingest-back"}}`)
	c.waitConverged("write after ack-ingest is back", c.agents, "labels", v2, start)
}

// TestLostPushIsRepaired: delivery loses every labels push to one agent on purpose (a fault hook on its
// fan-out publisher). The other agents get the push; the one that lost it is behind at its next
// heartbeat, and anti-entropy repairs it.
func TestLostPushIsRepaired(t *testing.T) {
	t.Parallel()
	var lose func(string, []byte) bool
	var lost func() int
	var mu sync.Mutex
	c := newConvergence(t, convergenceOptions{agents: 3, waitOnline: true, delivery: func(cfg *delivery.Config) {
		cfg.LosePush = func(to string, cmd []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			return lose != nil && lose(to, cmd)
		}
	}})
	mu.Lock()
	lose, lost = loseFor(c.agents[0].host.AgentID, "labels")
	mu.Unlock()
	start := time.Now()
	v := c.api.putEnv(c.ten.EnvID, "labels", `{"static":{"pushed":"lost-for-one"}}`)
	c.waitConverged("the agents whose push was not lost", c.agents[1:], "labels", v, start)
	c.waitConverged("the agent whose push was lost", c.agents[:1], "labels", v, start)
	if lost() == 0 {
		t.Fatal("no push was lost: the scenario did not happen")
	}
	if c.s.logged("repair sent", nil) == 0 {
		t.Error("delivery logged no repair")
	}
}

// TestLostDeletionIsRepaired: an agent misses the push of a deletion (lost on purpose, as above) and
// keeps the deleted type; anti-entropy sees it holds a type it should not and delivery sends the
// deletion again.
func TestLostDeletionIsRepaired(t *testing.T) {
	t.Parallel()
	var lose func(string, []byte) bool
	var mu sync.Mutex
	c := newConvergence(t, convergenceOptions{agents: 2, waitOnline: true, delivery: func(cfg *delivery.Config) {
		cfg.LosePush = func(to string, cmd []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			return lose != nil && lose(to, cmd)
		}
	}})
	start := time.Now()
	v := c.api.putEnv(c.ten.EnvID, "tracing", `{"enabled":true,"sample_ratio":0.5}`)
	c.waitConverged("tracing configured", c.agents, "tracing", v, start)
	var lost func() int
	mu.Lock()
	lose, lost = loseFor(c.agents[0].host.AgentID, "tracing")
	mu.Unlock()
	start = time.Now()
	c.api.must(http.MethodDelete, "/api/v1/environments/"+c.ten.EnvID+"/agent-configs/tracing", nil, nil)
	c.waitConverged("the deleted type dropped", c.agents, "tracing", 0, start)
	if lost() == 0 {
		t.Fatal("no deletion push was lost: the scenario did not happen")
	}
}

// eventually waits for check, which says what it saw when it is not yet true.
func eventually(t testing.TB, timeout time.Duration, what string, check func() (bool, string)) {
	t.Helper()
	testinfra.EventuallyNoError(t, timeout, testinfra.Explain(check), what)
}
