// Package credential wires the credential service: the nats.go micro service "credential" that stores
// collector credentials encrypted (Vault Transit or the local AES-256-GCM keyring) and injects them into
// hosts' collector configs in batches. It owns the credentials table. Its endpoints are served by
// libs/platform/natsrpc pools; its postgres adapter reports a database outage as
// credential.ErrStoreUnavailable, which the NATS edge answers as unavailable. With an account signer
// document it is also the custodian of the key that re-signs the NATS account (package internal/account).
//
// Module needs a *zap.Logger, a *pgxpool.Pool and a *nats.Conn from the app (the platform modules),
// loads its own Config from the environment and contributes a "credential-cipher" readiness check; it
// provides nothing else, so several services can share one fx app (tools/devstack).
package credential

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/health"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/services/credential/internal/account"
	"github.com/configsync/configsync/services/credential/internal/ciphermetrics"
	"github.com/configsync/configsync/services/credential/internal/credential"
	"github.com/configsync/configsync/services/credential/internal/keyring"
	"github.com/configsync/configsync/services/credential/internal/natsapi"
	"github.com/configsync/configsync/services/credential/internal/postgres"
	"github.com/configsync/configsync/services/credential/internal/vaulttransit"
)

// Cipher choices for CREDENTIAL_CIPHER.
const (
	CipherLocal = "local"
	CipherVault = "vault"
)

// Config configures the credential service. It holds secrets (keys, Vault token, secret id): never log
// it.
type Config struct {
	// Cipher selects the cipher new ciphertexts are written with: "local" (keyring) or "vault".
	Cipher string `env:"CREDENTIAL_CIPHER" default:"local"`

	// Keyring is the local keyring inline: "v1:<base64 32-byte key>,v2:...". The highest version
	// encrypts; all decrypt.
	Keyring string `env:"CONFIGSYNC_KEYRING"`
	// KeyringFile is a file holding the keyring in the same format (mode 0600 or stricter).
	KeyringFile string `env:"CONFIGSYNC_KEYRING_FILE"`
	// KeyringCreate writes KeyringFile with a fresh v1 key when it does not exist (embedded stack).
	KeyringCreate bool `env:"CONFIGSYNC_KEYRING_CREATE" default:"false"`

	VaultAddr         string        `env:"VAULT_ADDR"`
	VaultToken        string        `env:"VAULT_TOKEN"`
	VaultRoleID       string        `env:"VAULT_ROLE_ID"`
	VaultSecretID     string        `env:"VAULT_SECRET_ID"`
	VaultAppRoleMount string        `env:"VAULT_APPROLE_MOUNT" default:"approle"`
	VaultTransitMount string        `env:"VAULT_TRANSIT_MOUNT" default:"transit"`
	VaultTransitKey   string        `env:"VAULT_TRANSIT_KEY" default:"configsync"`
	VaultNamespace    string        `env:"VAULT_NAMESPACE"`
	VaultTimeout      time.Duration `env:"VAULT_TIMEOUT" default:"10s"`
	VaultMaxRetries   int           `env:"VAULT_MAX_RETRIES" default:"2"`

	// Workers bounds concurrent management requests per instance.
	Workers int `env:"CREDENTIAL_WORKERS" default:"8"`
	// InjectWorkers bounds concurrent inject batches per instance.
	InjectWorkers int `env:"CREDENTIAL_INJECT_WORKERS" default:"4"`
	// MaxInjectItems caps the items of one inject request.
	MaxInjectItems int `env:"CREDENTIAL_MAX_INJECT_ITEMS" default:"10000"`
	// RequestTimeout bounds the work on one request.
	RequestTimeout time.Duration `env:"CREDENTIAL_REQUEST_TIMEOUT" default:"10s"`

	// NATSAccountSignerFile is the account signer document (libs/natsauth AccountSignerSeeds: the
	// operator signing key and the account's public keys — never the domain's full seeds). When set,
	// the service is the custodian of the NATS account: it answers config-api's account updates
	// (protocol.AccountUpdateSubject) by signing the account with the revocation list and pushing it.
	NATSAccountSignerFile string `env:"CREDENTIAL_NATS_ACCOUNT_SIGNER_FILE"`
	// NATSSystemCreds is a system-account user's creds file, used to look up and push the account.
	NATSSystemCreds string `env:"NATS_SYSTEM_CREDS"`
}

