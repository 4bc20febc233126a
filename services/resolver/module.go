// Package resolver wires the resolver service: the nats.go micro service "resolver" that turns
// environment defaults and host overrides into hosts' effective agent configs. It reads the config
// tables and writes nothing. It answers delivery (and config-api's drift) in one contract, distinct
// config sets each with its hosts: resolve_sets.v1 for fetches, resolve_push.v1 for pages of a
// config-change fan-out. Its endpoints are served by libs/platform/natsrpc pools; its postgres
// adapter reports a database outage as resolve.ErrUnavailable, which the NATS edge answers as
// unavailable.
//
// Module needs a *zap.Logger, a *pgxpool.Pool and a *nats.Conn from the app (the platform modules) and
// loads its own Config from RESOLVER_* variables; it provides nothing other modules use, so several
// services can share one fx app (tools/devstack).
package resolver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/services/resolver/internal/keyfile"
	"github.com/configsync/configsync/services/resolver/internal/natsapi"
	"github.com/configsync/configsync/services/resolver/internal/postgres"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
	"github.com/configsync/configsync/services/resolver/internal/vaulttransit"
)

// Config tunes the resolver. Every field has a default.
type Config struct {
	// Workers bounds concurrent single-host resolves per instance.
	Workers int `env:"RESOLVER_WORKERS" default:"16"`
	// BatchWorkers bounds concurrent push pages (resolve_push) per instance (each page holds one pool
	// connection).
	BatchWorkers int `env:"RESOLVER_BATCH_WORKERS" default:"2"`
	// BatchMaxPage is the default and largest number of hosts in one push page.
	BatchMaxPage int `env:"RESOLVER_BATCH_MAX_PAGE" default:"5000"`
	// RequestTimeout bounds the work on one request.
	RequestTimeout time.Duration `env:"RESOLVER_REQUEST_TIMEOUT" default:"10s"`
	// SigningKeyFile is the 0600 ed25519 key file (keyfile format) that signs statements when Vault is
	// not configured. With neither, configs go out unsigned (agents that enforce signatures refuse them).
	SigningKeyFile string `env:"RESOLVER_SIGNING_KEY_FILE"`
	// VaultAddr, VaultToken and VaultSigningKey select a Vault Transit ed25519 key instead.
	VaultAddr       string `env:"RESOLVER_VAULT_ADDR"`
	VaultToken      string `env:"RESOLVER_VAULT_TOKEN"`
	VaultMount      string `env:"RESOLVER_VAULT_TRANSIT_MOUNT" default:"transit"`
	VaultSigningKey string `env:"RESOLVER_VAULT_SIGNING_KEY" default:"configsync-signing"`
	// VaultSigningKeyVersion pins the Transit key version that signs (0: the latest); see the README's
	// rotation procedure.
	VaultSigningKeyVersion int `env:"RESOLVER_VAULT_SIGNING_KEY_VERSION" default:"0"`
	// TrustedKeysFile holds a signed trusted-key list (`resolver sign-trusted-keys` writes one) that
	// every fetch reply carries, so agents adopt a rotated key set without touching their YAML.
	TrustedKeysFile string `env:"RESOLVER_TRUSTED_KEYS_FILE"`
	// StatementRetention is how long a superseded signed statement is kept before it is pruned;
	// StatementPruneInterval how often each replica prunes (one bounded pass, 0 disables pruning).
	StatementRetention     time.Duration `env:"RESOLVER_STATEMENT_RETENTION" default:"168h"`
	StatementPruneInterval time.Duration `env:"RESOLVER_STATEMENT_PRUNE_INTERVAL" default:"10m"`
}

// Module registers the resolver micro service on the app's NATS connection for the app's lifetime.
var Module = fx.Module("resolver",
	envconfig.Provide[Config](),
	fx.Invoke(register),
)

