package browser

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/configsync/configsync/agent/agentrun"
	"github.com/configsync/configsync/libs/platform/httpserver"
	"github.com/configsync/configsync/libs/platform/logging"
	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/platform/outbox"
	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/libs/testinfra"
	ackingest "github.com/configsync/configsync/services/ack-ingest"
	configapi "github.com/configsync/configsync/services/config-api"
	"github.com/configsync/configsync/services/credential"
	"github.com/configsync/configsync/services/delivery"
	"github.com/configsync/configsync/services/resolver"
)

// stack is the whole system in this process, as tools/devstack composes it: the five service modules in
// one fx app on a fresh PostgreSQL database and an embedded nats-server, plus one real agent.
type stack struct {
	t       *testing.T
	url     string // config-api (REST API and console)
	token   string // admin API token
	pool    *pgxpool.Pool
	envID   string
	hostID  string
	agentID string
}

func startStack(t *testing.T) *stack {
	t.Helper()
	dbURL := testinfra.PostgresURL(t)
	ns := testinfra.NATS(t)
	addr := testinfra.FreeAddr(t)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	// The resolver signs every config and the agent trusts its key: the console is tested with
	// signing on, as the system runs.
	signingKey := filepath.Join(t.TempDir(), "signing.key")
	trust, err := resolver.EnsureSigningKeyFile(signingKey)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"DATABASE_URL":              dbURL,
		"DATABASE_MIGRATE":          "false", // testinfra's database holds the schema already
		"DATABASE_MAX_CONNS":        "20",
		"NATS_URL":                  ns.URL(),
		"HTTP_ADDR":                 addr,
		"LOG_LEVEL":                 "warn",
		"LOG_FORMAT":                "console",
		"CREDENTIAL_CIPHER":         "local",
		"CONFIGSYNC_KEYRING":        "v1:" + base64.StdEncoding.EncodeToString(key),
		"RESOLVER_SIGNING_KEY_FILE": signingKey,
		// The overview's drifted and stale counts are the fleet stats, recomputed this often.
		"CONFIGAPI_FLEET_METRICS_INTERVAL": "1s",
	} {
		t.Setenv(k, v)
	}
	var pool *pgxpool.Pool
	app := fx.New(
		fx.NopLogger,
		logging.Module,
		pgdb.Module,
		natsconn.Module,
		httpserver.Module,
		outbox.Module,
		resolver.Module,
		credential.Module,
		configapi.Module,
		delivery.Module,
		ackingest.Module,
		fx.Invoke(func(*httpserver.Server) {}),
		fx.Populate(&pool),
	)
	if err := app.Err(); err != nil {
		t.Fatalf("compose services: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatalf("start services: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Errorf("stop services: %v", err)
		}
	})
	token, err := configapi.BootstrapAdminToken(ctx, pool, "browser-admin")
	if err != nil {
		t.Fatalf("bootstrap admin token: %v", err)
	}
	s := &stack{t: t, url: "http://" + addr, token: token, pool: pool}
	var client, env, host struct {
		ID      string `json:"id"`
		AgentID string `json:"agent_id"`
	}
	s.api(http.MethodPost, "/api/v1/clients", map[string]string{"name": "acme"}, &client)
	s.api(http.MethodPost, "/api/v1/clients/"+client.ID+"/environments", map[string]string{"name": "production"}, &env)
	s.api(http.MethodPost, "/api/v1/environments/"+env.ID+"/hosts", map[string]string{"hostname": "web-1.acme.internal"}, &host)
	s.envID, s.hostID, s.agentID = env.ID, host.ID, host.AgentID
	// Frequent heartbeats, so the reported config state follows an apply within seconds.
	s.api(http.MethodPut, "/api/v1/environments/"+env.ID+"/agent-configs/intervals",
		map[string]any{"config_data": map[string]string{"heartbeat": "2s"}}, nil)
	s.startAgent(ns.URL(), trust)
	return s
}

// startAgent runs the real agent for the stack's host until the test ends.
func (s *stack) startAgent(natsURL, trust string) {
	cfg := agentrun.DefaultConfig()
	keys, err := agentrun.TrustKeys(trust)
	if err != nil {
		s.t.Fatal(err)
	}
	cfg.Trust.PublicKeys = keys
	cfg.AgentID = s.agentID
	cfg.DataDir = s.t.TempDir()
	cfg.NATS = agentrun.NATSConfig{URL: natsURL}
	cfg.BootJitter = 0
	cfg.LogLevel = "warn"
	cfg.LogOutput = io.Discard
	// The stack heartbeats every 2s, under the default policy's 5s floor.
	cfg.Policy.Limits.MinInterval = time.Second
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := agentrun.Run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
			s.t.Errorf("agent stopped: %v", err)
		}
	}()
	s.t.Cleanup(func() { cancel(); wg.Wait() })
}

// api calls the REST API with the admin token and decodes "data" into out (when not nil).
func (s *stack) api(method, path string, body, out any) int {
	s.t.Helper()
	status, raw := s.call(method, path, body)
	if status >= 300 {
		s.t.Fatalf("%s %s: HTTP %d: %s", method, path, status, raw)
	}
	if out != nil {
		var env struct {
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(raw, &env); err != nil || json.Unmarshal(env.Data, out) != nil {
			s.t.Fatalf("%s %s: %s", method, path, raw)
		}
	}
	return status
}

func (s *stack) call(method, path string, body any) (int, []byte) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}