// Module registers the credential micro service on the app's NATS connection for the app's lifetime.
var Module = fx.Module("credential",
	envconfig.Provide[Config](),
	fx.Provide(fx.Private, newForApp),
	fx.Provide(health.AsCheck(readinessCheck)),
	fx.Invoke(register),
)

func newForApp(cfg Config, pool *pgxpool.Pool, log *zap.Logger, m metrics.Optional) (*Service, error) {
	m.Metrics.BuildInfo("credential")
	return newService(cfg, pool, log.Named("credential"), m.Metrics)
}

func readinessCheck(s *Service) health.Check {
	return health.Check{Name: "credential-cipher", Func: s.Check}
}

func register(lc fx.Lifecycle, s *Service, nc *nats.Conn) {
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error { return s.Start(ctx, nc) },
		OnStop:  s.Stop,
	})
}

// Service is a credential service ready to be started on a NATS connection.
type Service struct {
	api    *natsapi.Service
	vaults []*vaulttransit.Transit
	log    *zap.Logger
	cfg    Config

	accountSub *nats.Subscription
}

// New builds the credential service over pool without fx; Start registers it on a connection.
func New(cfg Config, pool *pgxpool.Pool, log *zap.Logger) (*Service, error) {
	return newService(cfg, pool, log, nil)
}

// newService is New reporting to m (nil records nothing).
func newService(cfg Config, pool *pgxpool.Pool, log *zap.Logger, m *metrics.Metrics) (*Service, error) {
	cipher, vaults, err := newCipher(cfg, log)
	if err != nil {
		return nil, err
	}
	cipher = ciphermetrics.Wrap(cipher, m)
	store := postgres.NewStore(pool)
	api := natsapi.New(
		credential.NewService(store, cipher),
		credential.NewInjector(store, cipher, log),
		natsapi.Options{
			Workers:        cfg.Workers,
			InjectWorkers:  cfg.InjectWorkers,
			MaxInjectItems: cfg.MaxInjectItems,
			RequestTimeout: cfg.RequestTimeout,
			Observer:       m.RPC(),
		}, log)
	return &Service{api: api, vaults: vaults, log: log, cfg: cfg}, nil
}

// Start authenticates to Vault (when used; a Vault that is down does not fail start, requests report
// unavailable until it is back) and registers the micro service on nc.
func (s *Service) Start(ctx context.Context, nc *nats.Conn) error {
	for _, v := range s.vaults {
		if err := v.Start(ctx); err != nil {
			return fmt.Errorf("credential: start vault: %w", err)
		}
	}
	if err := s.api.Start(nc); err != nil {
		for _, v := range s.vaults {
			v.Close()
		}
		return err
	}
	if s.cfg.NATSAccountSignerFile != "" {
		if err := s.startAccount(nc); err != nil {
			_ = s.api.Stop(ctx)
			for _, v := range s.vaults {
				v.Close()
			}
			return err
		}
	}
	return nil
}

// startAccount makes this replica a custodian of the NATS account (see package account).
func (s *Service) startAccount(nc *nats.Conn) error {
	c, err := account.Load(s.cfg.NATSAccountSignerFile, s.cfg.NATSSystemCreds, nc, 5*time.Second)
	if err != nil {
		return fmt.Errorf("credential: %w", err)
	}
	timeout := s.cfg.RequestTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	sub, err := account.Serve(nc, c, timeout, s.log.Named("account"))
	if err != nil {
		return fmt.Errorf("credential: account updates: %w", err)
	}
	s.accountSub = sub
	return nil
}

// Stop stops taking requests, waits for in-flight ones until ctx is done and stops Vault renewal.
func (s *Service) Stop(ctx context.Context) error {
	if s.accountSub != nil {
		_ = s.accountSub.Unsubscribe()
		s.accountSub = nil
	}
	err := s.api.Stop(ctx)
	for _, v := range s.vaults {
		v.Close()
	}
	return err
}

