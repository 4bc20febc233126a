package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// startNATS runs an in-process nats-server on a random port.
func startNATS(t *testing.T) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

const (
	intervalsData  = `{"metrics":"30s","heartbeat":"10s"}`
	collectorsData = `[{"type":"mysql","name":"primary","host":"db","port":3306,"username":"monitor","password":"s3cret"}]`
)

// fakeBackend answers fetches the way delivery does and records what agents publish.
type fakeBackend struct {
	t  *testing.T
	nc *nats.Conn

	mu         sync.Mutex
	fetches    map[string]int
	acks       map[string][]protocol.Ack
	heartbeats map[string][]protocol.Heartbeat
	bad        []string
	// refuseFirst, when positive, refuses each agent's first fetch as a busy delivery does, asking it
	// to come back after that many milliseconds.
	refuseFirst int64
}

func newFakeBackend(t *testing.T, url string) *fakeBackend {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b := &fakeBackend{t: t, nc: nc, fetches: map[string]int{}, acks: map[string][]protocol.Ack{}, heartbeats: map[string][]protocol.Heartbeat{}}
	mustSub := func(_ *nats.Subscription, err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	mustSub(nc.QueueSubscribe(protocol.FetchSubjectAll, protocol.DeliveryQueueGroup, b.onFetch))
	mustSub(nc.Subscribe(protocol.AckSubjectAll, b.onAck))
	mustSub(nc.Subscribe(protocol.HeartbeatSubjectAll, b.onHeartbeat))
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *fakeBackend) onFetch(m *nats.Msg) {
	token, _ := protocol.AgentIDFromSubject(m.Subject)
	var req protocol.FetchRequest
	if err := json.Unmarshal(m.Data, &req); err != nil || req.AgentID != token {
		b.fail("fetch with agent_id %q on %s", req.AgentID, m.Subject)
		return
	}
	b.mu.Lock()
	b.fetches[token]++
	first := b.fetches[token] == 1
	b.mu.Unlock()
	var reply protocol.FetchReply
	if first && b.refuseFirst > 0 {
		reply.Error = &protocol.Error{Code: protocol.CodeUnavailable, Message: "delivery is busy, retry later", RetryAfterMS: b.refuseFirst}
	} else if strings.HasSuffix(token, "-unknown") {
		reply.Error = &protocol.Error{Code: protocol.CodeNotFound, Message: "unknown agent"}
	} else {
		reply = protocol.FetchReply{
			Configs:      map[string]json.RawMessage{"intervals": json.RawMessage(intervalsData), "collectors": json.RawMessage(collectorsData)},
			Versions:     map[string]int64{"intervals": 1, "collectors": 2, "labels": 9}, // labels: deleted at 9
			SecretFields: map[string][]string{"collectors": {"/0/password"}},
		}
	}
	data, _ := json.Marshal(reply)
	_ = m.Respond(data)
}

func (b *fakeBackend) onAck(m *nats.Msg) {
	token, _ := protocol.AgentIDFromSubject(m.Subject)
	var a protocol.Ack
	if err := json.Unmarshal(m.Data, &a); err != nil || a.AgentID != token {
		b.fail("ack %s on %s", m.Data, m.Subject)
		return
	}
	b.mu.Lock()
	b.acks[token] = append(b.acks[token], a)
	b.mu.Unlock()
}

func (b *fakeBackend) onHeartbeat(m *nats.Msg) {
	token, _ := protocol.AgentIDFromSubject(m.Subject)
	var h protocol.Heartbeat
	if err := json.Unmarshal(m.Data, &h); err != nil || h.AgentID != token {
		b.fail("heartbeat %s on %s", m.Data, m.Subject)
		return
	}
	b.mu.Lock()
	b.heartbeats[token] = append(b.heartbeats[token], h)
	b.mu.Unlock()
}

func (b *fakeBackend) fail(format string, args ...any) {
	b.mu.Lock()
	b.bad = append(b.bad, fmt.Sprintf(format, args...))
	b.mu.Unlock()
}

// waitTimeout only keeps a broken test from hanging; nothing asserts on timing.
const waitTimeout = 20 * time.Second

func (b *fakeBackend) count(m func() int) func() bool {
	return func() bool { b.mu.Lock(); defer b.mu.Unlock(); return m() > 0 }
}

func agentIDs(n int, prefix string) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return ids
}

