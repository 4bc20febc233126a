package delivery_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
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

	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/libs/platform/metrics/metricstest"
	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/credential"
	"github.com/configsync/configsync/services/delivery"
	"github.com/configsync/configsync/services/delivery/internal/natsapi"
	"github.com/configsync/configsync/services/resolver"
)

// stack is PostgreSQL, an embedded nats-server with ConfigSync's streams, one client with one
// environment of hosts, and simulated agents listening for commands.
type stack struct {
	pool     *pgxpool.Pool
	nc       *nats.Conn
	js       jetstream.JetStream
	log      *zap.Logger
	logs     *observer.ObservedLogs
	clientID uuid.UUID
	envID    uuid.UUID
	hosts    []testHost
	fleet    *fleet
}

type testHost struct {
	id     uuid.UUID
	agent  string
	online bool
}

// newStack registers n hosts; every third one (index 2, 5, ...) last sent a heartbeat an hour ago.
func newStack(t testing.TB, n int) *stack {
	t.Helper()
	s := &stack{pool: testinfra.Postgres(t)}
	srv := testinfra.NATS(t)
	s.nc = srv.Connect(t)
	s.js = testinfra.JetStream(t, s.nc, natsconn.EnsureStreams)
	if tt, ok := t.(*testing.T); ok {
		s.log, s.logs = testinfra.Logger(tt)
	} else {
		s.log = zap.NewNop()
	}
	s.seed(t, n)
	s.fleet = newFleet(t, srv.Connect(t))
	return s
}

// newServedStack is newStack with the services delivery calls running on it: a resolver and a
// credential service.
func newServedStack(t testing.TB, n int) *stack {
	t.Helper()
	s := newStack(t, n)
	s.startResolver(t)
	s.startCredential(t)
	return s
}

// newRunningStack is newServedStack with delivery running too, in testDeliveryConfig.
func newRunningStack(t testing.TB, n int) *stack {
	t.Helper()
	s := newServedStack(t, n)
	s.startDelivery(t, testDeliveryConfig(t))
	return s
}

func (s *stack) seed(t testing.TB, n int) {
	t.Helper()
	ctx := context.Background()
	if err := s.pool.QueryRow(ctx, `INSERT INTO clients (name) VALUES ('acme') RETURNING id`).Scan(&s.clientID); err != nil {
		t.Fatal(err)
	}
	if err := s.pool.QueryRow(ctx, `INSERT INTO environments (client_id, name) VALUES ($1, 'prod') RETURNING id`, s.clientID).Scan(&s.envID); err != nil {
		t.Fatal(err)
	}
	rows, err := s.pool.Query(ctx, `INSERT INTO hosts (client_id, environment_id, hostname, agent_id, last_heartbeat_at)
		SELECT $1, $2, 'host-' || i, 'agent-' || lpad(i::text, 5, '0'),
		       CASE WHEN i % 3 = 2 THEN now() - interval '1 hour' ELSE now() END
		FROM generate_series(0, $3::int - 1) AS i ORDER BY i RETURNING id, agent_id, last_heartbeat_at > now() - interval '1 minute'`, s.clientID, s.envID, n)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var h testHost
		if err := rows.Scan(&h.id, &h.agent, &h.online); err != nil {
			t.Fatal(err)
		}
		s.hosts = append(s.hosts, h)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

func defaults[T any](t testing.TB) T {
	t.Helper()
	var cfg T
	if err := envconfig.LoadFrom(&cfg, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (s *stack) startResolver(t testing.TB) {
	t.Helper()
	svc, err := resolver.New(defaults[resolver.Config](t), s.pool, s.log.Named("resolver"))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(s.nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWithin(t, svc.Stop) })
}

func (s *stack) startCredential(t testing.TB) {
	t.Helper()
	cfg := defaults[credential.Config](t)
	cfg.Keyring = "v1:" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	svc, err := credential.New(cfg, s.pool, s.log.Named("credential"))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background(), s.nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWithin(t, svc.Stop) })
}

func testDeliveryConfig(t testing.TB) delivery.Config {
	cfg := defaults[delivery.Config](t)
	cfg.PushPageSize = 7 // several pages even for a small fleet
	cfg.PushAckWait = 3 * time.Second
	cfg.PushRetryDelay = 100 * time.Millisecond
	return cfg
}

func (s *stack) startDelivery(t testing.TB, cfg delivery.Config) (stop func()) {
	t.Helper()
	return s.runDelivery(t, delivery.New(cfg, s.nc, s.js, s.log.Named("delivery")))
}

// startMetered is startDelivery reporting to a registry of its own, and returns a scrape of that
// registry's text exposition.
func (s *stack) startMetered(t testing.TB, cfg delivery.Config) (scrape func() metricstest.Scrape) {
	t.Helper()
	m := metrics.New()
	s.runDelivery(t, delivery.NewWithMetrics(cfg, s.nc, s.js, s.log.Named("delivery"), m))
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	return func() metricstest.Scrape { return metricstest.Get(t, srv.URL) }
}

// runDelivery starts svc; stop (also run when the test ends) stops it.
func (s *stack) runDelivery(t testing.TB, svc *delivery.Service) (stop func()) {
	t.Helper()
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { stopWithin(t, svc.Stop) }) }
	t.Cleanup(stop)
	return stop
}

