package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/configsync/configsync/agent/agentrun"
	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/httpserver"
	"github.com/configsync/configsync/libs/platform/logging"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/libs/platform/natsconn"
	"github.com/configsync/configsync/libs/platform/outbox"
	"github.com/configsync/configsync/libs/platform/pgdb"
	"github.com/configsync/configsync/libs/platform/tracing"
	"github.com/configsync/configsync/libs/platform/tracing/otlpsink"
	ackingest "github.com/configsync/configsync/services/ack-ingest"
	configapi "github.com/configsync/configsync/services/config-api"
	"github.com/configsync/configsync/services/credential"
	"github.com/configsync/configsync/services/delivery"
	"github.com/configsync/configsync/services/resolver"
)

// stack is the running system: the fx app with the five services and the demo agent.
type stack struct {
	opts        options
	dataDir     string
	natsURL     string
	natsCA      string // the local CA that signed NATS's certificate
	trustKeys   string // the resolver's public signing key(s), "id=base64"; empty when nothing signs
	databaseURL string
	auth        *natsauth.Authority
	log         *zap.Logger

	app        *fx.App
	metrics    *metrics.Listener // nil when -metrics is empty
	agentStop  context.CancelFunc
	agentDone  sync.WaitGroup
	agentError error
	// traceSink receives the services' spans when CONFIGSYNC_TRACE_SINK is set (measuring tracing's
	// cost without a collector).
	traceSink *otlpsink.Sink
	// out receives the banner (nil: standard output).
	out io.Writer
}

// EnvTraceSink turns on export to an in-process OTLP receiver that counts the spans and keeps none:
// with CONFIGSYNC_TRACE_SAMPLE_RATIO=1 it shows what tracing every write costs (tools/loadgen passes
// its environment on). An operator's own OTEL_EXPORTER_OTLP_ENDPOINT wins.
const EnvTraceSink = "CONFIGSYNC_TRACE_SINK"

// startTraceSink starts the sink when asked for and points the exporter at it.
func (s *stack) startTraceSink() error {
	if os.Getenv(EnvTraceSink) == "" || tracing.Enabled() {
		return nil
	}
	sink, err := otlpsink.Start("127.0.0.1:0", false)
	if err != nil {
		return fmt.Errorf("trace sink: %w", err)
	}
	s.traceSink = sink
	s.log.Info("tracing to an in-process OTLP sink", zap.String("endpoint", sink.Endpoint()))
	return os.Setenv(tracing.EnvEndpoint, sink.Endpoint())
}

// demo is what the first start seeds and every later start reuses (.data/devstack.env).
type demo struct {
	APIURL, Token, NATSURL, NATSCA  string
	ClientID, EnvironmentID, HostID string
	AgentID                         string
	// MetricsURL is where the services' metrics are scraped (the one listener they share here); empty
	// when off.
	MetricsURL string
	// TrustKeys are the public keys of the resolver's signing key ("id=base64"), what agents and any
	// outside client verify statements with.
	TrustKeys string
}

