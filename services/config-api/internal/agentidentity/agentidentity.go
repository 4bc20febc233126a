// Package agentidentity is config-api's adapter for per-agent NATS users (libs/natsauth): it issues each
// registered host its own credentials and pushes the account's revocation list when hosts are revoked.
package agentidentity

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/natsauth"
)

// NATS issues and revokes agent users of the ConfigSync NATS account.
type NATS struct {
	admin     *natsauth.AccountAdmin
	sysCreds  string
	serverURL func() string
}

// Load reads the issuer document from issuerFile (JSON, natsauth.IssuerSeeds: the account's public
// key, the agent signing key and the operator signing key; must not be readable by others) and uses
// systemCreds (a system-account user) to push revocations to the server nc is connected to. The
// domain's full seeds document is refused: config-api needs none of its root keys.
func Load(issuerFile, systemCreds string, nc *nats.Conn) (*NATS, error) {
	info, err := os.Stat(issuerFile)
	if err != nil {
		return nil, fmt.Errorf("agentidentity: %w", err)
	}
	// Group-readable is allowed: a Kubernetes Secret mounted for a non-root pod is 0440 via fsGroup.
	if info.Mode().Perm()&0o007 != 0 {
		return nil, fmt.Errorf("agentidentity: %s is readable by everyone (mode %v); chmod 600 or 640 it", issuerFile, info.Mode().Perm())
	}
	raw, err := os.ReadFile(issuerFile)
	if err != nil {
		return nil, fmt.Errorf("agentidentity: %w", err)
	}
	seeds, err := natsauth.ParseIssuerSeeds(raw)
	if errors.Is(err, natsauth.ErrFullSeeds) {
		return nil, fmt.Errorf("agentidentity: NATS_AUTHORITY_FILE=%s holds the NATS domain's full seeds (authority.json); "+
			"point it at the issuer document instead (natsauthgen writes config-api-issuer.json next to authority.json; "+
			"keep authority.json away from config-api)", issuerFile)
	}
	if err != nil {
		return nil, fmt.Errorf("agentidentity: %s: %w", issuerFile, err)
	}
	admin, err := natsauth.NewAccountAdmin(seeds)
	if err != nil {
		return nil, fmt.Errorf("agentidentity: %s: %w", issuerFile, err)
	}
	if systemCreds == "" {
		return nil, errors.New("agentidentity: NATS_SYSTEM_CREDS is required with NATS_AUTHORITY_FILE (revocations are pushed with it)")
	}
	return &NATS{admin: admin, sysCreds: systemCreds, serverURL: nc.ConnectedUrl}, nil
}

// Issue creates the NATS user of agentID, its JWT expiring at expires.
func (n *NATS) Issue(agentID string, expires time.Time) ([]byte, string, error) {
	c, err := n.admin.IssueAgentUntil(agentID, expires)
	if err != nil {
		return nil, "", err
	}
	return c.File, c.UserPublicKey, nil
}

// Renew signs a fresh JWT for agentID's existing user key.
func (n *NATS) Renew(agentID, publicKey string, expires time.Time) (string, error) {
	return n.admin.RenewAgent(agentID, publicKey, expires)
}

// Push signs the account with revoked as its revocation list and pushes it to the servers.
func (n *NATS) Push(ctx context.Context, revoked map[string]time.Time) error {
	return n.withSystem(ctx, func(sys *nats.Conn) error { return n.admin.Revoke(sys, revoked) })
}

// Sync pushes the account only when the servers' copy differs from the one revoked makes.
func (n *NATS) Sync(ctx context.Context, revoked map[string]time.Time) (bool, error) {
	var pushed bool
	err := n.withSystem(ctx, func(sys *nats.Conn) error {
		var err error
		pushed, err = n.admin.Sync(sys, revoked, 5*time.Second)
		return err
	})
	return pushed, err
}

// withSystem runs fn on a short-lived system-account connection to the server nc is connected to.
func (n *NATS) withSystem(ctx context.Context, fn func(*nats.Conn) error) error {
	url := n.serverURL()
	if url == "" {
		return errors.New("agentidentity: not connected to NATS")
	}
	sys, err := nats.Connect(url, nats.UserCredentials(n.sysCreds), nats.Name("config-api-revocations"), nats.NoReconnect())
	if err != nil {
		return fmt.Errorf("agentidentity: system connection: %w", err)
	}
	defer sys.Close()
	if err := ctx.Err(); err != nil {
		return err
	}
	return fn(sys)
}
