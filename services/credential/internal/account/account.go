// Package account is the credential service's custody of the key that re-signs the ConfigSync NATS
// account (libs/natsauth AccountSignerSeeds: the operator signing key). config-api, which faces the
// internet, keeps only the agent-user signer; when it revokes agents it asks this service, on
// protocol.AccountUpdateSubject, to make the servers' account carry the revocation list it holds in
// its database. config-api serializes those requests across its replicas (a PostgreSQL advisory lock)
// and reconciles them periodically; this service signs and pushes.
package account

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/platform/secretfile"
)

// Custodian signs and pushes the ConfigSync account.
type Custodian struct {
	admin     *natsauth.AccountAdmin
	sysCreds  string
	serverURL func() string
	// tls carries the service connection's TLS settings (CA, client certificate) over to the system
	// connection: the servers serve TLS only.
	tls     nats.Option
	timeout time.Duration
	// mu serializes this replica's pushes (config-api serializes across replicas).
	mu sync.Mutex
}

// Load reads the account signer document from file (must not be readable by others) and uses
// systemCreds (a system-account user) to look up and push the account on the server nc is connected to.
func Load(file, systemCreds string, nc *nats.Conn, timeout time.Duration) (*Custodian, error) {
	raw, err := secretfile.ReadGroupShared(file)
	if err != nil {
		return nil, fmt.Errorf("account: %w", err)
	}
	seeds, err := natsauth.ParseAccountSignerSeeds(raw)
	if errors.Is(err, natsauth.ErrFullSeeds) {
		return nil, fmt.Errorf("account: CREDENTIAL_NATS_ACCOUNT_SIGNER_FILE=%s holds the NATS domain's full seeds (authority.json); "+
			"point it at the account signer document instead (natsauthgen writes credential-account-signer.json next to authority.json)", file)
	}
	if err != nil {
		return nil, fmt.Errorf("account: %s: %w", file, err)
	}
	admin, err := natsauth.NewAccountAdmin(seeds)
	if err != nil {
		return nil, fmt.Errorf("account: %s: %w", file, err)
	}
	if systemCreds == "" {
		return nil, errors.New("account: NATS_SYSTEM_CREDS is required with CREDENTIAL_NATS_ACCOUNT_SIGNER_FILE (account updates are pushed with it)")
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &Custodian{admin: admin, sysCreds: systemCreds, serverURL: nc.ConnectedUrl, tls: tlsOf(nc), timeout: timeout}, nil
}

// tlsOf is an option giving a connection nc's TLS settings (none when nc does not use TLS).
func tlsOf(nc *nats.Conn) nats.Option {
	src := nc.Opts
	return func(o *nats.Options) error {
		o.Secure = src.Secure
		if src.TLSConfig != nil {
			o.TLSConfig = src.TLSConfig.Clone()
		}
		o.RootCAsCB = src.RootCAsCB
		o.TLSCertCB = src.TLSCertCB
		o.TLSHandshakeFirst = src.TLSHandshakeFirst
		return nil
	}
}

// Update makes the servers' account carry revoked as its revocation list. With force it always signs
// and pushes; otherwise it looks up the servers' copy and pushes only when it differs. It reports
// whether it pushed.
func (c *Custodian) Update(ctx context.Context, revoked map[string]time.Time, force bool) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	url := c.serverURL()
	if url == "" {
		return false, errors.New("account: not connected to NATS")
	}
	sys, err := nats.Connect(url, c.tls, nats.UserCredentials(c.sysCreds), nats.Name("credential-account-updates"), nats.NoReconnect())
	if err != nil {
		return false, fmt.Errorf("account: system connection: %w", err)
	}
	defer sys.Close()
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if force {
		accJWT, err := c.admin.AccountJWT(revoked)
		if err != nil {
			return false, err
		}
		if err := natsauth.PushAccount(sys, accJWT, c.timeout); err != nil {
			return false, err
		}
		return true, nil
	}
	return c.admin.Sync(sys, revoked, c.timeout)
}
