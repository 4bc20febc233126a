package configapi_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/natsauth/natsserver"
	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	configapi "github.com/configsync/configsync/services/config-api"
	"github.com/configsync/configsync/services/credential"
	"github.com/configsync/configsync/services/resolver"
)

// harness is config-api on a real PostgreSQL database and an embedded nats-server, with the real
// resolver and credential services started through their fx Modules.
type harness struct {
	t     testing.TB
	pool  *pgxpool.Pool
	nc    *nats.Conn
	srv   *httptest.Server
	logs  *observer.ObservedLogs
	admin string
	// natsURL is the embedded server's URL (for connecting as an agent).
	natsURL string
	apiCfg  configapi.Config
	log     *zap.Logger
	// natsDir holds the system and service creds files when NATS runs in operator mode.
	natsDir string
	// api is the first replica (h.srv's).
	api *configapi.Service
}

// TestMain gives the credential service a throwaway local keyring. It is set once, here, because
// the tests run in parallel (t.Setenv forbids that). It also fails the package if a goroutine outlives
// the tests.
func TestMain(m *testing.M) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic(err)
	}
	os.Setenv("CREDENTIAL_CIPHER", "local")
	os.Setenv("CONFIGSYNC_KEYRING", "v1:"+base64.StdEncoding.EncodeToString(key))
	goleak.VerifyTestMain(m)
}

// harnessOption changes what newHarness starts.
type harnessOption func(*harnessConfig)

type harnessConfig struct {
	noResolver bool
	identity   *natsauth.Authority
	publicURL  string
	api        func(*configapi.Config)
}

// withAPIConfig edits config-api's Config before it starts.
func withAPIConfig(edit func(*configapi.Config)) harnessOption {
	return func(c *harnessConfig) { c.api = edit }
}

// withPublicURL sets config-api's public URL (CONFIGSYNC_PUBLIC_URL), as behind a TLS-terminating proxy.
func withPublicURL(u string) harnessOption { return func(c *harnessConfig) { c.publicURL = u } }

// withNATSIdentity runs NATS in operator mode for authority and has config-api issue and revoke agents'
// own NATS users.
func withNATSIdentity(a *natsauth.Authority) harnessOption {
	return func(c *harnessConfig) { c.identity = a }
}

// withoutResolver leaves the resolver service out (requests to it find no responder).
func withoutResolver() harnessOption { return func(c *harnessConfig) { c.noResolver = true } }

