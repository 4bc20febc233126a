package faults_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/natsauth/natsserver"
	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/platform/outbox"
	"github.com/configsync/configsync/libs/testinfra"
	ackingest "github.com/configsync/configsync/services/ack-ingest"
	configapi "github.com/configsync/configsync/services/config-api"
	"github.com/configsync/configsync/services/credential"
	"github.com/configsync/configsync/services/delivery"
	"github.com/configsync/configsync/services/resolver"
)

// svcAppPrefix starts the PostgreSQL application_name of every service pool, so a fault can target the
// services' connections and spare the test's own.
const svcAppPrefix = "svc-"

// stack is one test's system: a fresh PostgreSQL database, an in-process nats-server with ConfigSync's
// streams, and whichever services the test starts in-process. Every service gets its own NATS connection
// and its own pool, as separate processes would, so a fault hits each of them independently.
type stack struct {
	t       *testing.T
	dbURL   string
	db      *pgxpool.Pool // the test's own pool: fixtures and assertions
	nats    *testinfra.NATSServer
	nc      *nats.Conn // the test's own connection: fakes, observers, hostile publishers
	js      jetstream.JetStream
	log     *zap.Logger
	logs    *observer.ObservedLogs
	keyring string
	// signingKey is the resolver's key file and trustKeys its public key as real agents trust it
	// ("id=base64"): signing is on, as the system runs.
	signingKey, trustKeys string
	// auth is the NATS security domain: the server runs in operator mode, every service connects as its
	// own least-privilege user and every real agent as its own agent user.
	auth     *natsauth.Authority
	credsDir string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{t: t, dbURL: testinfra.PostgresURL(t)}
	s.log, s.logs = testinfra.Logger(t)
	s.db = s.newPool("faults-test", nil)
	auth, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	s.auth, s.credsDir = auth, t.TempDir()
	resolverDir := filepath.Join(s.credsDir, "nats-accounts")
	// TLS only, as deployed: every service and agent verifies the server against the test's CA.
	s.nats = testinfra.NATS(t, testinfra.WithTLS(), testinfra.WithServerOptions(func(o *server.Options) {
		if err := natsserver.Configure(o, auth, resolverDir); err != nil {
			panic(fmt.Sprintf("faults: NATS operator mode: %v", err))
		}
	}))
	// The test's connection comes back fast after a NATS restart: it observes, it is not under test. It
	// is unrestricted: fakes, observers and hostile publishers play any part.
	s.nc = s.nats.Connect(t, nats.UserCredentials(s.writeCreds("test", must(auth.UnrestrictedCreds("faults-test")))),
		nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.ReconnectJitter(0, 0))
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	s.js = js
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := natsconn.EnsureStreams(ctx, js); err != nil {
		t.Fatalf("ensure streams: %v", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	s.keyring = "v1:" + base64.StdEncoding.EncodeToString(key)
	s.signingKey = filepath.Join(t.TempDir(), "signing.key")
	trust, err := resolver.EnsureSigningKeyFile(s.signingKey)
	if err != nil {
		t.Fatal(err)
	}
	s.trustKeys = trust
	return s
}

// newPool opens a pool on the test database under the PostgreSQL application name app; tracer (may be
// nil) sees every query. It is closed at cleanup.
func (s *stack) newPool(app string, tracer pgx.QueryTracer) *pgxpool.Pool {
	s.t.Helper()
	cfg, err := pgxpool.ParseConfig(s.dbURL)
	if err != nil {
		s.t.Fatal(err)
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(pool.Close)
	return pool
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// writeCreds writes a creds file into the stack's secrets directory and returns its path.
func (s *stack) writeCreds(name string, c natsauth.Creds) string {
	s.t.Helper()
	path := filepath.Join(s.credsDir, name+".creds")
	if err := os.WriteFile(path, c.File, 0o600); err != nil {
		s.t.Fatal(err)
	}
	return path
}

// serviceKind maps a connection name to the service whose user it connects as: the outbox relay runs
// inside config-api and shares its user.
func serviceKind(name string) string {
	if name == "relay" {
		return natsauth.ConfigAPIService
	}
	return name
}

// serviceNATS is the NATS configuration of service kind: its own user and inbox prefix; only
// config-api's user may manage the streams.
func (s *stack) serviceNATS(kind string) natsconn.Config {
	s.t.Helper()
	return natsconn.Config{
		URL: s.nats.URL(), Name: kind,
		CredsFile:     s.writeCreds(kind, must(s.auth.ServiceCreds(kind))),
		InboxPrefix:   natsauth.ServiceInboxPrefix(kind),
		ManageStreams: kind == natsauth.ConfigAPIService,
		TLSCA:         s.nats.CAFile(),
	}
}

// serviceEnv is serviceNATS as a binary's environment.
func (s *stack) serviceEnv(kind string) []string {
	c := s.serviceNATS(kind)
	return []string{"NATS_URL=" + c.URL, "NATS_CREDS=" + c.CredsFile, "NATS_INBOX_PREFIX=" + c.InboxPrefix,
		fmt.Sprintf("NATS_MANAGE_STREAMS=%t", c.ManageStreams), "NATS_TLS_CA=" + c.TLSCA}
}

// agentCreds issues agentID its own agent user and returns the creds file.
func (s *stack) agentCreds(agentID string) string {
	s.t.Helper()
	return s.writeCreds("agent-"+agentID, must(s.auth.Issuer().IssueAgent(agentID)))
}

// serviceConn connects a service to NATS the way the binaries do (natsconn.Connect: reconnect forever),
// as its own user. Only the reconnect wait is shortened, so a restarted NATS is found again within the
// test's budget.
func (s *stack) serviceConn(name string) *nats.Conn {
	s.t.Helper()
	cfg := s.serviceNATS(serviceKind(name))
	cfg.Name = name
	nc, err := natsconn.Connect(cfg, s.log.Named(name),
		nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 100*time.Millisecond))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(nc.Close)
	return nc
}

func jetStream(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// defaults is a service Config with every field at its documented default.
func defaults[T any](t testing.TB) T {
	t.Helper()
	var cfg T
	if err := envconfig.LoadFrom(&cfg, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// service is one in-process service with its own NATS connection and pool.
type service struct {
	name string
	nc   *nats.Conn
	pool *pgxpool.Pool
	stop func(context.Context) error
	once sync.Once
}

// shutdown stops the service (letting in-flight work finish within a bound) and closes its connection
// and pool. It is idempotent and also runs at cleanup.
func (v *service) shutdown(t testing.TB) {
	v.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if v.stop != nil {
			if err := v.stop(ctx); err != nil {
				t.Errorf("stop %s: %v", v.name, err)
			}
		}
		if v.nc != nil {
			v.nc.Close()
		}
		if v.pool != nil {
			v.pool.Close()
		}
	})
}

func (s *stack) register(v *service) *service {
	s.t.Cleanup(func() { v.shutdown(s.t) })
	return v
}

// startResolver runs the resolver; tracer (may be nil) sees its queries (see pageGate).
func (s *stack) startResolver(tracer pgx.QueryTracer) *service {
	s.t.Helper()
	v := &service{name: "resolver", nc: s.serviceConn("resolver"), pool: s.newPool(svcAppPrefix+"resolver", tracer)}
	cfg := defaults[resolver.Config](s.t)
	cfg.SigningKeyFile = s.signingKey
	svc, err := resolver.New(cfg, v.pool, s.log.Named("resolver"))
	if err != nil {
		s.t.Fatalf("start resolver: %v", err)
	}
	if err := svc.Start(v.nc); err != nil {
		s.t.Fatalf("start resolver: %v", err)
	}
	v.stop = svc.Stop
	return s.register(v)
}

// startCredential runs the credential service on the local keyring unless edit says otherwise.
func (s *stack) startCredential(edit func(*credential.Config)) *service {
	s.t.Helper()
	cfg := defaults[credential.Config](s.t)
	cfg.Keyring = s.keyring
	if edit != nil {
		edit(&cfg)
	}
	v := &service{name: "credential", nc: s.serviceConn("credential"), pool: s.newPool(svcAppPrefix+"credential", nil)}
	svc, err := credential.New(cfg, v.pool, s.log.Named("credential"))
	if err != nil {
		s.t.Fatalf("credential: %v", err)
	}
	if err := svc.Start(context.Background(), v.nc); err != nil {
		s.t.Fatalf("start credential: %v", err)
	}
	v.stop = svc.Stop
	return s.register(v)
}

// deliveryConfig is delivery's configuration for the suite: defaults with short ack waits and retry
// delays, so redeliveries happen within a test's budget.
func deliveryConfig(t testing.TB) delivery.Config {
	cfg := defaults[delivery.Config](t)
	cfg.PushAckWait = 2 * time.Second
	cfg.PushRetryDelay = 200 * time.Millisecond
	cfg.UpstreamTimeout = 2 * time.Second
	return cfg
}

// startDelivery runs delivery with deliveryConfig, changed by edit.
func (s *stack) startDelivery(edit func(*delivery.Config)) *service {
	s.t.Helper()
	cfg := deliveryConfig(s.t)
	if edit != nil {
		edit(&cfg)
	}
	v := &service{name: "delivery", nc: s.serviceConn("delivery")}
	svc := delivery.New(cfg, v.nc, jetStream(s.t, v.nc), s.log.Named("delivery"))
	if err := svc.Start(); err != nil {
		s.t.Fatalf("start delivery: %v", err)
	}
	v.stop = svc.Stop
	return s.register(v)
}

// startAckIngest runs ack-ingest with short retry delays.
func (s *stack) startAckIngest() *service {
	s.t.Helper()
	return s.startAckIngestWith(nil)
}

// startAckIngestWith is startAckIngest with its configuration changed by edit (may be nil).
func (s *stack) startAckIngestWith(edit func(*ackingest.Config)) *service {
	s.t.Helper()
	cfg := defaults[ackingest.Config](s.t)
	cfg.AckWait = 2 * time.Second
	cfg.RetryDelay = 100 * time.Millisecond
	cfg.MaxRetryDelay = time.Second
	if edit != nil {
		edit(&cfg)
	}
	v := &service{name: "ack-ingest", nc: s.serviceConn("ack-ingest"), pool: s.newPool(svcAppPrefix+"ack-ingest", nil)}
	svc := ackingest.New(cfg, v.pool, jetStream(s.t, v.nc), s.log.Named("ack-ingest"))
	svc.Start()
	v.stop = svc.Stop
	return s.register(v)
}

// startRelay runs the outbox relay the way outbox.Module does, for the service's lifetime.
func (s *stack) startRelay() *service {
	s.t.Helper()
	v := &service{name: "relay", nc: s.serviceConn("relay"), pool: s.newPool(svcAppPrefix+"relay", nil)}
	relay := outbox.NewRelay(v.pool, jetStream(s.t, v.nc), s.log.Named("relay"), outbox.RelayOptions{
		PollInterval: 200 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = relay.Run(ctx)
	}()
	v.stop = func(ctx context.Context) error {
		cancel()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.register(v)
}

// startAPI serves config-api over HTTP (no relay: startRelay runs it, as outbox.Module would) and
// returns a client holding a fresh admin token.
func (s *stack) startAPI() *apiClient {
	s.t.Helper()
	return s.startAPIWindow(90 * time.Second)
}

// startAPIWindow is startAPI with CONFIGSYNC_ONLINE_WINDOW set to onlineWindow.
func (s *stack) startAPIWindow(onlineWindow time.Duration) *apiClient {
	s.t.Helper()
	v := &service{name: "config-api", nc: s.serviceConn("config-api"), pool: s.newPool(svcAppPrefix+"config-api", nil)}
	svc, err := configapi.New(configapi.Config{OnlineWindow: onlineWindow, RequestTimeout: 5 * time.Second},
		v.pool, v.nc, s.log.Named("config-api"))
	if err != nil {
		s.t.Fatalf("config-api: %v", err)
	}
	router := mux.NewRouter()
	svc.Register(router)
	srv := httptest.NewServer(router)
	v.stop = func(context.Context) error { srv.Close(); return nil }
	s.register(v)
	return newAPIClient(s.t, srv.URL, s.adminToken())
}

// adminToken mints an admin API token straight in the database.
func (s *stack) adminToken() string {
	s.t.Helper()
	token, err := configapi.BootstrapAdminToken(context.Background(), s.db, fmt.Sprintf("faults-admin-%d", time.Now().UnixNano()))
	if err != nil {
		s.t.Fatalf("bootstrap admin token: %v", err)
	}
	return token
}

// startBackend starts every backend service in-process except config-api's HTTP edge: resolver
// (behind gate, may be nil), credential, delivery (edited), ack-ingest and the relay.
func (s *stack) startBackend(gate pgx.QueryTracer, editDelivery func(*delivery.Config)) {
	s.t.Helper()
	s.startResolver(gate)
	s.startCredential(nil)
	s.startDelivery(editDelivery)
	s.startAckIngest()
	s.startRelay()
}

// logged counts the service log entries with message msg whose fields include every one of want.
func (s *stack) logged(msg string, want map[string]any) int {
	n := 0
	for _, e := range s.logs.FilterMessage(msg).All() {
		ctx := e.ContextMap()
		ok := true
		for k, v := range want {
			if fmt.Sprint(ctx[k]) != fmt.Sprint(v) {
				ok = false
				break
			}
		}
		if ok {
			n++
		}
	}
	return n
}

// dbExec runs a statement on the test's pool.
func (s *stack) dbExec(sql string, args ...any) {
	s.t.Helper()
	if _, err := s.db.Exec(context.Background(), sql, args...); err != nil {
		s.t.Fatalf("exec %q: %v", sql, err)
	}
}

// applyStatus is the stored apply status of one host and config type.
type applyStatus struct {
	Version int64
	Status  string
	Error   string
	Found   bool
}

func (s *stack) applyStatus(hostID, configType string) applyStatus {
	s.t.Helper()
	var a applyStatus
	var errText *string
	err := s.db.QueryRow(context.Background(), `SELECT version, status, error FROM host_config_apply_status
		WHERE host_id = $1 AND config_type = $2`, hostID, configType).Scan(&a.Version, &a.Status, &errText)
	if err == pgx.ErrNoRows {
		return a
	}
	if err != nil {
		s.t.Fatalf("read apply status: %v", err)
	}
	a.Found = true
	if errText != nil {
		a.Error = *errText
	}
	return a
}

// heartbeatSeen reports whether a heartbeat of the host has been stored.
func (s *stack) heartbeatSeen(hostID string) bool {
	s.t.Helper()
	var seen bool
	if err := s.db.QueryRow(context.Background(), `SELECT last_heartbeat_at IS NOT NULL FROM hosts WHERE id = $1`, hostID).Scan(&seen); err != nil {
		s.t.Fatalf("read host: %v", err)
	}
	return seen
}

// waitApplied waits until every host's stored apply status for configType is version, applied.
func (s *stack) waitApplied(timeout time.Duration, hosts []host, configType string, version int64) {
	s.t.Helper()
	testinfra.EventuallyNoError(s.t, timeout, func() error {
		for _, h := range hosts {
			a := s.applyStatus(h.ID, configType)
			if !a.Found || a.Version != version || a.Status != "applied" {
				return fmt.Errorf("host %s (agent %s): %+v", h.ID, h.AgentID, a)
			}
		}
		return nil
	}, fmt.Sprintf("apply status %s v%d of %d hosts", configType, version, len(hosts)))
}

// consumerIdle returns nil when a durable consumer has nothing pending or unacknowledged, else what it
// still holds.
func (s *stack) consumerIdle(stream, durable string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := s.js.Consumer(ctx, stream, durable)
	if err != nil {
		return fmt.Errorf("consumer %s/%s: %v", stream, durable, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("consumer %s/%s info: %v", stream, durable, err)
	}
	if info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0 {
		return nil
	}
	return fmt.Errorf("consumer %s: pending %d, ack pending %d, redelivered %d", durable, info.NumPending, info.NumAckPending, info.NumRedelivered)
}
