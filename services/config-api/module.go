// Package configapi wires config-api, the operator REST API of ConfigSync and its web console (/ui):
// environment configs and host overrides (validated, versioned, announced through the transactional
// outbox), hosts, clients, environments, API tokens, credentials (forwarded to the credential service),
// drift, history and the audit log.
//
// Module needs a *zap.Logger, a *pgxpool.Pool, a *nats.Conn and the shared *mux.Router from the app (the
// platform modules) and loads its own Config; it provides nothing, so several services can share one
// fx app (tools/devstack). The outbox relay that publishes config-change events is composed by the app
// (outbox.Module), once per process.
package configapi

import (
	"context"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/services/config-api/bootstrap"
	"github.com/configsync/configsync/services/config-api/internal/agentidentity"
	"github.com/configsync/configsync/services/config-api/internal/applystatus"
	"github.com/configsync/configsync/services/config-api/internal/audit"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/credentials"
	"github.com/configsync/configsync/services/config-api/internal/drift"
	"github.com/configsync/configsync/services/config-api/internal/fleet"
	"github.com/configsync/configsync/services/config-api/internal/fleetmetrics"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/httpapi"
	"github.com/configsync/configsync/services/config-api/internal/natsclient"
	"github.com/configsync/configsync/services/config-api/internal/postgres"
	"github.com/configsync/configsync/services/config-api/internal/rollouts"
	"github.com/configsync/configsync/services/config-api/internal/sessions"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
	"github.com/configsync/configsync/services/config-api/internal/tokens"
	"github.com/configsync/configsync/services/config-api/internal/webui"
)

// Config tunes config-api. Every field has a default.
type Config struct {
	// OnlineWindow: a host is online when its last heartbeat is at most this old.
	OnlineWindow time.Duration `env:"CONFIGSYNC_ONLINE_WINDOW" default:"90s"`
	// RequestTimeout bounds each request to the resolver and credential services.
	RequestTimeout time.Duration `env:"CONFIGAPI_REQUEST_TIMEOUT" default:"10s"`
	// NATSAuthorityFile holds the issuer document (libs/natsauth IssuerSeeds: the account's public key
	// and the agent signing key — never the domain's full seeds, nor the operator signing key); when
	// set, each registered host gets its own NATS user (returned once as nats_credentials) and revoking
	// a host revokes it, through the credential service (the custodian of the account's signing key,
	// which needs CREDENTIAL_NATS_ACCOUNT_SIGNER_FILE).
	NATSAuthorityFile string `env:"NATS_AUTHORITY_FILE"`
	// AgentCredsLifetime is how long an agent's NATS JWT is valid; agents renew it before it expires
	// (on protocol.CredsRenewSubject). Revocations leave the account's list one lifetime after the
	// last JWT they refuse has expired, so it also bounds how long a revocation costs account space.
	AgentCredsLifetime time.Duration `env:"CONFIGAPI_AGENT_CREDS_LIFETIME" default:"720h"`
	// RevocationPruneGrace keeps a revocation this much longer than the JWTs it refuses (clock skew
	// between config-api and the NATS servers).
	RevocationPruneGrace time.Duration `env:"CONFIGAPI_REVOCATION_PRUNE_GRACE" default:"5m"`
	// RevocationReconcile is how often the NATS account's revocation list is compared with the desired
	// one in the database and re-pushed when they differ (repairing a failed or raced push, pruning).
	RevocationReconcile time.Duration `env:"CONFIGAPI_REVOCATION_RECONCILE" default:"1m"`
	// MaxPendingRevocationsPerClient caps one client's revocations still in the account's list.
	MaxPendingRevocationsPerClient int `env:"CONFIGAPI_MAX_PENDING_REVOCATIONS_PER_CLIENT" default:"2000"`
	// MaxPendingRevocations caps every client's revocations in the list together (the account JWT must
	// stay under the servers' max_payload; an entry is about 93 bytes).
	MaxPendingRevocations int `env:"CONFIGAPI_MAX_PENDING_REVOCATIONS" default:"8000"`
	// PublicURL is the web console's external URL (scheme and host) as browsers reach it, e.g. behind a
	// TLS-terminating proxy; it decides the session cookie's Secure flag and the origin every form post
	// must come from. Empty: the request's own scheme and Host.
	PublicURL string `env:"CONFIGSYNC_PUBLIC_URL"`
	// ConsoleSessionTTL is how long a web console session lasts.
	ConsoleSessionTTL time.Duration `env:"CONFIGSYNC_CONSOLE_SESSION_TTL" default:"12h"`
	// FleetMetricsInterval is how often the replica holding the fleet metrics lease recomputes the
	// per-environment fleet stats (the drift report of every environment, then one aggregate
	// statement): the console overview's drifted and stale counts, its drifted filter and, with
	// metrics.Module, the fleet gauges.
	FleetMetricsInterval time.Duration `env:"CONFIGAPI_FLEET_METRICS_INTERVAL" default:"30s"`
	// RolloutTick is how often the rollout controller looks at the active staged rollouts (each is
	// led by one replica at a time, through its row lock).
	RolloutTick time.Duration `env:"CONFIGAPI_ROLLOUT_TICK" default:"1s"`
}