func (s *stack) start(ctx context.Context) error {
	if err := s.environment(); err != nil {
		return err
	}
	var pool *pgxpool.Pool
	s.app = fx.New(
		logging.Module,
		// One registry and one /metrics listener for the five services of this process.
		metrics.Module,
		tracing.Module("configsync-devstack"),
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
		fx.Populate(&pool, &s.metrics),
		fx.StartTimeout(60*time.Second),
	)
	if err := s.app.Err(); err != nil {
		return fmt.Errorf("compose services: %w", err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := s.app.Start(startCtx); err != nil {
		return fmt.Errorf("start services: %w", err)
	}
	d, err := s.seed(ctx, pool)
	if err != nil {
		return err
	}
	if !s.opts.noAgent {
		if err := s.startAgent(d); err != nil {
			return err
		}
	}
	s.banner(d)
	return nil
}

// environment sets the variables the service modules read, the same ones the separate binaries use.
func (s *stack) environment() error {
	if err := s.startTraceSink(); err != nil {
		return err
	}
	// The five services share this process and one NATS connection: one user allowed what each of
	// them is (natsauth.ServicePermissions), with config-api's inbox prefix, the one the responders
	// may answer.
	svcCreds, err := s.auth.CombinedServiceCreds("devstack-services", natsauth.ServiceNames...)
	if err != nil {
		return err
	}
	credsFile := filepath.Join(s.dataDir, "services.creds")
	if err := os.WriteFile(credsFile, svcCreds.File, 0o600); err != nil {
		return err
	}
	// Load generators (tools/loadgen) simulate a whole fleet on a few connections and watch the
	// streams: an unrestricted user of the account, for this local stack only.
	benchCreds, err := s.auth.UnrestrictedCreds("devstack-bench")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.dataDir, "bench.creds"), benchCreds.File, 0o600); err != nil {
		return err
	}
	sysCreds, err := s.auth.SystemCreds("devstack-credential")
	if err != nil {
		return err
	}
	sysFile := filepath.Join(s.dataDir, "system.creds")
	if err := os.WriteFile(sysFile, sysCreds.File, 0o600); err != nil {
		return err
	}
	// config-api gets only the narrow issuer document (the agent signing key) and the credential service
	// the account signer document (the operator signing key, with the system user above), never the
	// domain's seeds (nats-authority.json).
	issuerFile := filepath.Join(s.dataDir, "config-api-issuer.json")
	if err := writeJSON(issuerFile, s.auth.IssuerSeeds()); err != nil {
		return err
	}
	signerFile := filepath.Join(s.dataDir, "credential-account-signer.json")
	if err := writeJSON(signerFile, s.auth.AccountSignerSeeds()); err != nil {
		return err
	}
	vars := map[string]string{
		"LOG_LEVEL":    s.opts.logLevel,
		"LOG_FORMAT":   "console",
		"DATABASE_URL": s.databaseURL,
		// Five services share this process and its one pool.
		"DATABASE_MAX_CONNS":                  "30",
		"NATS_URL":                            s.natsURL,
		"NATS_CREDS":                          credsFile,
		"NATS_INBOX_PREFIX":                   natsauth.ServiceInboxPrefix(natsauth.ConfigAPIService),
		"NATS_TLS_CA":                         s.natsCA,
		"HTTP_ADDR":                           s.opts.httpAddr,
		"CREDENTIAL_CIPHER":                   "local",
		"CONFIGSYNC_KEYRING_FILE":             filepath.Join(s.dataDir, "keyring"),
		"CONFIGSYNC_KEYRING_CREATE":           "true",
		"NATS_AUTHORITY_FILE":                 issuerFile,
		"CREDENTIAL_NATS_ACCOUNT_SIGNER_FILE": signerFile,
		"NATS_SYSTEM_CREDS":                   sysFile,
		"METRICS_ADDR":                        s.opts.metrics,
		"RESOLVER_SIGNING_KEY_FILE":           filepath.Join(s.dataDir, "signing.key"),
	}
	for k, v := range vars {
		if _, set := os.LookupEnv(k); set && k != "NATS_URL" && k != "NATS_CREDS" && k != "NATS_INBOX_PREFIX" && k != "NATS_TLS_CA" {
			continue // the operator's own setting wins
		}
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	if os.Getenv("RESOLVER_VAULT_ADDR") != "" || os.Getenv("RESOLVER_SIGNING_KEY_FILE") != "" {
		// The key file is generated on the first start; agents trust its public half (or the public
		// keys of the Vault Transit key when Vault signs).
		var cfg resolver.Config
		if err := envconfig.Load(&cfg); err != nil {
			return err
		}
		keys, err := resolver.PublicKeys(context.Background(), cfg, true)
		if err != nil {
			return err
		}
		s.trustKeys = keys
	}
	return nil
}

func (s *stack) envFile() string { return filepath.Join(s.dataDir, "devstack.env") }

// seed creates the demo client, environment, host and an admin token on the first start, through the
// real API; later starts reuse them.
func (s *stack) seed(ctx context.Context, pool *pgxpool.Pool) (demo, error) {
	apiURL := "http://" + s.opts.httpAddr
	var metricsURL string
	if s.metrics != nil {
		metricsURL = s.metrics.URL()
	}
	if d, err := readDemo(s.envFile()); err == nil {
		d.APIURL, d.NATSURL, d.NATSCA, d.MetricsURL, d.TrustKeys = apiURL, s.natsURL, s.natsCA, metricsURL, s.trustKeys
		if err := api(ctx, d, http.MethodGet, "/api/v1/hosts/"+d.HostID, nil, nil); err == nil {
			return d, writeDemo(s.envFile(), d)
		}
		s.log.Warn("saved demo data is not valid for this database; seeding again", zap.String("file", s.envFile()))
	}
	token, err := configapi.BootstrapAdminToken(ctx, pool, "devstack-admin")
	if err != nil {
		return demo{}, fmt.Errorf("bootstrap admin token: %w", err)
	}
	d := demo{APIURL: apiURL, Token: token, NATSURL: s.natsURL, NATSCA: s.natsCA, MetricsURL: metricsURL, TrustKeys: s.trustKeys}
	var client, env struct{ ID string }
	var host struct {
		ID              string `json:"id"`
		AgentID         string `json:"agent_id"`
		NATSCredentials string `json:"nats_credentials"`
	}
	suffix := time.Now().UTC().Format("20060102150405")
	if err := api(ctx, d, http.MethodPost, "/api/v1/clients", map[string]string{"name": "demo-" + suffix}, &client); err != nil {
		return demo{}, fmt.Errorf("seed client: %w", err)
	}
	if err := api(ctx, d, http.MethodPost, "/api/v1/clients/"+client.ID+"/environments", map[string]string{"name": "production"}, &env); err != nil {
		return demo{}, fmt.Errorf("seed environment: %w", err)
	}
	if err := api(ctx, d, http.MethodPost, "/api/v1/environments/"+env.ID+"/hosts", map[string]string{"hostname": "demo-host"}, &host); err != nil {
		return demo{}, fmt.Errorf("seed host: %w", err)
	}
	d.ClientID, d.EnvironmentID, d.HostID, d.AgentID = client.ID, env.ID, host.ID, host.AgentID
	if host.NATSCredentials != "" {
		// Shown once: kept for the agent (which renews it in its data directory before it expires).
		if err := s.writeAgentCreds([]byte(host.NATSCredentials)); err != nil {
			return demo{}, err
		}
	}
	return d, writeDemo(s.envFile(), d)
}

func (s *stack) agentDir() string { return filepath.Join(s.dataDir, "agent") }

func (s *stack) agentCredsFile() string { return filepath.Join(s.agentDir(), "agent.creds") }

func (s *stack) writeAgentCreds(creds []byte) error {
	if err := os.MkdirAll(s.agentDir(), 0o700); err != nil {
		return err
	}
	return os.WriteFile(s.agentCredsFile(), creds, 0o600)
}

// agentCreds makes sure the demo agent has NATS credentials: the ones saved at registration, or —
// when they are gone (an older data directory) — new ones re-issued through the API, which revokes
// the host's previous NATS user (the documented re-enrolment step).
func (s *stack) agentCreds(d demo) (string, error) {
	if _, err := os.Stat(s.agentCredsFile()); err == nil {
		return s.agentCredsFile(), nil
	}
	var host struct {
		NATSCredentials string `json:"nats_credentials"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := api(ctx, d, http.MethodPost, "/api/v1/hosts/"+d.HostID+"/credentials", nil, &host); err != nil {
		return "", fmt.Errorf("re-issue the demo agent's NATS credentials: %w", err)
	}
	return s.agentCredsFile(), s.writeAgentCreds([]byte(host.NATSCredentials))
}

func (s *stack) startAgent(d demo) error {
	dir := s.agentDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	credsFile, err := s.agentCreds(d)
	if err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(s.dataDir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cfg := agentrun.DefaultConfig()
	cfg.AgentID = d.AgentID
	cfg.DataDir = dir
	cfg.NATS = agentrun.NATSConfig{URL: s.natsURL, CredsFile: credsFile, TLS: &agentrun.NATSTLSConfig{CAFile: s.natsCA}}
	cfg.BootJitter = time.Second
	cfg.Policy = demoPolicy()
	if cfg.Trust.PublicKeys, err = agentrun.TrustKeys(d.TrustKeys); err != nil {
		logFile.Close()
		return fmt.Errorf("demo agent trust: %w", err)
	}
	if len(cfg.Trust.PublicKeys) == 0 {
		// The operator pointed the resolver at Vault: the demo agent cannot know its keys here.
		cfg.Trust.InsecureSkipVerify = true
	}
	cfg.LogOutput = logFile
	ctx, cancel := context.WithCancel(context.Background())
	s.agentStop = cancel
	s.agentDone.Add(1)
	go func() {
		defer s.agentDone.Done()
		defer logFile.Close()
		if err := agentrun.Run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
			s.agentError = err
			s.log.Error("agent stopped", zap.Error(err))
		}
	}()
	return nil
}

// demoPolicy is the demo agent's local policy: exactly what the README's curls need — watch_files
// over /etc, /opt and /var/log, by hash and metadata (no file contents, no commands, no environment
// variables) — with the interval floor lowered to 1s so short intervals can be tried out.
func demoPolicy() agentrun.PolicyConfig {
	p := agentrun.DefaultConfig().Policy
	p.ReadPaths = []string{"/etc", "/opt", "/var/log"}
	p.Commands, p.Env, p.UploadFileContents = nil, nil, false
	p.Limits.MinInterval = time.Second
	return p
}

func (s *stack) stop(ctx context.Context) error {
	if s.agentStop != nil {
		s.agentStop()
		s.agentDone.Wait()
	}
	var err error
	if s.app != nil {
		err = s.app.Stop(ctx) // flushes the tracer provider
	}
	if s.traceSink != nil {
		// Printed whatever the log level: it is the measurement the sink exists for.
		fmt.Fprintf(os.Stderr, "devstack: the trace sink received %d spans\n", s.traceSink.Received())
		_ = s.traceSink.Close()
	}
	return err
}

func (s *stack) banner(d demo) {
	auth := `-H "Authorization: Bearer $CONFIGSYNC_TOKEN"`
	out := s.out
	if out == nil {
		out = os.Stdout
	}
	fmt.Fprintf(out, `
ConfigSync is running (Ctrl-C stops it; state is kept in %s).

  API        %s
  console    %s/ui/   (sign in with the token below)
  token      %s   (admin; also in devstack.env)
  NATS       %s (TLS only; CA %s)
  PostgreSQL %s
  metrics    %s   (all five services; CONFIGSYNC_METRICS_URL)
  agent      %s (log: %s)

Try it:

  source %s
  curl -s -X PUT %s %s/api/v1/environments/%s/agent-configs/watch_files \
    -d '{"config_data": {"paths": ["/etc", "/opt"], "exclude_patterns": ["*.log"]}}'
  curl -s %s %s/api/v1/hosts/%s/agent-configs/watch_files
  curl -s %s %s/api/v1/environments/%s/hosts

`, s.dataDir, d.APIURL, d.APIURL, d.Token, d.NATSURL, d.NATSCA, redactURL(s.databaseURL), metricsBanner(d.MetricsURL), d.AgentID, filepath.Join(s.dataDir, "agent.log"),
		s.envFile(),
		auth, d.APIURL, d.EnvironmentID,
		auth, d.APIURL, d.HostID,
		auth, d.APIURL, d.EnvironmentID)
}

func metricsBanner(u string) string {
	if u == "" {
		return "off (-metrics)"
	}
	return u
}

func redactURL(u string) string {
	if at := strings.LastIndex(u, "@"); at > 0 {
		if scheme := strings.Index(u, "://"); scheme > 0 && scheme+3 < at {
			if colon := strings.Index(u[scheme+3:at], ":"); colon >= 0 {
				return u[:scheme+3+colon+1] + "***" + u[at:]
			}
		}
	}
	return u
}

// api calls the config-api with the demo token and decodes "data" into out.
func api(ctx context.Context, d demo, method, path string, body, out any) error {
	var rdr io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rdr = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.APIURL+path, rdr)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if out == nil {
		return nil
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return err
	}
	return json.Unmarshal(env.Data, out)
}

var demoKeys = []string{"CONFIGSYNC_API_URL", "CONFIGSYNC_TOKEN", "CONFIGSYNC_NATS_URL", "CONFIGSYNC_NATS_CA", "CONFIGSYNC_CLIENT_ID",
	"CONFIGSYNC_ENVIRONMENT_ID", "CONFIGSYNC_HOST_ID", "CONFIGSYNC_AGENT_ID", "CONFIGSYNC_METRICS_URL", "CONFIGSYNC_TRUST_PUBLIC_KEYS"}

func (d demo) values() []string {
	return []string{d.APIURL, d.Token, d.NATSURL, d.NATSCA, d.ClientID, d.EnvironmentID, d.HostID, d.AgentID, d.MetricsURL, d.TrustKeys}
}

func writeDemo(path string, d demo) error {
	var b strings.Builder
	b.WriteString("# Written by `make run` (tools/devstack): the running stack and its demo objects.\n")
	for i, v := range d.values() {
		fmt.Fprintf(&b, "export %s=%s\n", demoKeys[i], v)
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

func readDemo(path string) (demo, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return demo{}, err
	}
	vals := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "export "), "=")
		if ok {
			vals[k] = v
		}
	}
	d := demo{Token: vals["CONFIGSYNC_TOKEN"], ClientID: vals["CONFIGSYNC_CLIENT_ID"], EnvironmentID: vals["CONFIGSYNC_ENVIRONMENT_ID"],
		HostID: vals["CONFIGSYNC_HOST_ID"], AgentID: vals["CONFIGSYNC_AGENT_ID"]}
	if d.Token == "" || d.HostID == "" || d.AgentID == "" {
		return demo{}, errors.New("incomplete devstack.env")
	}
	return d, nil
}