// Check is the readiness probe: Vault reachable, unsealed and accepting the token. The keyring is
// always ready.
func (s *Service) Check(ctx context.Context) error {
	var errs []error
	for _, v := range s.vaults {
		errs = append(errs, v.Check(ctx))
	}
	return errors.Join(errs...)
}

// newCipher builds the primary cipher chosen by cfg.Cipher plus, when configured, the other one for
// reading ciphertexts written before a switch (credential rotate moves them to the primary).
func newCipher(cfg Config, log *zap.Logger) (credential.Cipher, []*vaulttransit.Transit, error) {
	keys, keysErr := loadKeyring(cfg)
	vaultConfigured := cfg.VaultAddr != "" && (cfg.VaultToken != "" || cfg.VaultRoleID != "" || cfg.VaultSecretID != "")
	switch cfg.Cipher {
	case CipherLocal:
		if keysErr != nil {
			return nil, nil, keysErr
		}
		if keys == nil {
			return nil, nil, errors.New("credential: CREDENTIAL_CIPHER=local needs CONFIGSYNC_KEYRING or CONFIGSYNC_KEYRING_FILE")
		}
		if !vaultConfigured {
			return keys, nil, nil
		}
		v, err := newVault(cfg, log)
		if err != nil {
			return nil, nil, err
		}
		return credential.NewCiphers(keys, v), []*vaulttransit.Transit{v}, nil
	case CipherVault:
		if cfg.VaultAddr == "" {
			return nil, nil, errors.New("credential: CREDENTIAL_CIPHER=vault needs VAULT_ADDR")
		}
		v, err := newVault(cfg, log)
		if err != nil {
			return nil, nil, err
		}
		if keysErr != nil {
			return nil, nil, keysErr
		}
		if keys == nil {
			return v, []*vaulttransit.Transit{v}, nil
		}
		return credential.NewCiphers(v, keys), []*vaulttransit.Transit{v}, nil
	default:
		return nil, nil, fmt.Errorf("credential: CREDENTIAL_CIPHER is %q, want %q or %q", cfg.Cipher, CipherLocal, CipherVault)
	}
}

// loadKeyring returns the configured keyring, or nil when none is configured.
func loadKeyring(cfg Config) (*keyring.Keyring, error) {
	switch {
	case cfg.Keyring != "" && cfg.KeyringFile != "":
		return nil, errors.New("credential: set CONFIGSYNC_KEYRING or CONFIGSYNC_KEYRING_FILE, not both")
	case cfg.Keyring != "":
		k, err := keyring.Parse(cfg.Keyring)
		if err != nil {
			return nil, fmt.Errorf("credential: CONFIGSYNC_KEYRING: %w", err)
		}
		return k, nil
	case cfg.KeyringFile != "":
		if cfg.KeyringCreate {
			if _, err := keyring.CreateFile(cfg.KeyringFile); err != nil {
				return nil, fmt.Errorf("credential: CONFIGSYNC_KEYRING_CREATE: %w", err)
			}
		}
		k, err := keyring.LoadFile(cfg.KeyringFile)
		if err != nil {
			return nil, fmt.Errorf("credential: CONFIGSYNC_KEYRING_FILE: %w", err)
		}
		return k, nil
	}
	return nil, nil
}

func newVault(cfg Config, log *zap.Logger) (*vaulttransit.Transit, error) {
	v, err := vaulttransit.New(vaulttransit.Config{
		Addr:         cfg.VaultAddr,
		Token:        cfg.VaultToken,
		RoleID:       cfg.VaultRoleID,
		SecretID:     cfg.VaultSecretID,
		AppRoleMount: cfg.VaultAppRoleMount,
		TransitMount: cfg.VaultTransitMount,
		Key:          cfg.VaultTransitKey,
		Namespace:    cfg.VaultNamespace,
		Timeout:      cfg.VaultTimeout,
		MaxRetries:   cfg.VaultMaxRetries,
	}, log.Named("vault"))
	if err != nil {
		return nil, fmt.Errorf("credential: %w", err)
	}
	return v, nil
}