// Module registers config-api's routes on the app's router.
var Module = fx.Module("config-api",
	envconfig.Provide[Config](),
	fx.Invoke(register, runRolloutController),
)

// runRolloutController runs the staged rollout controller for the app's lifetime (never blocking start).
func runRolloutController(lc fx.Lifecycle, cfg Config, pool *pgxpool.Pool, log *zap.Logger, m metrics.Optional) {
	app.RunForLifetime(lc, NewRolloutController(cfg, pool, m.Metrics, log.Named("rollouts")).Run)
}

// NewRolloutController assembles the staged rollout controller without fx; m may be nil (no metrics).
func NewRolloutController(cfg Config, pool *pgxpool.Pool, m *metrics.Metrics, log *zap.Logger) *rollouts.Controller {
	transitions := metrics.RegisterCounterVec(m, "", "rollout_transitions_total",
		"Transitions made by the staged rollout controller, by result.", "result")
	return rollouts.NewController(postgres.NewRollouts(postgres.NewStore(pool)), rollouts.ControllerOptions{
		Interval: cfg.RolloutTick, OnlineWindow: onlineWindow(cfg.OnlineWindow),
		Transitions: func(result string) { transitions.WithLabelValues(result).Inc() },
	}, log)
}

// runFleetMetrics runs the fleet stats' lease loop for the app's lifetime: the console's overview and
// drifted filter read what it stores, and the fleet gauges are registered when the app has metrics.
func runFleetMetrics(lc fx.Lifecycle, cfg Config, pool *pgxpool.Pool, d fleetmetrics.Drift, log *zap.Logger, m metrics.Optional) {
	fleet := fleetmetrics.New(pool, d, m.Metrics, fleetmetrics.Options{Interval: cfg.FleetMetricsInterval, OnlineWindow: cfg.OnlineWindow}, log.Named("config-api"))
	app.RunForLifetime(lc, fleet.Run)
}

func register(lc fx.Lifecycle, cfg Config, pool *pgxpool.Pool, nc *nats.Conn, router *mux.Router, log *zap.Logger, m metrics.Optional) error {
	svc, err := New(cfg, pool, nc, log.Named("config-api"))
	if err != nil {
		return err
	}
	m.Metrics.BuildInfo("config-api")
	// Requests by route template, method and code; /metrics itself is served on METRICS_ADDR only.
	router.Use(m.Metrics.HTTP().Middleware("config-api"))
	svc.Register(router)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { return svc.Start() },
		OnStop:  func(context.Context) error { svc.Stop(); return nil },
	})
	runFleetMetrics(lc, cfg, pool, svc.drift, log, m)
	return nil
}

// Service is config-api assembled over its dependencies, ready to register its routes.
type Service struct {
	api     *httpapi.API
	console *webui.Console
	hosts   *hosts.Service
	drift   *drift.Detector
	pool    *pgxpool.Pool
	cfg     Config
	nc      *nats.Conn
	log     *zap.Logger

	renew      *nats.Subscription
	reconciler app.Background
}

