package ackingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/libs/platform/metrics/metricstest"
	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	ackingest "github.com/configsync/configsync/services/ack-ingest"
)

// startService runs ack-ingest with cfg until the test ends and returns it (for its counters).
func (s *stack) startService(t *testing.T, cfg ackingest.Config) *ackingest.Service {
	t.Helper()
	return s.run(t, ackingest.New(cfg, s.pool, s.js, s.log))
}

// startMetered is startService reporting to a registry of its own, and returns a scrape of that
// registry's text exposition.
func (s *stack) startMetered(t *testing.T, cfg ackingest.Config) (*ackingest.Service, func() metricstest.Scrape) {
	t.Helper()
	m := metrics.New()
	svc := s.run(t, ackingest.NewWithMetrics(cfg, s.pool, s.js, s.log, m))
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	return svc, func() metricstest.Scrape { return metricstest.Get(t, srv.URL) }
}

// run starts svc and stops it when the test ends.
func (s *stack) run(t *testing.T, svc *ackingest.Service) *ackingest.Service {
	t.Helper()
	svc.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			t.Errorf("stop ack-ingest: %v", err)
		}
	})
	return svc
}

func (s *stack) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := s.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestRevokedHostsReportsAreDroppedAndCounted(t *testing.T) {
	s := newStack(t, 2)
	svc := s.startService(t, testConfig())
	// agent-0 reports once while active, so ack-ingest's agent -> host cache knows it; then it is revoked.
	s.publish(t, protocol.HeartbeatSubject("agent-0"), heartbeat("agent-0", "before", 1))
	s.drained(t)
	s.exec(t, `UPDATE hosts SET revoked_at = now() WHERE agent_id = 'agent-0'`)

	s.publish(t, protocol.AckSubject("agent-0"), ack("agent-0", "labels", 4, protocol.AckApplied, ""))
	s.publish(t, protocol.HeartbeatSubject("agent-0"), heartbeat("agent-0", "after", 4))
	s.publish(t, protocol.AckSubject("agent-1"), ack("agent-1", "labels", 4, protocol.AckApplied, ""))
	s.publish(t, protocol.HeartbeatSubject("agent-1"), heartbeat("agent-1", "after", 4))
	s.drained(t)

	if r, ok := s.applyStatus(t, "agent-0", "labels"); ok {
		t.Errorf("revoked host's ack stored: %+v", r)
	}
	if h := s.host(t, "agent-0"); h.ConfigHash == nil || *h.ConfigHash != "before" {
		t.Errorf("revoked host's heartbeat stored: %+v", h)
	}
	if r, ok := s.applyStatus(t, "agent-1", "labels"); !ok || r.Version != 4 {
		t.Errorf("active host's ack = %+v %v", r, ok)
	}
	if h := s.host(t, "agent-1"); h.ConfigHash == nil || *h.ConfigHash != "after" {
		t.Errorf("active host's heartbeat = %+v", h)
	}
	if st := svc.Stats(); st.RevokedAcks != 1 || st.RevokedHeartbeats != 1 {
		t.Errorf("stats = %+v, want one revoked ack and one revoked heartbeat", st)
	}
}

