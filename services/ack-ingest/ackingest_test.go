package ackingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	ackingest "github.com/configsync/configsync/services/ack-ingest"
	"github.com/configsync/configsync/services/ack-ingest/internal/natsapi"
	"github.com/configsync/configsync/services/ack-ingest/internal/seed"
)

// stack is PostgreSQL, an embedded nats-server with ConfigSync's streams, and registered hosts.
type stack struct {
	pool  *pgxpool.Pool
	nc    *nats.Conn
	js    jetstream.JetStream
	hosts map[string]uuid.UUID // by agent id
	log   *zap.Logger
	logs  *observer.ObservedLogs

	// published counts the messages publish sent to each stream's subjects, for drained.
	mu        sync.Mutex
	published map[string]uint64
}

func newStack(t *testing.T, hosts int) *stack {
	t.Helper()
	s := newStackTB(t, hosts)
	s.log, s.logs = testinfra.Logger(t)
	return s
}

func newBenchStack(b *testing.B) *stack {
	b.Helper()
	s := newStackTB(b, benchAgents)
	s.log = zap.NewNop()
	return s
}

func newStackTB(t testing.TB, hosts int) *stack {
	t.Helper()
	s := &stack{pool: testinfra.Postgres(t)}
	srv := testinfra.NATS(t)
	s.nc = srv.Connect(t)
	s.js = testinfra.JetStream(t, s.nc, natsconn.EnsureStreams)
	s.hosts = seed.Hosts(t, s.pool, hosts)
	return s
}

func testConfig() ackingest.Config {
	return ackingest.Config{BatchSize: 100, BatchWait: 5 * time.Millisecond, Writers: 2, AckWait: 2 * time.Second,
		RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond, HostCacheSize: 1000}
}

// start runs ack-ingest until the returned stop is called (or the test ends).
func (s *stack) start(t *testing.T) (stop func()) {
	t.Helper()
	svc := ackingest.New(testConfig(), s.pool, s.js, s.log)
	svc.Start()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			t.Errorf("stop ack-ingest: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// publishedTo is how many messages publish has sent to each stream so far.
func (s *stack) publishedTo() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.published)
}

// streamOf names the stream that captures subject ("" for none).
func streamOf(subject string) string {
	switch {
	case strings.HasSuffix(subject, strings.TrimPrefix(protocol.AckSubject("a"), protocol.AgentSubjectPrefix+"a")):
		return protocol.AcksStream
	case strings.HasSuffix(subject, strings.TrimPrefix(protocol.HeartbeatSubject("a"), protocol.AgentSubjectPrefix+"a")):
		return protocol.HeartbeatsStream
	}
	return ""
}

// publish sends what an agent sends: a core NATS publish the stream captures.
func (s *stack) publish(t testing.TB, subject string, v any) {
	t.Helper()
	var data []byte
	switch v := v.(type) {
	case []byte:
		data = v
	default:
		var err error
		if data, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	if stream := streamOf(subject); stream != "" {
		s.mu.Lock()
		if s.published == nil {
			s.published = map[string]uint64{}
		}
		s.published[stream]++
		s.mu.Unlock()
	}
	if err := s.nc.Publish(subject, data); err != nil {
		t.Fatal(err)
	}
}

// drained waits until both consumers have settled every message published so far.
func (s *stack) drained(t testing.TB) {
	t.Helper()
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := s.publishedTo()
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		for _, c := range []struct{ stream, durable string }{
			{protocol.AcksStream, natsapi.AcksDurable},
			{protocol.HeartbeatsStream, natsapi.HeartbeatsDurable},
		} {
			if err := testinfra.Drained(ctx, s.js, c.stream, c.durable, want[c.stream]); err != nil {
				return err
			}
		}
		return nil
	}, "consumers drained")
}

type applyRow struct {
	Version int64
	Status  string
	Error   *string
}

func (s *stack) applyStatus(t testing.TB, agent, typ string) (applyRow, bool) {
	t.Helper()
	var r applyRow
	err := s.pool.QueryRow(context.Background(), `SELECT version, status, error FROM host_config_apply_status WHERE host_id = $1 AND config_type = $2`,
		s.hosts[agent], typ).Scan(&r.Version, &r.Status, &r.Error)
	if err != nil {
		return r, false
	}
	return r, true
}

type hostRow struct {
	AgentVersion, ConfigHash *string
	ConfigVersion            *int64
	ConfigVersions           map[string]int64
	LastHeartbeatAt          *time.Time
}

func (s *stack) host(t testing.TB, agent string) hostRow {
	t.Helper()
	var r hostRow
	if err := s.pool.QueryRow(context.Background(), `SELECT agent_version, config_hash, config_version, config_versions, last_heartbeat_at FROM hosts WHERE id = $1`,
		s.hosts[agent]).Scan(&r.AgentVersion, &r.ConfigHash, &r.ConfigVersion, &r.ConfigVersions, &r.LastHeartbeatAt); err != nil {
		t.Fatal(err)
	}
	return r
}