// New assembles config-api without fx. With per-agent NATS identity, Start begins answering agents'
// credential renewals and reconciling the account's revocation list.
func New(cfg Config, pool *pgxpool.Pool, nc *nats.Conn, log *zap.Logger) (*Service, error) {
	var identity *hosts.NATSIdentity
	if cfg.NATSAuthorityFile != "" {
		id, err := agentidentity.Load(cfg.NATSAuthorityFile, nc, cfg.RequestTimeout)
		if err != nil {
			return nil, err
		}
		identity = &hosts.NATSIdentity{
			Issuer: id, Accounts: id, Lifetime: cfg.AgentCredsLifetime, PruneGrace: cfg.RevocationPruneGrace,
			MaxPendingPerClient: cfg.MaxPendingRevocationsPerClient, MaxPending: cfg.MaxPendingRevocations,
			Log: log.Named("agent-identity"),
		}
	}
	store := postgres.NewStore(pool)
	guard := tenancy.NewGuard(store, store, log.Named("audit"))
	resolver := natsclient.NewResolver(nc, cfg.RequestTimeout)
	creds := natsclient.NewCredentials(nc, cfg.RequestTimeout)

	tenantSvc := tenants.NewService(store, guard)
	hostSvc := hosts.NewService(store, tenantSvc, guard, identity, cfg.OnlineWindow)
	hostSvc.SignIdentitiesAtRegistration(identityStatements{resolver: resolver, log: log.Named("identity-statements")})
	configSvc := configs.NewService(store, tenantSvc, hostSvc, resolver, guard)
	tokenSvc := tokens.NewService(store, guard)
	auditSvc := audit.NewService(store)
	statusSvc := applystatus.NewService(store, tenantSvc, hostSvc, onlineWindow(cfg.OnlineWindow))
	svc := httpapi.Services{
		Tokens:      tokenSvc,
		Tenants:     tenantSvc,
		Hosts:       hostSvc,
		Configs:     configSvc,
		Credentials: credentials.NewService(creds, configSvc, tenantSvc, guard),
		Drift:       drift.NewDetector(tenantSvc, store, resolver, creds, cfg.OnlineWindow),
		Audit:       auditSvc,
		ApplyStatus: statusSvc,
		Rollouts:    rollouts.NewService(postgres.NewRollouts(store), tenantSvc, guard, onlineWindow(cfg.OnlineWindow)),
	}
	console, err := webui.New(webui.Services{
		Sessions:    sessions.NewService(store, tokenSvc, guard, cfg.ConsoleSessionTTL),
		Tenants:     tenantSvc,
		Hosts:       hostSvc,
		Configs:     configSvc,
		Credentials: svc.Credentials,
		Drift:       svc.Drift,
		Fleet:       fleet.NewService(store, tenantSvc, onlineWindow(cfg.OnlineWindow)),
		Audit:       auditSvc,
		ApplyStatus: statusSvc,
		Rollouts:    svc.Rollouts,
	}, log.Named("console"), webui.Options{PublicURL: cfg.PublicURL})
	if err != nil {
		return nil, err
	}
	return &Service{api: httpapi.New(svc, log, httpapi.Options{}), console: console,
		hosts: hostSvc, drift: svc.Drift, pool: pool, cfg: cfg, nc: nc, log: log}, nil
}

// Start begins the background work of per-agent NATS identity (nothing without it): answering
// agents' credential renewals and reconciling the account's revocation list every
// RevocationReconcile. Stop ends it.
func (s *Service) Start() error {
	if s.cfg.NATSAuthorityFile == "" {
		return nil
	}
	sub, err := agentidentity.ServeRenewals(s.nc, s.hosts, s.cfg.RequestTimeout, s.log.Named("creds-renew"))
	if err != nil {
		return err
	}
	s.renew = sub
	interval := s.cfg.RevocationReconcile
	if interval <= 0 {
		interval = time.Minute
	}
	s.reconciler.Start(func(ctx context.Context) { s.hosts.RunReconciler(ctx, interval) })
	return nil
}

// Stop ends what Start began and waits for it.
func (s *Service) Stop() {
	if s.renew != nil {
		_ = s.renew.Unsubscribe()
		s.renew = nil
	}
	_ = s.reconciler.Stop(context.Background()) // no deadline: waits for the pass in hand
}

func onlineWindow(d time.Duration) time.Duration {
	if d <= 0 {
		return hosts.DefaultOnlineWindow
	}
	return d
}

// RefreshFleetStats recomputes and stores every environment's fleet stats once, as the fleet metrics
// lease holder does each period (fleetmetrics.Compute), without taking the lease: for tests and
// benchmarks that need the figures now.
func (s *Service) RefreshFleetStats(ctx context.Context) error {
	_, err := fleetmetrics.Compute(ctx, s.pool, s.drift, onlineWindow(s.cfg.OnlineWindow), s.log.Named("fleet-metrics"))
	return err
}

// Register adds config-api's routes to r: the REST API under /api/v1 and the web console under /ui.
func (s *Service) Register(r *mux.Router) {
	s.api.Register(r)
	s.console.Register(r)
}

// BootstrapAdminToken creates an admin API token named name and returns it (shown once). It is how the
// first operator gets in; see bootstrap.AdminToken.
func BootstrapAdminToken(ctx context.Context, pool *pgxpool.Pool, name string) (string, error) {
	return bootstrap.AdminToken(ctx, pool, name)
}

// identityStatements has the resolver sign the identity statements of newly registered hosts
// (hosts.IdentityStatements). A failure only costs the hosts a signature at their first fetch: it is
// logged, never returned to the registration.
type identityStatements struct {
	resolver *natsclient.Resolver
	log      *zap.Logger
}

func (i identityStatements) SignIdentities(ctx context.Context, agentIDs []string) {
	if err := i.resolver.SignIdentities(ctx, agentIDs); err != nil {
		i.log.Warn("identity statements not signed at registration; the hosts' first fetches sign them",
			zap.Int("hosts", len(agentIDs)), zap.Error(err))
	}
}