func newHarness(t testing.TB, opts ...harnessOption) *harness {
	t.Helper()
	var cfg harnessConfig
	for _, o := range opts {
		o(&cfg)
	}
	pool := testinfra.Postgres(t)
	apiCfg := configapi.Config{OnlineWindow: 90 * time.Second, RequestTimeout: 5 * time.Second, PublicURL: cfg.publicURL}
	var natsOpts []testinfra.NATSOption
	var connOpts []nats.Option
	var natsDir string
	// The credential service's Config as its Module would load it (the keyring comes from TestMain).
	var credCfg credential.Config
	if err := envconfig.Load(&credCfg); err != nil {
		t.Fatal(err)
	}
	if cfg.identity != nil {
		dir := t.TempDir()
		natsDir = dir
		natsOpts = append(natsOpts, testinfra.WithServerOptions(func(o *server.Options) {
			if err := natsserver.Configure(o, cfg.identity, filepath.Join(dir, "accounts")); err != nil {
				t.Fatal(err)
			}
		}))
		connOpts = append(connOpts, nats.UserCredentials(writeCreds(t, dir, "service", must(cfg.identity.UnrestrictedCreds("config-api-harness")))))
		// The credential service is the account's custodian: the system user and the account signer
		// document are its; config-api gets only the narrow issuer document, as deployed (natsauthgen's
		// credential-account-signer.json and config-api-issuer.json).
		credCfg.NATSSystemCreds = writeCreds(t, dir, "system", must(cfg.identity.SystemCreds("credential")))
		signer, _ := json.Marshal(cfg.identity.AccountSignerSeeds())
		credCfg.NATSAccountSignerFile = filepath.Join(dir, "credential-account-signer.json")
		if err := os.WriteFile(credCfg.NATSAccountSignerFile, signer, 0o600); err != nil {
			t.Fatal(err)
		}
		seeds, _ := json.Marshal(cfg.identity.IssuerSeeds())
		apiCfg.NATSAuthorityFile = filepath.Join(dir, "config-api-issuer.json")
		if err := os.WriteFile(apiCfg.NATSAuthorityFile, seeds, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.api != nil {
		cfg.api(&apiCfg)
	}
	ns := testinfra.NATS(t, natsOpts...)
	h0 := &harness{t: t, pool: pool, natsDir: natsDir}
	nc := ns.Connect(t, connOpts...)
	log, logs := testinfra.Logger(t)

	// The real resolver and credential services, composed the way tools/devstack composes them (the
	// credential service's keyring comes from TestMain).
	services := []fx.Option{fx.Supply(pool, nc, log), fx.NopLogger}
	if !cfg.noResolver {
		services = append(services, resolver.Module)
	}
	app := fxtest.New(t, services...)
	app.RequireStart()
	t.Cleanup(app.RequireStop)
	// The credential service, built as its Module builds it, with the Config above.
	cred, err := credential.New(credCfg, pool, log)
	if err != nil {
		t.Fatalf("credential: %v", err)
	}
	if err := cred.Start(context.Background(), nc); err != nil {
		t.Fatalf("credential start: %v", err)
	}
	t.Cleanup(func() { _ = cred.Stop(context.Background()) })

	h := h0
	h.nc, h.logs, h.natsURL = nc, logs, ns.URL()

	h.apiCfg, h.log = apiCfg, log
	h.srv = h.replica()

	token, err := configapi.BootstrapAdminToken(context.Background(), pool, "test-admin")
	if err != nil {
		t.Fatalf("bootstrap admin token: %v", err)
	}
	h.admin = token
	return h
}

// replica starts one more config-api on the harness's database and NATS connection (the first is
// h.srv) and returns its HTTP server.
func (h *harness) replica() *httptest.Server {
	h.t.Helper()
	router := mux.NewRouter()
	api, err := configapi.New(h.apiCfg, h.pool, h.nc, h.log)
	if err != nil {
		h.t.Fatalf("config-api: %v", err)
	}
	api.Register(router)
	if err := api.Start(); err != nil {
		h.t.Fatalf("config-api start: %v", err)
	}
	srv := httptest.NewServer(router)
	h.t.Cleanup(func() { srv.Close(); api.Stop() })
	if h.api == nil {
		h.api = api
	}
	return srv
}

// refreshFleetStats computes the fleet stats (the drift report of every environment, then the counts)
// as the fleet metrics lease holder does each period.
func (h *harness) refreshFleetStats() {
	h.t.Helper()
	if err := h.api.RefreshFleetStats(context.Background()); err != nil {
		h.t.Fatalf("refresh fleet stats: %v", err)
	}
}

// response is one HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// data decodes the {"data": ...} envelope into dst.
func (r response) data(t testing.TB, dst any) {
	t.Helper()
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil || env.Data == nil {
		t.Fatalf("response %d is not a data envelope: %s", r.status, r.body)
	}
	if err := json.Unmarshal(env.Data, dst); err != nil {
		t.Fatalf("decode data: %v in %s", err, env.Data)
	}
}

// errCode returns the code of an {"error": ...} body.
func (r response) errCode(t testing.TB) string {
	t.Helper()
	var env struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil || env.Error == nil || env.Error.Code == "" || env.Error.Message == "" {
		t.Fatalf("response %d is not an error envelope: %s", r.status, r.body)
	}
	return env.Error.Code
}

func (r response) message(t testing.TB) string {
	t.Helper()
	var env struct {
		Error struct{ Message string } `json:"error"`
	}
	_ = json.Unmarshal(r.body, &env)
	return env.Error.Message
}

// do sends a request; body is JSON-encoded unless it is a string or []byte. headers are name, value pairs.
func (h *harness) do(method, path, token string, body any, headers ...string) response {
	h.t.Helper()
	r, err := h.send(method, path, token, body, headers...)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// send is do that returns its error instead of failing the test, for requests sent off the test's
// goroutine.
func (h *harness) send(method, path, token string, body any, headers ...string) (response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(enc)
	}
	if token != "" {
		headers = append([]string{"Authorization", "Bearer " + token}, headers...)
	}
	return roundTrip(h.srv.Client(), method, h.srv.URL+path, rd, headers...)
}

// roundTrip sends one request with client and reads the whole answer. headers are name, value pairs.
func roundTrip(client *http.Client, method, url string, body io.Reader, headers ...string) (response, error) {
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return response{}, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: data}, err
}

// must sends a request and fails the test unless it answers want.
func (h *harness) must(want int, method, path, token string, body any, headers ...string) response {
	h.t.Helper()
	r := h.do(method, path, token, body, headers...)
	if r.status != want {
		h.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, want, r.body)
	}
	return r
}