func TestAckForAnUnregisteredTypeIsRefused(t *testing.T) {
	s := newStack(t, 1)
	s.startService(t, testConfig())
	for i := range 50 {
		s.publish(t, protocol.AckSubject("agent-0"), ack("agent-0", fmt.Sprintf("made_up_%d", i), 1, protocol.AckApplied, ""))
	}
	s.publish(t, protocol.AckSubject("agent-0"), ack("agent-0", "labels", 1, protocol.AckApplied, ""))
	s.drained(t)
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM host_config_apply_status`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d apply status rows, want 1 (only the registered type)", n)
	}
}

// An agent that sends "failed" and then "applied" for the same version (a retried apply) must end
// "applied", and the reverse order "failed", whichever of ack-ingest's writers commits first. Small
// batches and several writers make the interleavings happen.
func TestLaterAckOfTheSameVersionWins(t *testing.T) {
	const agents = 150
	s := newStack(t, agents)
	cfg := testConfig()
	cfg.BatchSize, cfg.Writers, cfg.BatchWait = 3, 4, time.Millisecond
	s.startService(t, cfg)
	want := map[string]string{}
	for round := int64(1); round <= 3; round++ {
		for i := range agents {
			agent := fmt.Sprintf("agent-%d", i)
			first, last := protocol.AckFailed, protocol.AckApplied
			if (i+int(round))%2 == 0 {
				first, last = last, first
			}
			s.publish(t, protocol.AckSubject(agent), ack(agent, "labels", round, first, "first"))
			s.publish(t, protocol.AckSubject(agent), ack(agent, "labels", round, last, "last"))
			want[agent] = last
		}
		s.drained(t)
		for agent, status := range want {
			r, ok := s.applyStatus(t, agent, "labels")
			if !ok || r.Version != round || r.Status != status {
				t.Fatalf("round %d %s: %+v %v, want %s (the ack sent last)", round, agent, r, ok, status)
			}
		}
	}
}

// repairs collects the repair requests ack-ingest publishes.
type repairs struct {
	mu   sync.Mutex
	reqs []protocol.RepairRequest
}

func (r *repairs) subscribe(t *testing.T, nc *nats.Conn) {
	t.Helper()
	sub, err := nc.Subscribe(protocol.RepairSubject, func(m *nats.Msg) {
		var req protocol.RepairRequest
		if json.Unmarshal(m.Data, &req) == nil {
			r.mu.Lock()
			r.reqs = append(r.reqs, req)
			r.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// types returns, per agent, the types asked for with their states, over every request so far.
func (r *repairs) all() []protocol.RepairHost {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []protocol.RepairHost
	for _, q := range r.reqs {
		out = append(out, q.Hosts...)
	}
	return out
}

// repairConfig asks a repair at the first heartbeat behind and not again within the test: no grace
// (the tests write the config rows right before the heartbeats) and an hour's backoff.
func repairConfig() ackingest.Config {
	cfg := testConfig()
	cfg.RepairBackoff, cfg.RepairMaxBackoff = time.Hour, time.Hour
	cfg.RepairGrace = -1
	return cfg
}

func TestAntiEntropyAsksRepairsAndBacksOff(t *testing.T) {
	s := newStack(t, 3)
	var rep repairs
	rep.subscribe(t, s.nc)
	svc := s.startService(t, repairConfig())
	// The environment has labels at version 10 and tracing deleted at version 12; agent-2 overrides
	// labels at version 15.
	s.exec(t, `INSERT INTO environment_configs (environment_id, config_type, config_data, version)
		SELECT id, 'labels', '{"static":{"a":"b"}}', 10 FROM environments`)
	s.exec(t, `INSERT INTO environment_configs (environment_id, config_type, config_data, version, deleted_at)
		SELECT id, 'tracing', NULL, 12, now() FROM environments`)
	s.exec(t, `INSERT INTO host_configs (host_id, config_type, config_data, version) VALUES ($1, 'labels', '{"static":{"c":"d"}}', 15)`, s.hosts["agent-2"])
	beat := func(agent string, versions map[string]int64) {
		s.publish(t, protocol.HeartbeatSubject(agent), protocol.Heartbeat{AgentID: agent, ConfigHash: "h", ConfigVersions: versions})
	}
	beat("agent-0", map[string]int64{"labels": 10})              // in sync
	beat("agent-1", map[string]int64{"labels": 9, "tracing": 3}) // behind, and holds a deleted type
	beat("agent-2", map[string]int64{"labels": 10})              // behind its own override
	s.drained(t)
	eventually(t, "repair requests", func() (bool, string) {
		got := map[string]map[string]protocol.RepairState{}
		for _, h := range rep.all() {
			got[h.AgentID] = h.Types
		}
		ok := len(got) == 2 && got["agent-1"]["labels"].Expected == 10 && got["agent-1"]["tracing"].Expected == 12 &&
			got["agent-2"]["labels"].Expected == 15 && got["agent-1"]["labels"].Attempt == 1 && len(got["agent-1"]) == 2
		return ok, fmt.Sprintf("%+v", got)
	})

	// The same gaps at the next heartbeat are within the backoff: nothing is asked again.
	beat("agent-1", map[string]int64{"labels": 9, "tracing": 3})
	beat("agent-2", map[string]int64{"labels": 10})
	s.drained(t)
	eventually(t, "backed-off gaps counted", func() (bool, string) {
		st := svc.Stats()
		return st.RepairsBackedOff >= 3, fmt.Sprintf("%+v", st)
	})
	if n := len(rep.all()); n != 2 {
		t.Fatalf("%d hosts asked for in total, want 2 (no repeat within the backoff)", n)
	}
	var open int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM config_repairs WHERE attempts = 1`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open != 3 {
		t.Fatalf("%d open repairs, want 3", open)
	}

	// agent-2 converges: its repair is closed. A version the agent acked failed is not sent at once.
	beat("agent-2", map[string]int64{"labels": 15})
	s.publish(t, protocol.AckSubject("agent-0"), ack("agent-0", "labels", 16, protocol.AckFailed, "policy refuses it"))
	s.drained(t)
	s.exec(t, `UPDATE environment_configs SET version = 16`+` WHERE config_type = 'labels'`)
	beat("agent-0", map[string]int64{"labels": 10})
	s.drained(t)
	eventually(t, "repair closed and failed version deferred", func() (bool, string) {
		st := svc.Stats()
		return st.RepairsClosed >= 1 && st.RepairsRefused == 1, fmt.Sprintf("%+v", st)
	})
	for _, h := range rep.all() {
		if h.AgentID == "agent-0" {
			t.Fatalf("agent-0 was sent the version it acked failed: %+v", h)
		}
	}
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM config_repairs r JOIN hosts h ON h.id = r.host_id
		WHERE h.agent_id = 'agent-2'`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open != 0 {
		t.Fatalf("agent-2 still has %d open repairs after reporting the version", open)
	}
}

// configsync_antientropy_repairs_total follows anti-entropy through one repair: a heartbeat behind
// the environment's version is one requested repair, the same gap at the next heartbeat one backed_off
// (within the backoff), and the heartbeat at the version one closed; each scrape moves by exactly that.
func TestAntiEntropyRepairsAreExported(t *testing.T) {
	s := newStack(t, 1)
	var rep repairs
	rep.subscribe(t, s.nc)
	_, scrape := s.startMetered(t, repairConfig())
	const family = "configsync_antientropy_repairs_total"
	results := []string{"requested", "backed_off", "refused", "closed"}
	before := scrape()
	for _, r := range results {
		if !before.Has(family, map[string]string{"result": r}) {
			t.Fatalf("%s{result=%q} not exported before any repair", family, r)
		}
	}
	// moved waits until result has moved by want since before, then checks every result moved by
	// exactly what wants says (the others by nothing).
	moved := func(what string, wants map[string]float64) {
		t.Helper()
		eventually(t, what, func() (bool, string) {
			now := scrape()
			var got []string
			ok := true
			for _, r := range results {
				d := now.Value(family, map[string]string{"result": r}) - before.Value(family, map[string]string{"result": r})
				got = append(got, fmt.Sprintf("%s %+v", r, d))
				ok = ok && d == wants[r]
			}
			return ok, fmt.Sprint(got)
		})
	}
	s.exec(t, `INSERT INTO environment_configs (environment_id, config_type, config_data, version)
		SELECT id, 'labels', '{"static":{"a":"b"}}', 10 FROM environments`)
	behind := protocol.Heartbeat{AgentID: "agent-0", ConfigHash: "h", ConfigVersions: map[string]int64{"labels": 9}}

	s.publish(t, protocol.HeartbeatSubject("agent-0"), behind)
	s.drained(t)
	moved("one requested repair", map[string]float64{"requested": 1})
	if all := rep.all(); len(all) != 1 || all[0].Types["labels"].Expected != 10 {
		t.Fatalf("repairs asked: %+v, want labels v10 for agent-0", all)
	}

	s.publish(t, protocol.HeartbeatSubject("agent-0"), behind)
	s.drained(t)
	moved("the same gap backed off", map[string]float64{"requested": 1, "backed_off": 1})

	s.publish(t, protocol.HeartbeatSubject("agent-0"), protocol.Heartbeat{AgentID: "agent-0", ConfigHash: "h", ConfigVersions: map[string]int64{"labels": 10}})
	s.drained(t)
	moved("the repair closed", map[string]float64{"requested": 1, "backed_off": 1, "closed": 1})
	if n := len(rep.all()); n != 1 {
		t.Fatalf("%d repairs asked, want 1", n)
	}
}

// A heartbeat stored within the grace of a write is not behind yet (the push is on its way); once the
// grace is over the host is checked again from its stored report: repaired unless it acked the version
// meanwhile.
func TestAntiEntropyChecksAgainAfterTheGrace(t *testing.T) {
	s := newStack(t, 2)
	cfg := testConfig()
	cfg.RepairGrace = time.Second
	var rep repairs
	rep.subscribe(t, s.nc)
	s.startService(t, cfg)
	s.exec(t, `INSERT INTO environment_configs (environment_id, config_type, config_data, version)
		SELECT id, 'labels', '{"static":{"a":"b"}}', 10 FROM environments`)
	for _, agent := range []string{"agent-0", "agent-1"} {
		s.publish(t, protocol.HeartbeatSubject(agent), protocol.Heartbeat{AgentID: agent, ConfigHash: "h", ConfigVersions: map[string]int64{"labels": 9}})
	}
	// agent-1's push arrived and it acked; agent-0's push was lost.
	s.publish(t, protocol.AckSubject("agent-1"), ack("agent-1", "labels", 10, protocol.AckApplied, ""))
	s.drained(t)
	if n := len(rep.all()); n != 0 {
		t.Fatalf("%d repairs asked within the grace", n)
	}
	eventually(t, "the repair of agent-0 after the grace", func() (bool, string) {
		all := rep.all()
		return len(all) == 1 && all[0].AgentID == "agent-0" && all[0].Types["labels"].Expected == 10, fmt.Sprintf("%+v", all)
	})
	// Both hosts were due at the same moment and checked together: agent-1 was not asked for.
	for _, h := range rep.all() {
		if h.AgentID == "agent-1" {
			t.Fatalf("agent-1 repaired although it acked the version: %+v", h)
		}
	}
}

// eventually waits (30 s at most) for check, which says what it saw when it is not yet true.
func eventually(t testing.TB, what string, check func() (bool, string)) {
	t.Helper()
	testinfra.EventuallyNoError(t, 30*time.Second, testinfra.Explain(check), what)
}

// ack-ingest exports the streams it consumes and its durables' backlog, read from JetStream at each
// scrape: while it is down, acks pile up in CONFIGSYNC_ACKS as its durable's pending messages (in the
// export of a replica still running, here the stopped one's registry); once a replica drains them, the
// backlog and the work-queue stream are empty again. Heartbeats keep one message per agent.
func TestStreamBacklogIsExported(t *testing.T) {
	s := newStack(t, 3)
	m := metrics.New()
	down := ackingest.NewWithMetrics(testConfig(), s.pool, s.js, s.log, m)
	down.Start()
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	scrape := func() metricstest.Scrape { return metricstest.Get(t, srv.URL) }
	acks, heartbeats := map[string]string{"stream": protocol.AcksStream}, map[string]string{"stream": protocol.HeartbeatsStream}
	acksDurable := map[string]string{"consumer": "configsync-ack-ingest-acks"}
	heartbeatsDurable := map[string]string{"consumer": protocol.HeartbeatsIngestDurable}
	eventually(t, "both durables created and read", func() (bool, string) {
		sc := scrape()
		return sc.Value("configsync_consumer_info_up", acksDurable) == 1 && sc.Value("configsync_consumer_info_up", heartbeatsDurable) == 1,
			fmt.Sprint(sc.Labels("configsync_consumer_info_up"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := down.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	for i := range 3 {
		agent := fmt.Sprintf("agent-%d", i)
		s.publish(t, protocol.AckSubject(agent), ack(agent, "labels", 4, protocol.AckApplied, ""))
		s.publish(t, protocol.HeartbeatSubject(agent), heartbeat(agent, "h", 4))
		s.publish(t, protocol.HeartbeatSubject(agent), heartbeat(agent, "h", 4)) // a work queue keeps both
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// A flush returns once the server has the messages; each stream stores them on its own goroutine,
	// and a scrape reads the streams and the durables with separate requests, so the wait is for one
	// scrape that saw all of them stored and pending.
	var backlog metricstest.Scrape
	eventually(t, "3 acks and 6 heartbeats stored and waiting", func() (bool, string) {
		backlog = scrape()
		return backlog.Value("configsync_consumer_pending_messages", acksDurable) == 3 &&
				backlog.Value("configsync_consumer_pending_messages", heartbeatsDurable) == 6 &&
				backlog.Value("configsync_stream_messages", acks) == 3 && backlog.Value("configsync_stream_messages", heartbeats) == 6,
			fmt.Sprint(backlog.Value("configsync_consumer_pending_messages", acksDurable), backlog.Value("configsync_consumer_pending_messages", heartbeatsDurable),
				backlog.Value("configsync_stream_messages", acks), backlog.Value("configsync_stream_messages", heartbeats))
	})
	for _, c := range []struct {
		l    map[string]string
		want float64
	}{{acks, 3}, {heartbeats, 6}} {
		l := c.l
		if got := backlog.Value("configsync_stream_messages", l); got != c.want {
			t.Errorf("stream messages %v = %v, want %v", l, got, c.want)
		}
		if got := backlog.Value("configsync_stream_bytes", l); got < 3*50 {
			t.Errorf("stream bytes %v = %v for 3 messages", l, got)
		}
		if got := backlog.Value("configsync_stream_max_bytes", l); got != natsconn.StreamMaxBytes {
			t.Errorf("stream max bytes %v = %v, want %d", l, got, natsconn.StreamMaxBytes)
		}
		if got := backlog.Value("configsync_stream_info_up", l); got != 1 {
			t.Errorf("stream info_up %v = %v", l, got)
		}
	}
	if backlog.Has("configsync_stream_messages", map[string]string{"stream": protocol.EventsStream}) {
		t.Error("ack-ingest exports the events stream it does not consume")
	}

	s.startService(t, testConfig())
	s.drained(t)
	eventually(t, "the backlog drained", func() (bool, string) {
		sc := scrape()
		return sc.Value("configsync_consumer_pending_messages", acksDurable) == 0 &&
				sc.Value("configsync_consumer_pending_messages", heartbeatsDurable) == 0 &&
				sc.Value("configsync_consumer_ack_pending_messages", acksDurable) == 0 &&
				sc.Value("configsync_stream_messages", acks) == 0 && sc.Value("configsync_stream_messages", heartbeats) == 0,
			fmt.Sprint(sc.Value("configsync_consumer_pending_messages", acksDurable), sc.Value("configsync_stream_messages", acks),
				sc.Value("configsync_stream_messages", heartbeats))
	})
}
