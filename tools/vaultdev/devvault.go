package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/vault/api"
	"github.com/hashicorp/vault/builtin/credential/approle"
	"github.com/hashicorp/vault/builtin/logical/transit"
	"github.com/hashicorp/vault/helper/namespace"
	vaulthttp "github.com/hashicorp/vault/http"
	"github.com/hashicorp/vault/sdk/helper/consts"
	"github.com/hashicorp/vault/sdk/logical"
	"github.com/hashicorp/vault/sdk/physical/inmem"
	"github.com/hashicorp/vault/vault"
)

// appRoleName is the AppRole role (and policy) the credential service logs in with.
const appRoleName = "configsync"

// options configure one dev Vault.
type options struct {
	// addr is the TCP address to listen on; port 0 picks a free port.
	addr string
	// transitKey is the Transit key created at start; empty creates none.
	transitKey string
	// appRole enables AppRole auth with the role appRoleName.
	appRole bool
	// tokenTTL and tokenMaxTTL bound the tokens AppRole logins return.
	tokenTTL    time.Duration
	tokenMaxTTL time.Duration
}

// readyInfo is the single JSON line printed once the dev Vault serves requests.
type readyInfo struct {
	Addr     string `json:"addr"`
	Token    string `json:"token"`
	RoleID   string `json:"role_id,omitempty"`
	SecretID string `json:"secret_id,omitempty"`
}

// devVault is a running in-memory Vault core behind an HTTP listener.
type devVault struct {
	core   *vault.Core
	server *http.Server
	served chan error
	info   readyInfo
}