func stopWithin(t testing.TB, stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// putEnv writes an environment config as config-api does (a new version from the one sequence).
func (s *stack) putEnv(t testing.TB, typ, data string) int64 {
	t.Helper()
	return s.put(t, "environment_configs", "environment_id", s.envID, typ, data)
}

// putHost writes a host override as config-api does.
func (s *stack) putHost(t testing.TB, h testHost, typ, data string) int64 {
	t.Helper()
	return s.put(t, "host_configs", "host_id", h.id, typ, data)
}

// put upserts a config row of table (keyed by key = id and the type) at a new version from the one
// sequence, undeleting it, and returns the version.
func (s *stack) put(t testing.TB, table, key string, id uuid.UUID, typ, data string) int64 {
	t.Helper()
	var v int64
	if err := s.pool.QueryRow(context.Background(), `INSERT INTO `+table+` (`+key+`, config_type, config_data, version)
		VALUES ($1, $2, $3, nextval('config_version_seq'))
		ON CONFLICT (`+key+`, config_type) DO UPDATE SET config_data = excluded.config_data, version = excluded.version, deleted_at = NULL
		RETURNING version`, id, typ, data).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// deleteEnv turns an environment config into a tombstone with a new version.
func (s *stack) deleteEnv(t testing.TB, typ string) int64 {
	t.Helper()
	var v int64
	if err := s.pool.QueryRow(context.Background(), `UPDATE environment_configs SET config_data = NULL, deleted_at = now(),
		version = nextval('config_version_seq') WHERE environment_id = $1 AND config_type = $2 RETURNING version`, s.envID, typ).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// createCredential stores a credential through the credential service and returns its id.
func (s *stack) createCredential(t testing.TB, clientID uuid.UUID, name string, secret map[string]string) string {
	t.Helper()
	data, _ := json.Marshal(protocol.CredentialCreateRequest{ClientID: clientID.String(), Name: name, Secret: secret})
	msg, err := s.nc.Request(protocol.CredentialCreateSubject, data, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var meta protocol.CredentialMeta
	if err := json.Unmarshal(msg.Data, &meta); err != nil || meta.ID == "" {
		t.Fatalf("create credential: %s (%v)", msg.Data, err)
	}
	return meta.ID
}

// otherClient registers a second client (for cross-client credential references).
func (s *stack) otherClient(t testing.TB) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	if err := s.pool.QueryRow(context.Background(), `INSERT INTO clients (name) VALUES ('globex') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// changed publishes a config-change event as the outbox relay does.
func (s *stack) changed(t testing.TB, ev protocol.ConfigChanged) {
	t.Helper()
	if ev.EventID == "" {
		ev.EventID = uuid.NewString()
	}
	ev.ClientID, ev.EnvironmentID, ev.OccurredAt = s.clientID.String(), s.envID.String(), time.Now().UTC()
	s.publishEvent(t, ev)
}

func (s *stack) publishEvent(t testing.TB, v any) {
	t.Helper()
	data, ok := v.([]byte)
	if !ok {
		data, _ = json.Marshal(v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.js.Publish(ctx, protocol.ConfigChangedSubject, data); err != nil {
		t.Fatal(err)
	}
}

// eventsSettled waits until delivery has settled (acked or terminated) every event published so far,
// then makes sure every command published before that reached the simulated agents.
func (s *stack) eventsSettled(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		return testinfra.Drained(ctx, s.js, protocol.EventsStream, natsapi.PushDurable, 0)
	}, "events settled")
	// Delivery flushed its publishes before acking, so the server routed them to the agents'
	// connection already; drain waits until the fleet's handler has recorded them all.
	s.fleet.drain(t)
}

// fetch asks for an agent's configs as the agent does.
func (s *stack) fetch(t testing.TB, subjectAgent, payloadAgent string) protocol.FetchReply {
	t.Helper()
	data, _ := json.Marshal(protocol.FetchRequest{AgentID: payloadAgent})
	msg, err := testinfra.RequestAsAgent(s.nc, subjectAgent, protocol.FetchSubject(subjectAgent), data, 15*time.Second)
	if err != nil {
		t.Fatalf("fetch %s: %v", subjectAgent, err)
	}
	var reply protocol.FetchReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		t.Fatalf("fetch reply %s: %v", msg.Data, err)
	}
	return reply
}

// fleet records the commands every simulated agent receives.
type fleet struct {
	nc      *nats.Conn
	mu      sync.Mutex
	got     map[string][]protocol.Command
	bad     []string
	settled chan struct{}
}

// settleAgent is the command subject token of the marker drain publishes to itself.
const settleAgent = "__settle__"

// drain waits until the subscription has handled everything it received before this call: the marker
// it publishes comes back after those messages, and one subscription handles its messages in order.
func (f *fleet) drain(t testing.TB) {
	t.Helper()
	if err := f.nc.Publish(protocol.CommandSubject(settleAgent), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.settled:
	case <-time.After(10 * time.Second):
		t.Fatal("the fleet's subscription did not handle its marker within 10s")
	}
}

func newFleet(t testing.TB, nc *nats.Conn) *fleet {
	t.Helper()
	f := &fleet{nc: nc, got: map[string][]protocol.Command{}, settled: make(chan struct{}, 1)}
	if _, err := nc.Subscribe(protocol.CommandSubjectPrefix+"*", func(m *nats.Msg) {
		agent := strings.TrimPrefix(m.Subject, protocol.CommandSubjectPrefix)
		if agent == settleAgent {
			f.settled <- struct{}{}
			return
		}
		var c protocol.Command
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := json.Unmarshal(m.Data, &c); err != nil {
			f.bad = append(f.bad, agent)
			return
		}
		f.got[agent] = append(f.got[agent], c)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return f
}

// commands returns what agent received for typ.
func (f *fleet) commands(agent, typ string) []protocol.Command {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []protocol.Command
	for _, c := range f.got[agent] {
		if c.ConfigType == typ {
			out = append(out, c)
		}
	}
	return out
}

// agents lists the agents that received anything.
func (f *fleet) agents() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.got))
	for a := range f.got {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

func (f *fleet) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = map[string][]protocol.Command{}
}
