package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/natsauth/natsserver"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/resolver"
)

// onlineWindow is CONFIGSYNC_ONLINE_WINDOW for config-api and delivery: ten agent heartbeats.
const onlineWindow = 10 * time.Second

// stackOptions shape a stack.
type stackOptions struct {
	// replicas is how many processes of every service run (1 or 2).
	replicas int
	// agents are the hostnames of the agents to register and start.
	agents []string
	// configAPIEnv is added to config-api's environment (NAME=value).
	configAPIEnv []string
	// serviceEnv is added to every service's environment (NAME=value).
	serviceEnv []string
}

// service is one replica of a backend service.
type service struct {
	kind     string // config-api, resolver, ...
	name     string // kind-N, also its NATS connection name
	httpAddr string
	// metricsAddr serves its /metrics (METRICS_ADDR), apart from httpAddr.
	metricsAddr string
	proc        *process
}

// agent is one agent process and its host.
type agent struct {
	hostname string
	hostID   string
	agentID  string
	dataDir  string
	proc     *process
}

// cachePath is the agent's config cache file.
func (a *agent) cachePath() string { return filepath.Join(a.dataDir, "config.cache.json") }

// stack is the system under test: PostgreSQL, NATS, the services as processes and the agents.
type stack struct {
	t      *testing.T
	dir    string
	logDir string
	bins   string

	auth       *natsauth.Authority
	nats       *testinfra.NATSServer
	natsMu     sync.Mutex
	natsErr    error // from configuring operator mode on a (re)start
	dbURL      string
	db         *pgxpool.Pool
	svcCreds   map[string]string // service kind -> its own NATS user's creds file
	obsCreds   string            // the observer's unrestricted user
	sysCreds   string
	issuerFile string
	signerFile string
	keyring    string
	// signingKey is the resolver's key file; trustKeys its public key as agents trust it.
	signingKey string
	trustKeys  []map[string]string

	opts     stackOptions
	services map[string][]*service
	procs    []*process // every process, for liveness checks and log dumps

	token    string
	clientID string
	envID    string
	agents   map[string]*agent
	obs      *observer
}

// startStack starts everything and returns once every service is ready, the client, environment and
// hosts exist and every agent process runs (not necessarily online yet).
func startStack(t *testing.T, opts stackOptions) *stack {
	t.Helper()
	bins := binaries(t)
	dir := t.TempDir()
	s := &stack{t: t, dir: dir, logDir: filepath.Join(dir, "logs"), bins: bins, opts: opts,
		services: map[string][]*service{}, agents: map[string]*agent{}}
	if keep := os.Getenv("E2E_LOG_DIR"); keep != "" {
		// Logs outlive the test there (t.TempDir is removed at cleanup).
		s.logDir = filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"), time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(s.logDir, 0o700); err != nil {
		t.Fatal(err)
	}

	s.dbURL = testinfra.PostgresURL(t)
	pool, err := pgxpool.New(context.Background(), s.dbURL)
	if err != nil {
		t.Fatalf("e2e: pool on the test database: %v", err)
	}
	t.Cleanup(pool.Close)
	s.db = pool

	s.startNATS()
	s.writeSecrets()
	// Watching starts before any service, so the observer sees their first pull requests.
	s.obs = newObserver(t, s)
	// Registered before any process, so it runs after all of them were stopped (cleanups run LIFO)
	// and shows their last words too.
	t.Cleanup(s.dumpLogsOnFailure)

	for _, kind := range serviceNames {
		for i := 1; i <= opts.replicas; i++ {
			s.startService(kind, i)
		}
	}
	for _, kind := range serviceNames {
		for _, svc := range s.services[kind] {
			s.waitReady(svc)
		}
	}
	s.bootstrap()
	for _, h := range opts.agents {
		s.addAgent(h)
	}
	return s
}

func (s *stack) startNATS() {
	t := s.t
	auth, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatalf("e2e: NATS authority: %v", err)
	}
	s.auth = auth
	resolverDir := filepath.Join(s.dir, "nats-accounts")
	// TLS only: every service, agent and the observer verify the server against the test's CA.
	s.nats = testinfra.NATS(t, testinfra.WithTLS(), testinfra.WithServerOptions(func(o *server.Options) {
		o.ServerName = "configsync-e2e"
		if err := natsserver.Configure(o, auth, resolverDir); err != nil {
			s.natsMu.Lock()
			s.natsErr = err
			s.natsMu.Unlock()
		}
	}))
	s.checkNATSConfig()
	t.Logf("NATS (operator mode, TLS only, JetStream in %s) at %s", s.nats.StoreDir(), s.nats.URL())
}