func sendCommand(t *testing.T, nc *nats.Conn, agentID string, cmd protocol.Command) {
	t.Helper()
	data, _ := json.Marshal(cmd)
	if err := nc.Publish(protocol.CommandSubject(agentID), data); err != nil {
		t.Fatal(err)
	}
}

func TestFleetFetchesAcksAndHeartbeats(t *testing.T) {
	for _, mode := range []SubscriptionMode{Wildcard, PerAgent} {
		t.Run(string(mode), func(t *testing.T) { testFleetProtocol(t, mode) })
	}
}

func testFleetProtocol(t *testing.T, mode SubscriptionMode) {
	url := startNATS(t)
	backend := newFakeBackend(t, url)
	ids := append(agentIDs(49, "lg"), "lg-999-unknown")
	f, err := New(Config{URL: url, Conns: 3, Subscriptions: mode, FetchTimeout: 5 * time.Second}, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Subscribe(); err != nil {
		t.Fatal(err)
	}

	// Boot: every agent fetches once within the jitter window, then heartbeats.
	<-f.Start(StartOptions{Fetch: true, Jitter: 200 * time.Millisecond})
	st := f.Stats()
	if st.FetchOK != 49 || st.FetchFailed != 1 || st.FetchErrors["error not_found"] != 1 {
		t.Fatalf("fetch stats = %+v", st)
	}
	if st.FetchLatency.Count != 49 || st.FetchLatency.P99 <= 0 {
		t.Fatalf("fetch latency = %+v", st.FetchLatency)
	}
	testinfra.Eventually(t, waitTimeout, backend.count(func() int {
		if len(backend.heartbeats) == len(ids) {
			return 1
		}
		return 0
	}), "a heartbeat from every agent")
	redacted, err := agentconfig.Redact(json.RawMessage(collectorsData), []string{"/0/password"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(redacted), "s3cret") {
		t.Fatal("redaction kept the secret")
	}
	wantHash := agentconfig.ConfigHash([]agentconfig.CacheEntry{
		{ConfigType: "intervals", ConfigData: json.RawMessage(intervalsData), Version: 1},
		{ConfigType: "collectors", ConfigData: redacted, Version: 2, Redacted: true, SecretFields: []string{"/0/password"}},
	})
	backend.mu.Lock()
	for _, id := range ids {
		if n := backend.fetches[id]; n != 1 {
			t.Errorf("%s fetched %d times", id, n)
		}
		hb := backend.heartbeats[id][0]
		if hb.AgentVersion != "loadgen/1.0.0+hb.1" || hb.SentAt.IsZero() {
			t.Errorf("%s first heartbeat = %+v", id, hb)
		}
		if strings.HasSuffix(id, "-unknown") {
			if hb.ConfigHash != agentconfig.ConfigHash(nil) || len(hb.ConfigVersions) != 0 {
				t.Errorf("agent without configs reported %+v", hb)
			}
			continue
		}
		if hb.ConfigHash != wantHash || hb.ConfigVersion != 2 ||
			len(hb.ConfigVersions) != 2 || hb.ConfigVersions["intervals"] != 1 || hb.ConfigVersions["collectors"] != 2 {
			t.Errorf("%s heartbeat = %+v, want hash %s and versions intervals:1 collectors:2", id, hb, wantHash)
		}
	}
	backend.mu.Unlock()

	// Push: one config_update per agent; each acks on its own subject with the pushed version.
	pushedAt := time.Now()
	for _, id := range ids {
		sendCommand(t, backend.nc, id, protocol.Command{CommandID: "c-" + id, Type: protocol.CommandConfigUpdate,
			ConfigType: "labels", Version: 12, Payload: json.RawMessage(`{"static":{"env":"bench"}}`)})
	}
	testinfra.Eventually(t, waitTimeout, backend.count(func() int {
		for _, id := range ids {
			if len(backend.acks[id]) == 0 {
				return 0
			}
		}
		return 1
	}), "an ack from every agent")
	backend.mu.Lock()
	for _, id := range ids {
		a := backend.acks[id][0]
		if a.ConfigType != "labels" || a.Version != 12 || a.Status != protocol.AckApplied || a.AppliedAt.IsZero() {
			t.Errorf("%s ack = %+v", id, a)
		}
	}
	backend.mu.Unlock()
	if got := f.Receipts("labels", 12); len(got) != len(ids) {
		t.Fatalf("receipts = %d, want %d", len(got), len(ids))
	} else if got[0].Before(pushedAt) {
		t.Fatalf("receipt %v before the push %v", got[0], pushedAt)
	}

	// A stale push is acknowledged with the version the agent holds; garbage and foreign agents are
	// counted, never acknowledged.
	sendCommand(t, backend.nc, ids[0], protocol.Command{CommandID: "old", Type: protocol.CommandConfigUpdate,
		ConfigType: "labels", Version: 10, Payload: json.RawMessage(`{"static":{}}`)})
	if err := backend.nc.Publish(protocol.CommandSubject(ids[1]), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	sendCommand(t, backend.nc, "someone-else", protocol.Command{CommandID: "x", Type: protocol.CommandConfigUpdate, ConfigType: "labels", Version: 1, Payload: json.RawMessage(`{}`)})
	// A deletion removes the type from the cache.
	sendCommand(t, backend.nc, ids[2], protocol.Command{CommandID: "del", Type: protocol.CommandConfigUpdate,
		ConfigType: "intervals", Version: 13, Payload: json.RawMessage(`null`)})
	testinfra.Eventually(t, waitTimeout, backend.count(func() int {
		if len(backend.acks[ids[0]]) == 2 && len(backend.acks[ids[2]]) == 2 {
			return 1
		}
		return 0
	}), "stale and delete acks")
	backend.mu.Lock()
	if a := backend.acks[ids[0]][1]; a.Version != 12 || a.Status != protocol.AckApplied {
		t.Errorf("stale push ack = %+v, want version 12 applied", a)
	}
	if a := backend.acks[ids[2]][1]; a.Version != 13 || a.ConfigType != "intervals" {
		t.Errorf("delete ack = %+v", a)
	}
	backend.mu.Unlock()
	testinfra.Eventually(t, waitTimeout, func() bool {
		s := f.Stats()
		return s.Malformed == 1 && (mode == PerAgent || s.Foreign == 1)
	}, "malformed and foreign commands counted")
	st = f.Stats()
	if st.Applied != int64(len(ids))+1 || st.Stale != 1 || st.AckErrors != 0 || st.DroppedMessages != 0 {
		t.Fatalf("command stats = %+v", st)
	}
	if mode == PerAgent && st.Foreign != 0 {
		t.Fatalf("per-agent subscriptions received a foreign command: %+v", st)
	}
	if s := f.AgentState(2); s.ConfigVersions["intervals"] != 0 || s.ConfigVersions["labels"] != 12 {
		t.Fatalf("state after delete = %+v", s.ConfigVersions)
	}

	// A heartbeat burst: every heartbeat arrives, the newest of each agent reports the pushed labels.
	res := f.SendHeartbeats(context.Background(), 2000, 150*time.Millisecond)
	if res.Sent == 0 {
		t.Fatal("burst sent nothing")
	}
	if err := f.Flush(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	testinfra.Eventually(t, waitTimeout, backend.count(func() int {
		total := 0
		for _, hbs := range backend.heartbeats {
			total += len(hbs)
		}
		if int64(total) == int64(len(ids))+res.Sent {
			return 1
		}
		return 0
	}), "every burst heartbeat")
	backend.mu.Lock()
	defer backend.mu.Unlock()
	for _, id := range ids {
		hbs := backend.heartbeats[id]
		last := hbs[len(hbs)-1]
		if want := HeartbeatVersion("loadgen/1.0.0", res.Final[id]); last.AgentVersion != want {
			t.Errorf("%s last heartbeat %q, want %q", id, last.AgentVersion, want)
		}
		if len(hbs) > 1 && last.ConfigVersions["labels"] != 12 {
			t.Errorf("%s heartbeat after push = %+v", id, last.ConfigVersions)
		}
	}
	if len(backend.bad) > 0 {
		t.Fatalf("protocol violations: %v", backend.bad)
	}
}

func TestNewRejectsInvalidAgentIDs(t *testing.T) {
	if _, err := New(Config{URL: "nats://127.0.0.1:1"}, []string{"ok", "not.ok"}); err == nil {
		t.Fatal("an agent id with a dot was accepted")
	}
}