// startDevVault builds an in-memory Vault core, initialises and unseals it with a single key
// share, serves its HTTP API on opts.addr and configures Transit (and AppRole when asked)
// through that API, as a client would.
func startDevVault(ctx context.Context, opts options, logger hclog.Logger) (*devVault, error) {
	physical, err := inmem.NewInmem(nil, logger.Named("storage"))
	if err != nil {
		return nil, fmt.Errorf("create in-memory storage: %w", err)
	}
	core, err := vault.NewCore(&vault.CoreConfig{
		Physical:           physical,
		LogicalBackends:    map[string]logical.Factory{"transit": transit.Factory},
		CredentialBackends: map[string]logical.Factory{"approle": approle.Factory},
		BuiltinRegistry: builtinRegistry{
			consts.PluginTypeSecrets:    {"transit": transit.Factory},
			consts.PluginTypeCredential: {"approle": approle.Factory},
		},
		// Nothing here is worth keeping off swap, and mlock needs privileges tests lack.
		DisableMlock: true,
		Logger:       logger,
	})
	if err != nil {
		return nil, fmt.Errorf("create vault core: %w", err)
	}

	d := &devVault{core: core, served: make(chan error, 1)}
	rootToken, err := initUnseal(ctx, core)
	if err != nil {
		_ = core.ShutdownWait()
		return nil, err
	}

	listener, err := net.Listen("tcp", opts.addr)
	if err != nil {
		_ = core.ShutdownWait()
		return nil, fmt.Errorf("listen on %s: %w", opts.addr, err)
	}
	d.server = &http.Server{
		Handler:           vaulthttp.Handler.Handler(&vault.HandlerProperties{Core: core}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { d.served <- d.server.Serve(listener) }()
	d.info = readyInfo{Addr: "http://" + listener.Addr().String(), Token: rootToken}

	if err := d.configure(ctx, opts); err != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return nil, errors.Join(err, d.close(closeCtx))
	}
	return d, nil
}

// initUnseal initialises core with one key share and unseals it, returning the root token.
func initUnseal(ctx context.Context, core *vault.Core) (string, error) {
	ctx = namespace.ContextWithNamespace(ctx, namespace.RootNamespace)
	init, err := core.Initialize(ctx, &vault.InitParams{
		BarrierConfig:  &vault.SealConfig{SecretShares: 1, SecretThreshold: 1},
		RecoveryConfig: nil,
	})
	if err != nil {
		return "", fmt.Errorf("initialise vault: %w", err)
	}
	unsealed, err := core.Unseal(init.SecretShares[0])
	if err != nil {
		return "", fmt.Errorf("unseal vault: %w", err)
	}
	if !unsealed {
		return "", errors.New("unseal vault: still sealed after the only key share")
	}
	return init.RootToken, nil
}

// configure mounts Transit, creates the key and sets up AppRole through the HTTP API.
func (d *devVault) configure(ctx context.Context, opts options) error {
	client, err := d.client(d.info.Token)
	if err != nil {
		return err
	}
	if err := client.Sys().MountWithContext(ctx, "transit", &api.MountInput{Type: "transit"}); err != nil {
		return fmt.Errorf("mount transit: %w", err)
	}
	if opts.transitKey != "" {
		if _, err := client.Logical().WriteWithContext(ctx, "transit/keys/"+opts.transitKey, nil); err != nil {
			return fmt.Errorf("create transit key %q: %w", opts.transitKey, err)
		}
	}
	if !opts.appRole {
		return nil
	}
	if opts.transitKey == "" {
		return errors.New("approle needs a transit key to grant access to")
	}
	if err := client.Sys().EnableAuthWithOptionsWithContext(ctx, "approle", &api.EnableAuthOptions{Type: "approle"}); err != nil {
		return fmt.Errorf("enable approle: %w", err)
	}
	if err := client.Sys().PutPolicyWithContext(ctx, appRoleName, transitPolicy(opts.transitKey)); err != nil {
		return fmt.Errorf("write policy: %w", err)
	}
	rolePath := "auth/approle/role/" + appRoleName
	if _, err := client.Logical().WriteWithContext(ctx, rolePath, map[string]interface{}{
		"token_policies": []string{appRoleName},
		"token_ttl":      opts.tokenTTL.String(),
		"token_max_ttl":  opts.tokenMaxTTL.String(),
		// Unlimited, non-expiring secret IDs: every replica and every re-login reuses one.
		"secret_id_ttl":      "0",
		"secret_id_num_uses": 0,
	}); err != nil {
		return fmt.Errorf("create approle role: %w", err)
	}
	roleID, err := client.Logical().ReadWithContext(ctx, rolePath+"/role-id")
	if err != nil {
		return fmt.Errorf("read approle role id: %w", err)
	}
	secretID, err := client.Logical().WriteWithContext(ctx, rolePath+"/secret-id", nil)
	if err != nil {
		return fmt.Errorf("create approle secret id: %w", err)
	}
	var ok bool
	if d.info.RoleID, ok = roleID.Data["role_id"].(string); !ok {
		return errors.New("read approle role id: no role_id in response")
	}
	if d.info.SecretID, ok = secretID.Data["secret_id"].(string); !ok {
		return errors.New("create approle secret id: no secret_id in response")
	}
	return nil
}

// transitPolicy grants exactly what the credential service does with its key.
func transitPolicy(key string) string {
	return fmt.Sprintf(`path "transit/encrypt/%[1]s" { capabilities = ["update"] }
path "transit/decrypt/%[1]s" { capabilities = ["update"] }
path "transit/rewrap/%[1]s" { capabilities = ["update"] }
path "transit/keys/%[1]s/rotate" { capabilities = ["update"] }
path "transit/keys/%[1]s" { capabilities = ["read"] }
`, key)
}

// client returns an API client for this Vault using token.
func (d *devVault) client(token string) (*api.Client, error) {
	cfg := api.DefaultConfig()
	if cfg.Error != nil {
		return nil, fmt.Errorf("vault client config: %w", cfg.Error)
	}
	cfg.Address = d.info.Addr
	client, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("vault client: %w", err)
	}
	client.ClearNamespace()
	client.SetToken(token)
	return client, nil
}

// close stops the HTTP server, waiting for in-flight requests until ctx ends, then the core.
func (d *devVault) close(ctx context.Context) error {
	shutdownErr := d.server.Shutdown(ctx)
	if shutdownErr != nil {
		shutdownErr = fmt.Errorf("shut down http server: %w", shutdownErr)
		_ = d.server.Close()
	}
	var serveErr error
	if err := <-d.served; !errors.Is(err, http.ErrServerClosed) {
		serveErr = fmt.Errorf("serve http: %w", err)
	}
	var coreErr error
	if err := d.core.ShutdownWait(); err != nil {
		coreErr = fmt.Errorf("shut down vault core: %w", err)
	}
	return errors.Join(shutdownErr, serveErr, coreErr)
}