func (s *stack) checkNATSConfig() {
	s.natsMu.Lock()
	defer s.natsMu.Unlock()
	if s.natsErr != nil {
		s.t.Fatalf("e2e: configure NATS operator mode: %v", s.natsErr)
	}
}

// restartNATS brings NATS back on the same port and store after stopNATS.
func (s *stack) restartNATS() {
	s.nats.Restart(s.t)
	s.checkNATSConfig()
}

// writeSecrets writes the files the services read: service and system NATS users, config-api's NATS
// issuer document (only the agent signing key — never the domain's full seeds), the credential
// service's account signer document (the operator signing key: it re-signs the account with the
// revocation list config-api asks for) and the local keyring the credential replicas share.
func (s *stack) writeSecrets() {
	t := s.t
	obs, err := s.auth.UnrestrictedCreds("e2e-observer")
	if err != nil {
		t.Fatal(err)
	}
	sys, err := s.auth.SystemCreds("configsync-credential")
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := json.Marshal(s.auth.IssuerSeeds())
	if err != nil {
		t.Fatal(err)
	}
	signer, err := json.Marshal(s.auth.AccountSignerSeeds())
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	secrets := filepath.Join(s.dir, "secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	s.obsCreds = filepath.Join(secrets, "observer.creds")
	s.sysCreds = filepath.Join(secrets, "system.creds")
	s.issuerFile = filepath.Join(secrets, "config-api-issuer.json")
	s.signerFile = filepath.Join(secrets, "credential-account-signer.json")
	s.keyring = filepath.Join(secrets, "keyring")
	// The resolver signs every config; the agents trust its key (signing is on in e2e).
	s.signingKey = filepath.Join(secrets, "signing.key")
	trust, err := resolver.EnsureSigningKeyFile(s.signingKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range strings.Split(trust, ",") {
		id, key, _ := strings.Cut(item, "=")
		s.trustKeys = append(s.trustKeys, map[string]string{"id": id, "public_key": key})
	}
	// Every service connects as its own least-privilege user (natsauth.ServicePermissions).
	s.svcCreds = map[string]string{}
	for _, kind := range serviceNames {
		c, err := s.auth.ServiceCreds(kind)
		if err != nil {
			t.Fatal(err)
		}
		s.svcCreds[kind] = filepath.Join(secrets, kind+".creds")
		if err := os.WriteFile(s.svcCreds[kind], c.File, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for path, data := range map[string][]byte{
		s.obsCreds:   obs.File,
		s.sysCreds:   sys.File,
		s.issuerFile: issuer,
		s.signerFile: signer,
		s.keyring:    []byte("v1:" + base64.StdEncoding.EncodeToString(key) + "\n"),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// serviceEnv is the environment of one replica: shared infrastructure plus short timeouts so that
// redeliveries after a crash happen within the test's deadlines.
func (s *stack) serviceEnv(kind, name, httpAddr, metricsAddr string) []string {
	env := append(baseEnv(),
		"LOG_FORMAT=json",
		"LOG_LEVEL=info",
		"DATABASE_URL="+s.dbURL,
		"DATABASE_MAX_CONNS=4",
		"NATS_URL="+s.nats.URL(),
		"NATS_CREDS="+s.svcCreds[kind],
		"NATS_NAME="+name,
		"NATS_INBOX_PREFIX="+natsauth.ServiceInboxPrefix(kind),
		"NATS_TLS_CA="+s.nats.CAFile(),
		"HTTP_ADDR="+httpAddr,
		"METRICS_ADDR="+metricsAddr,
		"HTTP_SHUTDOWN_TIMEOUT=3s",
		"CONFIGSYNC_ONLINE_WINDOW="+onlineWindow.String(),
	)
	env = append(env, s.opts.serviceEnv...)
	switch kind {
	case "config-api":
		env = append(env,
			"NATS_AUTHORITY_FILE="+s.issuerFile,
			"CONFIGAPI_REQUEST_TIMEOUT=3s",
			"OUTBOX_POLL_INTERVAL=500ms",
			"OUTBOX_MAX_BACKOFF=2s",
			"CONFIGAPI_FLEET_METRICS_INTERVAL=500ms",
		)
		env = append(env, s.opts.configAPIEnv...)
	case "credential":
		env = append(env,
			"CREDENTIAL_CIPHER=local",
			"CREDENTIAL_NATS_ACCOUNT_SIGNER_FILE="+s.signerFile,
			"NATS_SYSTEM_CREDS="+s.sysCreds,
			"CONFIGSYNC_KEYRING_FILE="+s.keyring,
		)
	case "resolver":
		env = append(env, "RESOLVER_SIGNING_KEY_FILE="+s.signingKey)
	case "delivery":
		env = append(env,
			"NATS_MANAGE_STREAMS=false",
			"CONFIGSYNC_UPSTREAM_TIMEOUT=2s",
			"CONFIGSYNC_FETCH_TIMEOUT=5s",
			"CONFIGSYNC_PUSH_ACK_WAIT=3s",
			"CONFIGSYNC_PUSH_RETRY_DELAY=250ms",
		)
	case "ack-ingest":
		env = append(env,
			"NATS_MANAGE_STREAMS=false",
			"CONFIGSYNC_INGEST_ACK_WAIT=3s",
			"CONFIGSYNC_INGEST_RETRY_DELAY=250ms",
			"CONFIGSYNC_INGEST_MAX_RETRY_DELAY=2s",
		)
	}
	return env
}

func (s *stack) startService(kind string, index int) *service {
	name := kind + "-" + strconv.Itoa(index)
	addr := testinfra.FreeAddr(s.t)
	metricsAddr := testinfra.FreeAddr(s.t)
	p := newProcess(s.t, s.logDir, name, filepath.Join(s.bins, kind), nil, s.serviceEnv(kind, name, addr, metricsAddr))
	svc := &service{kind: kind, name: name, httpAddr: addr, metricsAddr: metricsAddr, proc: p}
	s.services[kind] = append(s.services[kind], svc)
	s.procs = append(s.procs, p)
	p.start(s.t)
	return svc
}

// waitReady polls the replica's /readyz until it answers 200.
func (s *stack) waitReady(svc *service) {
	client := &http.Client{Timeout: 2 * time.Second}
	s.eventually(readyTimeout, svc.name+" /readyz 200", func() error {
		resp, err := client.Get("http://" + svc.httpAddr + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		return fmt.Errorf("HTTP %d %s", resp.StatusCode, strings.TrimSpace(body.String()))
	})
}

// alive fails when any process exited without the test stopping it.
func (s *stack) alive() error {
	for _, p := range s.procs {
		if msg, dead := p.died(); dead {
			return fmt.Errorf("%s; its log:\n%s", msg, p.logTail(40))
		}
	}
	return nil
}

// eventually waits until check returns nil (testinfra.EventuallyNoError), failing at once when a process
// of the stack exited without the test stopping it, and logs how long the wait took.
func (s *stack) eventually(timeout time.Duration, what string, check func() error) {
	s.t.Helper()
	start := time.Now()
	var last error
	testinfra.EventuallyNoError(s.t, timeout, func() error {
		if err := s.alive(); err != nil {
			s.t.Fatalf("waiting for %s: %v\nlast state: %v", what, err, last)
		}
		last = check()
		return last
	}, what)
	s.t.Logf("%s: after %s", what, time.Since(start).Round(time.Millisecond))
}

func (s *stack) dumpLogsOnFailure() {
	for _, p := range s.procs {
		// Only binaries built with E2E_RACE=1 report races; they print this and go on (exit code 66).
		if strings.Contains(p.logText(), "WARNING: DATA RACE") {
			s.t.Errorf("%s reported a data race (see its log below)", p.name)
		}
	}
	if !s.t.Failed() {
		return
	}
	for _, p := range s.procs {
		s.t.Logf("---- log of %s (%s) ----\n%s", p.name, p.logPath, p.logTail(150))
	}
}

// replica returns replica i (1-based) of kind.
func (s *stack) replica(kind string, i int) *service {
	s.t.Helper()
	list := s.services[kind]
	if i < 1 || i > len(list) {
		s.t.Fatalf("e2e: no replica %d of %s", i, kind)
	}
	return list[i-1]
}

// bootstrap mints the admin token with `config-api bootstrap-token` and creates the client and the
// environment through the API.
func (s *stack) bootstrap() {
	t := s.t
	cmd := exec.Command(filepath.Join(s.bins, "config-api"), "bootstrap-token", "-name", "e2e-admin")
	cmd.Env = append(baseEnv(), "DATABASE_URL="+s.dbURL, "LOG_FORMAT=json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("e2e: config-api bootstrap-token: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	s.token = strings.TrimSpace(stdout.String())
	if s.token == "" || strings.ContainsAny(s.token, " \n") {
		t.Fatalf("e2e: config-api bootstrap-token printed %q, want one token", stdout.String())
	}
	var client, env struct {
		ID string `json:"id"`
	}
	s.api(1).mustDo(t, http.MethodPost, "/api/v1/clients", map[string]any{"name": "e2e-" + t.Name()}, &client)
	s.api(1).mustDo(t, http.MethodPost, "/api/v1/clients/"+client.ID+"/environments", map[string]any{"name": "production"}, &env)
	s.clientID, s.envID = client.ID, env.ID
}

// addAgent registers a host through the API and starts its agent with a short heartbeat interval. The
// agent's NATS user comes from the registration (nats_credentials) or, when config-api does not issue
// one, from the test's own NATS authority.
func (s *stack) addAgent(hostname string) *agent {
	t := s.t
	var host struct {
		ID              string `json:"id"`
		AgentID         string `json:"agent_id"`
		NATSCredentials string `json:"nats_credentials"`
	}
	s.api(1).mustDo(t, http.MethodPost, "/api/v1/environments/"+s.envID+"/hosts", map[string]any{"hostname": hostname}, &host)
	if host.ID == "" || host.AgentID == "" {
		t.Fatalf("e2e: host registration answered without id or agent_id: %+v", host)
	}
	creds := []byte(host.NATSCredentials)
	if len(creds) == 0 {
		t.Logf("config-api returned no nats_credentials for %s; issuing the agent's NATS user in the test", hostname)
		c, err := s.auth.Issuer().IssueAgent(host.AgentID)
		if err != nil {
			t.Fatal(err)
		}
		creds = c.File
	}
	home := filepath.Join(s.dir, "agents", hostname)
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	credsPath := filepath.Join(home, "agent.creds")
	if err := os.WriteFile(credsPath, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	a := &agent{hostname: hostname, hostID: host.ID, agentID: host.AgentID, dataDir: filepath.Join(home, "data")}
	cfg := map[string]any{
		"agent_id":      host.AgentID,
		"nats":          map[string]any{"url": s.nats.URL(), "creds_file": credsPath, "tls": map[string]any{"ca_file": s.nats.CAFile()}},
		"data_dir":      a.dataDir,
		"boot_jitter":   "500ms",
		"fetch_timeout": "2s",
		"log_level":     "info",
		"log_format":    "json",
		"proc_root":     "/proc",
		"defaults": map[string]any{
			// Heartbeats every second keep hosts online (window 10s) and drift checks quick; the rest is
			// slowed down so the agents stay quiet.
			"intervals": map[string]any{"heartbeat": "1s", "metrics": "1h", "inventory": "1h", "processes": "1h"},
		},
		// The default local policy (no commands, reads under /etc, /var/log and /opt), with the interval
		// floor lowered for the one-second heartbeat above: only the local YAML can lower it.
		"policy": map[string]any{"limits": map[string]any{"min_interval": "1s"}},
		"trust":  map[string]any{"public_keys": s.trustKeys},
	}
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(home, "agent.yaml")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	a.proc = newProcess(t, s.logDir, "agent-"+hostname, filepath.Join(s.bins, "agent"), []string{"-config", cfgPath}, baseEnv())
	s.procs = append(s.procs, a.proc)
	s.agents[hostname] = a
	s.obs.watchAgentInbox(a.agentID)
	a.proc.start(t)
	return a
}

// agentList returns the agents sorted by hostname.
func (s *stack) agentList() []*agent {
	names := make([]string, 0, len(s.agents))
	for n := range s.agents {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]*agent, len(names))
	for i, n := range names {
		out[i] = s.agents[n]
	}
	return out
}

// why adapts a check that explains itself ("what I saw", ok) to eventually's error form.
func why(check func() (string, bool)) func() error {
	return testinfra.Explain(func() (bool, string) { msg, ok := check(); return ok, msg })
}