func ack(agent, typ string, version int64, status, errText string) protocol.Ack {
	return protocol.Ack{AgentID: agent, ConfigType: typ, Version: version, Status: status, Error: errText}
}

func heartbeat(agent, hash string, version int64) protocol.Heartbeat {
	return protocol.Heartbeat{AgentID: agent, SentAt: time.Now().UTC(), AgentVersion: "1.0.0", ConfigHash: hash,
		ConfigVersion: version, ConfigVersions: map[string]int64{"collectors": version, "labels": 1}}
}

func TestAcksAndHeartbeatsLand(t *testing.T) {
	s := newStack(t, 3)
	s.start(t)
	s.publish(t, protocol.AckSubject("agent-0"), ack("agent-0", "collectors", 5, protocol.AckApplied, ""))
	s.publish(t, protocol.AckSubject("agent-1"), ack("agent-1", "collectors", 5, protocol.AckFailed, "dial tcp: connection refused"))
	s.publish(t, protocol.HeartbeatSubject("agent-0"), heartbeat("agent-0", "a1b2c3", 5))
	// The spec's heartbeat payload has no agent_id: the subject names the agent.
	s.publish(t, protocol.HeartbeatSubject("agent-2"), []byte(`{"agent_version":"1.0.0","config_hash":"ffee","config_version":3,"config_versions":{"watch_files":3}}`))
	before := time.Now().Add(-time.Second)
	s.drained(t)

	if r, ok := s.applyStatus(t, "agent-0", "collectors"); !ok || r.Version != 5 || r.Status != "applied" || r.Error != nil {
		t.Errorf("agent-0 apply status = %+v, %v", r, ok)
	}
	if r, ok := s.applyStatus(t, "agent-1", "collectors"); !ok || r.Status != "failed" || r.Error == nil || *r.Error != "dial tcp: connection refused" {
		t.Errorf("agent-1 apply status = %+v, %v", r, ok)
	}
	h := s.host(t, "agent-0")
	if h.ConfigHash == nil || *h.ConfigHash != "a1b2c3" || *h.ConfigVersion != 5 || h.ConfigVersions["collectors"] != 5 ||
		*h.AgentVersion != "1.0.0" || h.LastHeartbeatAt == nil || h.LastHeartbeatAt.Before(before) {
		t.Errorf("agent-0 host = %+v", h)
	}
	if h := s.host(t, "agent-2"); h.ConfigHash == nil || *h.ConfigHash != "ffee" || h.ConfigVersions["watch_files"] != 3 {
		t.Errorf("agent-2 host = %+v", h)
	}
	if h := s.host(t, "agent-1"); h.LastHeartbeatAt != nil {
		t.Errorf("agent-1 sent no heartbeat but has %v", h.LastHeartbeatAt)
	}
}

func TestOlderAckDoesNotRegress(t *testing.T) {
	s := newStack(t, 1)
	s.start(t)
	s.publish(t, protocol.AckSubject("agent-0"), ack("agent-0", "labels", 8, protocol.AckApplied, ""))
	s.drained(t)
	s.publish(t, protocol.AckSubject("agent-0"), ack("agent-0", "labels", 6, protocol.AckFailed, "stale"))
	s.drained(t)
	if r, _ := s.applyStatus(t, "agent-0", "labels"); r.Version != 8 || r.Status != "applied" {
		t.Fatalf("apply status regressed to %+v", r)
	}
	// Within one batch too.
	s.publish(t, protocol.AckSubject("agent-0"), ack("agent-0", "tracing", 4, protocol.AckApplied, ""))
	s.publish(t, protocol.AckSubject("agent-0"), ack("agent-0", "tracing", 3, protocol.AckFailed, "older"))
	s.drained(t)
	if r, _ := s.applyStatus(t, "agent-0", "tracing"); r.Version != 4 || r.Status != "applied" {
		t.Fatalf("apply status = %+v, want version 4 applied", r)
	}
}