type idObj struct {
	ID            uuid.UUID `json:"id"`
	ClientID      uuid.UUID `json:"client_id"`
	EnvironmentID uuid.UUID `json:"environment_id"`
	AgentID       string    `json:"agent_id"`
	Token         string    `json:"token"`
}

// tenant is a client with one environment, one host and a client-scoped token.
type tenant struct {
	client, env, host uuid.UUID
	agentID           string
	token             string
}

func (h *harness) newTenant(name string) tenant {
	h.t.Helper()
	var c, e, hst, tok idObj
	h.must(201, "POST", "/api/v1/clients", h.admin, map[string]any{"name": name}).data(h.t, &c)
	h.must(201, "POST", "/api/v1/clients/"+c.ID.String()+"/environments", h.admin, map[string]any{"name": "prod"}).data(h.t, &e)
	h.must(201, "POST", "/api/v1/environments/"+e.ID.String()+"/hosts", h.admin, map[string]any{"hostname": name + "-web-1"}).data(h.t, &hst)
	h.must(201, "POST", "/api/v1/tokens", h.admin, map[string]any{"name": name + "-ops", "client_id": c.ID}).data(h.t, &tok)
	return tenant{client: c.ID, env: e.ID, host: hst.ID, agentID: hst.AgentID, token: tok.Token}
}

// newTenantHarness is the opening most tests share: newHarness(t, opts...) with one tenant, name, in it.
func newTenantHarness(t testing.TB, name string, opts ...harnessOption) (*harness, tenant) {
	t.Helper()
	h := newHarness(t, opts...)
	return h, h.newTenant(name)
}

// envConfigPath is the API path of an environment's config of configType.
func envConfigPath(env uuid.UUID, configType string) string {
	return "/api/v1/environments/" + env.String() + "/agent-configs/" + configType
}

// hostConfigPath is the API path of a host's config of configType: its override, and its effective
// config on GET.
func hostConfigPath(host uuid.UUID, configType string) string {
	return "/api/v1/hosts/" + host.String() + "/agent-configs/" + configType
}

// configPaths are the API paths of tn's config of configType at both levels: its environment's and its
// host's.
func configPaths(tn tenant, configType string) []string {
	return []string{envConfigPath(tn.env, configType), hostConfigPath(tn.host, configType)}
}

// credentialsPath is the API path of a client's credentials.
func credentialsPath(client uuid.UUID) string {
	return "/api/v1/clients/" + client.String() + "/credentials"
}

