// Package configapi wires config-api, the operator REST API of ConfigSync: environment configs and
// host overrides (validated, versioned, announced through the transactional outbox), hosts, clients,
// environments, API tokens, credentials (forwarded to the credential service), drift and history.
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

	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/services/config-api/bootstrap"
	"github.com/configsync/configsync/services/config-api/internal/agentidentity"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/credentials"
	"github.com/configsync/configsync/services/config-api/internal/drift"
	"github.com/configsync/configsync/services/config-api/internal/fleetmetrics"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/httpapi"
	"github.com/configsync/configsync/services/config-api/internal/natsclient"
	"github.com/configsync/configsync/services/config-api/internal/postgres"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
	"github.com/configsync/configsync/services/config-api/internal/tokens"
)

// Config tunes config-api. Every field has a default.
type Config struct {
	// OnlineWindow: a host is online when its last heartbeat is at most this old.
	OnlineWindow time.Duration `env:"CONFIGSYNC_ONLINE_WINDOW" default:"90s"`
	// RequestTimeout bounds each request to the resolver and credential services.
	RequestTimeout time.Duration `env:"CONFIGAPI_REQUEST_TIMEOUT" default:"10s"`
	// NATSAuthorityFile holds the issuer document (libs/natsauth IssuerSeeds: account public key, agent
	// and operator signing keys — never the domain's full seeds); when set, each registered host gets
	// its own NATS user (returned once as nats_credentials) and revoking a host revokes it.
	NATSAuthorityFile string `env:"NATS_AUTHORITY_FILE"`
	// NATSSystemCreds is a system-account user's creds file, used to push revocations.
	NATSSystemCreds string `env:"NATS_SYSTEM_CREDS"`
	// FleetMetricsInterval is how often the replica holding the fleet metrics lease recomputes the
	// fleet gauges (one aggregate query); only with metrics.Module.
	FleetMetricsInterval time.Duration `env:"CONFIGAPI_FLEET_METRICS_INTERVAL" default:"30s"`
}

// Module registers config-api's routes on the app's router.
var Module = fx.Module("config-api",
	envconfig.Provide[Config](),
	fx.Invoke(register, runFleetMetrics),
)

// runFleetMetrics runs the fleet gauges' lease loop for the app's lifetime when the app has metrics.
func runFleetMetrics(lc fx.Lifecycle, cfg Config, pool *pgxpool.Pool, log *zap.Logger, m metrics.Optional) {
	if m.Metrics == nil {
		return
	}
	fleet := fleetmetrics.New(pool, m.Metrics, fleetmetrics.Options{Interval: cfg.FleetMetricsInterval, OnlineWindow: cfg.OnlineWindow}, log.Named("config-api"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			go func() { defer close(done); fleet.Run(ctx) }()
			return nil
		},
		OnStop: func(stop context.Context) error {
			cancel()
			select {
			case <-done:
				return nil
			case <-stop.Done():
				return stop.Err()
			}
		},
	})
}

func register(cfg Config, pool *pgxpool.Pool, nc *nats.Conn, router *mux.Router, log *zap.Logger, m metrics.Optional) error {
	svc, err := New(cfg, pool, nc, log.Named("config-api"))
	if err != nil {
		return err
	}
	m.Metrics.BuildInfo("config-api")
	// Requests by route template, method and code; /metrics itself is served on METRICS_ADDR only.
	router.Use(m.Metrics.HTTP().Middleware("config-api"))
	svc.Register(router)
	return nil
}

// Service is config-api assembled over its dependencies, ready to register its routes.
type Service struct {
	api *httpapi.API
}

// New assembles config-api without fx.
func New(cfg Config, pool *pgxpool.Pool, nc *nats.Conn, log *zap.Logger) (*Service, error) {
	var identity hosts.Identity
	if cfg.NATSAuthorityFile != "" {
		id, err := agentidentity.Load(cfg.NATSAuthorityFile, cfg.NATSSystemCreds, nc)
		if err != nil {
			return nil, err
		}
		identity = id
	}
	store := postgres.NewStore(pool)
	guard := tenancy.NewGuard(store, store, log.Named("audit"))
	resolver := natsclient.NewResolver(nc, cfg.RequestTimeout)
	creds := natsclient.NewCredentials(nc, cfg.RequestTimeout)

	tenantSvc := tenants.NewService(store, guard)
	hostSvc := hosts.NewService(store, tenantSvc, guard, identity)
	configSvc := configs.NewService(store, tenantSvc, hostSvc, resolver, guard)
	svc := httpapi.Services{
		Tokens:      tokens.NewService(store, guard),
		Tenants:     tenantSvc,
		Hosts:       hostSvc,
		Configs:     configSvc,
		Credentials: credentials.NewService(creds, configSvc, tenantSvc, guard),
		Drift:       drift.NewDetector(tenantSvc, store, resolver, creds, cfg.OnlineWindow),
	}
	return &Service{api: httpapi.New(svc, log, httpapi.Options{OnlineWindow: cfg.OnlineWindow})}, nil
}

// Register adds config-api's routes (under /api/v1) to r.
func (s *Service) Register(r *mux.Router) { s.api.Register(r) }

// BootstrapAdminToken creates an admin API token named name and returns it (shown once). It is how the
// first operator gets in; see bootstrap.AdminToken.
func BootstrapAdminToken(ctx context.Context, pool *pgxpool.Pool, name string) (string, error) {
	return bootstrap.AdminToken(ctx, pool, name)
}
