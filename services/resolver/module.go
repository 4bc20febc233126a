// Package resolver wires the resolver service: the nats.go micro service "resolver" that turns
// environment defaults and host overrides into hosts' effective agent configs. It reads the config
// tables and writes nothing. Its endpoints are served by libs/platform/natsrpc pools; its postgres
// adapter reports a database outage as resolve.ErrUnavailable, which the NATS edge answers as
// unavailable.
//
// Module needs a *zap.Logger, a *pgxpool.Pool and a *nats.Conn from the app (the platform modules) and
// loads its own Config from RESOLVER_* variables; it provides nothing other modules use, so several
// services can share one fx app (tools/devstack).
package resolver

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/services/resolver/internal/natsapi"
	"github.com/configsync/configsync/services/resolver/internal/postgres"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// Config tunes the resolver. Every field has a default.
type Config struct {
	// Workers bounds concurrent single-host resolves per instance.
	Workers int `env:"RESOLVER_WORKERS" default:"16"`
	// BatchWorkers bounds concurrent batch pages per instance (each page holds one pool connection).
	BatchWorkers int `env:"RESOLVER_BATCH_WORKERS" default:"2"`
	// BatchMaxPage is the default and largest number of hosts in one batch page.
	BatchMaxPage int `env:"RESOLVER_BATCH_MAX_PAGE" default:"5000"`
	// RequestTimeout bounds the work on one request.
	RequestTimeout time.Duration `env:"RESOLVER_REQUEST_TIMEOUT" default:"10s"`
}

// Module registers the resolver micro service on the app's NATS connection for the app's lifetime.
var Module = fx.Module("resolver",
	envconfig.Provide[Config](),
	fx.Invoke(register),
)

func register(lc fx.Lifecycle, cfg Config, pool *pgxpool.Pool, nc *nats.Conn, log *zap.Logger, m metrics.Optional) {
	m.Metrics.BuildInfo("resolver")
	svc := newService(cfg, pool, log.Named("resolver"), m.Metrics)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { return svc.Start(nc) },
		OnStop:  svc.Stop,
	})
}

// Service is a resolver ready to be started on a NATS connection.
type Service struct {
	api *natsapi.Service
}

// New builds the resolver over pool without fx; Start registers it on a connection.
func New(cfg Config, pool *pgxpool.Pool, log *zap.Logger) *Service {
	return newService(cfg, pool, log, nil)
}

// newService is New reporting to m (nil records nothing).
func newService(cfg Config, pool *pgxpool.Pool, log *zap.Logger, m *metrics.Metrics) *Service {
	r := resolve.New(postgres.NewStore(pool), resolve.Options{MaxPage: cfg.BatchMaxPage})
	registerEnvCacheMetrics(m, r.EnvCacheStats)
	return &Service{api: natsapi.New(r, natsapi.Options{
		Workers:        cfg.Workers,
		BatchWorkers:   cfg.BatchWorkers,
		RequestTimeout: cfg.RequestTimeout,
		Observer:       m.RPC(),
	}, log)}
}

// Start registers the micro service and its endpoints on nc.
func (s *Service) Start(nc *nats.Conn) error { return s.api.Start(nc) }

// Stop stops taking requests and waits for in-flight ones until ctx is done.
func (s *Service) Stop(ctx context.Context) error { return s.api.Stop(ctx) }