func register(lc fx.Lifecycle, cfg Config, pool *pgxpool.Pool, nc *nats.Conn, log *zap.Logger, m metrics.Optional) error {
	m.Metrics.BuildInfo("resolver")
	svc, err := newService(cfg, pool, log.Named("resolver"), m.Metrics)
	if err != nil {
		return err
	}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { return svc.Start(nc) },
		OnStop:  svc.Stop,
	})
	return nil
}

// Service is a resolver ready to be started on a NATS connection.
type Service struct {
	api    *natsapi.Service
	pruner *pruneLoop // nil: signing off or pruning disabled
}

// New builds the resolver over pool without fx; Start registers it on a connection.
func New(cfg Config, pool *pgxpool.Pool, log *zap.Logger) (*Service, error) {
	return newService(cfg, pool, log, nil)
}

// newService is New reporting to m (nil records nothing).
func newService(cfg Config, pool *pgxpool.Pool, log *zap.Logger, m *metrics.Metrics) (*Service, error) {
	store := postgres.NewStore(pool)
	signer, err := newSigner(cfg, log)
	if err != nil {
		return nil, err
	}
	opts := resolve.Options{MaxPage: cfg.BatchMaxPage}
	if signer != nil {
		opts.Signer, opts.Statements, opts.SignObserver = signer, store, m.Signatures()
	}
	if cfg.TrustedKeysFile != "" {
		if opts.TrustedKeys, err = readTrustedKeys(cfg.TrustedKeysFile); err != nil {
			return nil, err
		}
	}
	r := resolve.New(store, opts)
	registerEnvCacheMetrics(m, r.EnvCacheStats)
	svc := &Service{api: natsapi.New(r, natsapi.Options{
		Workers:        cfg.Workers,
		BatchWorkers:   cfg.BatchWorkers,
		RequestTimeout: cfg.RequestTimeout,
		Observer:       m.RPC(),
	}, log)}
	if signer != nil && cfg.StatementPruneInterval > 0 {
		svc.pruner = newPruneLoop(&resolve.Pruner{Store: store, Retention: cfg.StatementRetention}, cfg.StatementPruneInterval, log)
	}
	return svc, nil
}

// newSigner picks the signing key: Vault Transit when configured, else the key file, else none
// (logged loudly: agents that verify refuse unsigned configs).
func newSigner(cfg Config, log *zap.Logger) (resolve.Signer, error) {
	switch {
	case cfg.VaultAddr != "":
		s, err := vaulttransit.New(vaulttransit.Config{Addr: cfg.VaultAddr, Token: cfg.VaultToken,
			TransitMount: cfg.VaultMount, Key: cfg.VaultSigningKey, KeyVersion: cfg.VaultSigningKeyVersion, Timeout: cfg.RequestTimeout})
		if err != nil {
			return nil, fmt.Errorf("resolver: signing key: %w", err)
		}
		log.Info("statements signed with Vault Transit", zap.String("key", cfg.VaultSigningKey), zap.Int("key_version", cfg.VaultSigningKeyVersion))
		return s, nil
	case cfg.SigningKeyFile != "":
		s, err := keyfile.LoadFile(cfg.SigningKeyFile)
		if err != nil {
			return nil, fmt.Errorf("resolver: signing key: %w", err)
		}
		log.Info("statements signed with a local key file", zap.String("key_id", s.KeyID()))
		return s, nil
	default:
		log.Warn("SIGNING OFF: no RESOLVER_SIGNING_KEY_FILE or RESOLVER_VAULT_ADDR; configs go out unsigned and agents that verify signatures will refuse them")
		return nil, nil
	}
}

// Start registers the micro service and its endpoints on nc, and starts pruning stored statements.
func (s *Service) Start(nc *nats.Conn) error {
	if err := s.api.Start(nc); err != nil {
		return err
	}
	s.pruner.start()
	return nil
}

// Stop stops pruning and taking requests, and waits for in-flight ones until ctx is done.
func (s *Service) Stop(ctx context.Context) error {
	s.pruner.stop()
	return s.api.Stop(ctx)
}