func (h *harness) count(query string, args ...any) int {
	h.t.Helper()
	var n int
	if err := h.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (h *harness) exec(query string, args ...any) {
	h.t.Helper()
	if _, err := h.pool.Exec(context.Background(), query, args...); err != nil {
		h.t.Fatalf("%s: %v", query, err)
	}
}

// noLogContains fails when any log entry (message or field) contains s.
func (h *harness) noLogContains(s string) {
	h.t.Helper()
	for _, e := range h.logs.All() {
		if strings.Contains(e.Message, s) {
			h.t.Fatalf("log message contains %q: %s", s, e.Message)
		}
		for k, v := range e.ContextMap() {
			if strings.Contains(fmt.Sprint(v), s) {
				h.t.Fatalf("log field %s contains %q", k, s)
			}
		}
	}
}

var _ = zap.NewNop

// inject asks the credential service (as delivery would) to inject credential id into a collector of
// tenant's environment and returns the injected password.
func (h *harness) inject(tn tenant, id string) string {
	h.t.Helper()
	req := protocol.InjectRequest{Items: []protocol.InjectItem{{
		Key: "k", ClientID: tn.client.String(), EnvironmentID: tn.env.String(),
		Collectors: json.RawMessage(`[{"type": "mysql", "name": "m", "host": "db", "port": 3306, "credential_id": "` + id + `"}]`),
	}}}
	data, _ := json.Marshal(req)
	msg, err := h.nc.Request(protocol.CredentialInjectSubject, data, 10*time.Second)
	if err != nil {
		h.t.Fatalf("inject: %v", err)
	}
	var reply protocol.InjectReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil || len(reply.Results) != 1 || reply.Results[0].Error != nil {
		h.t.Fatalf("inject reply: %s", msg.Data)
	}
	var cols []map[string]any
	if err := json.Unmarshal(reply.Results[0].Collectors, &cols); err != nil || len(cols) != 1 {
		h.t.Fatalf("injected collectors: %s", reply.Results[0].Collectors)
	}
	pw, _ := cols[0]["password"].(string)
	return pw
}

// newAuthority is a fresh NATS operator, account and signing keys, for withNATSIdentity.
func newAuthority(t testing.TB) *natsauth.Authority {
	t.Helper()
	a, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// isCredsFile reports whether s is a NATS creds file: a user JWT and its NKEY seed.
func isCredsFile(s string) bool {
	return strings.Contains(s, "BEGIN NATS USER JWT") && strings.Contains(s, "BEGIN USER NKEY SEED")
}

// connectAgent connects to url as agent agentID with its creds file (its own inbox prefix, no
// reconnect) and reports when the connection closes. The connection is closed when the test ends.
func connectAgent(t testing.TB, url, agentID, credsFile string) (*nats.Conn, chan struct{}) {
	t.Helper()
	closed := make(chan struct{})
	nc, err := nats.Connect(url, nats.UserCredentials(credsFile), nats.NoReconnect(),
		nats.CustomInboxPrefix(protocol.InboxPrefix(agentID)), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatalf("agent %s cannot connect with its credentials: %v", agentID, err)
	}
	t.Cleanup(nc.Close)
	return nc, closed
}

// receivesOwnCommand fails the test unless agent, connected as agentID, receives a command config-api
// publishes to it.
func (h *harness) receivesOwnCommand(agent *nats.Conn, agentID string) {
	h.t.Helper()
	sub, err := agent.SubscribeSync(protocol.CommandSubject(agentID))
	if err != nil {
		h.t.Fatal(err)
	}
	if err := agent.Flush(); err != nil {
		h.t.Fatal(err)
	}
	if err := h.nc.Publish(protocol.CommandSubject(agentID), []byte(`{}`)); err != nil {
		h.t.Fatal(err)
	}
	if _, err := sub.NextMsg(3 * time.Second); err != nil {
		h.t.Fatalf("agent %s did not receive its own command: %v", agentID, err)
	}
}

// connectRefused reports whether the NATS server refuses a connection with credsFile.
func (h *harness) connectRefused(credsFile string) bool {
	nc, err := nats.Connect(h.natsURL, nats.UserCredentials(credsFile), nats.NoReconnect())
	if err == nil {
		nc.Close()
	}
	return err != nil
}

// revokedAgentShutOut fails the test unless a revoked agent's connection (closed is connectAgent's) is
// closed by the server and its credentials are refused afterwards.
func (h *harness) revokedAgentShutOut(closed chan struct{}, credsFile string) {
	h.t.Helper()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		h.t.Fatal("the revoked agent is still connected")
	}
	if !h.connectRefused(credsFile) {
		h.t.Fatal("the revoked agent could connect again")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func writeCreds(t testing.TB, dir, name string, c natsauth.Creds) string {
	t.Helper()
	path := filepath.Join(dir, name+".creds")
	if err := os.WriteFile(path, c.File, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