func TestMalformedMessagesAreTerminated(t *testing.T) {
	s := newStack(t, 2)
	s.start(t)
	const planted = "PLANTED-PAYLOAD-7f3a"
	s.publish(t, protocol.AckSubject("agent-0"), []byte(`{"agent_id":"agent-0","config_type":"`+planted))
	s.publish(t, protocol.AckSubject("agent-0"), ack("agent-1", "labels", 1, protocol.AckApplied, planted)) // not its own
	s.publish(t, protocol.AckSubject("agent-0"), ack("agent-0", "labels", 1, "maybe", planted))
	s.publish(t, protocol.AckSubject("ghost"), ack("ghost", "labels", 1, protocol.AckApplied, ""))
	s.publish(t, protocol.HeartbeatSubject("agent-1"), []byte(`{"config_versions":{"`+planted+`":"x"}}`))
	s.publish(t, protocol.HeartbeatSubject("agent-0"), []byte{0xff, 0x00, 0x7b})
	// A valid message after the bad ones proves the service keeps going.
	s.publish(t, protocol.AckSubject("agent-1"), ack("agent-1", "labels", 2, protocol.AckApplied, ""))
	s.drained(t)

	if r, ok := s.applyStatus(t, "agent-1", "labels"); !ok || r.Version != 2 {
		t.Fatalf("valid ack after malformed ones: %+v %v", r, ok)
	}
	if _, ok := s.applyStatus(t, "agent-0", "labels"); ok {
		t.Fatal("a malformed ack was written")
	}
	if n := s.logs.FilterMessage("malformed message terminated").Len(); n != 5 {
		t.Errorf("%d malformed messages logged, want 5", n)
	}
	if n := s.logs.FilterMessage("ack from unknown agent dropped").Len(); n != 1 {
		t.Errorf("%d unknown-agent acks logged, want 1", n)
	}
	for _, e := range s.logs.All() {
		line := e.Message
		for _, f := range e.Context {
			line += fmt.Sprint(f.String, f.Interface)
		}
		if strings.Contains(line, planted) {
			t.Fatalf("a payload reached the log: %s", line)
		}
	}
	// Terminated acks are gone from the work queue: nothing is redelivered forever.
	st, err := s.js.Stream(context.Background(), protocol.AcksStream)
	if err != nil {
		t.Fatal(err)
	}
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		info, err := st.Info(context.Background())
		if err != nil {
			return err
		}
		if info.State.Msgs == 0 {
			return nil
		}
		return fmt.Errorf("%d messages left", info.State.Msgs)
	}, "acks stream emptied")
}

func TestRestartWhileAgentsKeepSending(t *testing.T) {
	// One registered config type per round, besides collectors which every round acks.
	perRound := slices.DeleteFunc(agentconfig.TypeNames(), func(t string) bool { return t == agentconfig.Collectors })
	const agents = 40
	rounds := len(perRound)
	s := newStack(t, agents)
	stop := s.start(t)
	for round := 1; round <= rounds; round++ {
		if round == 4 {
			stop() // ack-ingest goes away; agents keep sending
		}
		if round == 9 {
			s.start(t) // a new instance picks up the durable consumers
		}
		for i := range agents {
			agent := fmt.Sprintf("agent-%d", i)
			s.publish(t, protocol.AckSubject(agent), ack(agent, "collectors", int64(round), protocol.AckApplied, ""))
			s.publish(t, protocol.AckSubject(agent), ack(agent, perRound[round-1], int64(round), protocol.AckApplied, ""))
			s.publish(t, protocol.HeartbeatSubject(agent), heartbeat(agent, fmt.Sprintf("hash-%d", round), int64(round)))
		}
		if err := s.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	s.drained(t)
	for i := range agents {
		agent := fmt.Sprintf("agent-%d", i)
		if r, _ := s.applyStatus(t, agent, "collectors"); r.Version != int64(rounds) {
			t.Fatalf("%s collectors at version %d, want %d", agent, r.Version, rounds)
		}
		// Every ack sent, including while ack-ingest was down, was recorded.
		for round := 1; round <= rounds; round++ {
			if r, ok := s.applyStatus(t, agent, perRound[round-1]); !ok || r.Version != int64(round) {
				t.Fatalf("%s round %d: %+v %v (lost)", agent, round, r, ok)
			}
		}
		if h := s.host(t, agent); h.ConfigHash == nil || *h.ConfigHash != fmt.Sprintf("hash-%d", rounds) {
			t.Fatalf("%s heartbeat = %+v, want the last one", agent, h)
		}
	}
}

func TestDatabaseOutageIsRetried(t *testing.T) {
	s := newStack(t, 1)
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `ALTER TABLE host_config_apply_status RENAME TO host_config_apply_status_away`); err != nil {
		t.Fatal(err)
	}
	s.start(t)
	s.publish(t, protocol.AckSubject("agent-0"), ack("agent-0", "labels", 3, protocol.AckApplied, ""))
	testinfra.Eventually(t, 30*time.Second, func() bool {
		return s.logs.FilterMessage("batch write failed, will retry").Len() >= 2
	}, "write failure retried")
	if _, err := s.pool.Exec(ctx, `ALTER TABLE host_config_apply_status_away RENAME TO host_config_apply_status`); err != nil {
		t.Fatal(err)
	}
	s.drained(t)
	if r, ok := s.applyStatus(t, "agent-0", "labels"); !ok || r.Version != 3 {
		t.Fatalf("ack after the outage: %+v %v", r, ok)
	}
}
