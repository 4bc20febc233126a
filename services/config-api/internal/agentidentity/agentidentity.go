// Package agentidentity is config-api's adapter for per-agent NATS users (libs/natsauth): it issues
// and renews each registered host's own NATS user with the scoped agent signing key — the only NATS key
// config-api holds — and asks the credential service, the custodian of the key that re-signs the
// account, to update the account's revocation list (protocol.AccountUpdateSubject).
package agentidentity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/platform/secretfile"
	"github.com/configsync/configsync/libs/protocol"
)

// NATS issues agent users and requests account updates.
type NATS struct {
	issuer  *natsauth.Issuer
	nc      *nats.Conn
	timeout time.Duration
}

// Load reads the issuer document from issuerFile (JSON, natsauth.IssuerSeeds: the account's public key
// and the agent signing key; must not be readable by others) and sends account updates on nc. The
// domain's full seeds document, and an older issuer document that still carries the operator signing
// key, are refused: config-api needs neither.
func Load(issuerFile string, nc *nats.Conn, timeout time.Duration) (*NATS, error) {
	raw, err := secretfile.ReadGroupShared(issuerFile)
	if err != nil {
		return nil, fmt.Errorf("agentidentity: %w", err)
	}
	seeds, err := natsauth.ParseIssuerSeeds(raw)
	switch {
	case errors.Is(err, natsauth.ErrFullSeeds):
		return nil, fmt.Errorf("agentidentity: NATS_AUTHORITY_FILE=%s holds the NATS domain's full seeds (authority.json); "+
			"point it at the issuer document instead (natsauthgen writes config-api-issuer.json next to authority.json; "+
			"keep authority.json away from config-api)", issuerFile)
	case errors.Is(err, natsauth.ErrOperatorSignerInIssuer):
		return nil, fmt.Errorf("agentidentity: NATS_AUTHORITY_FILE=%s still holds the operator signing key, which config-api no "+
			"longer keeps (the credential service re-signs the account); regenerate config-api-issuer.json and "+
			"credential-account-signer.json with natsauthgen", issuerFile)
	case err != nil:
		return nil, fmt.Errorf("agentidentity: %s: %w", issuerFile, err)
	}
	issuer, err := natsauth.NewIssuerFromSeeds(seeds)
	if err != nil {
		return nil, fmt.Errorf("agentidentity: %s: %w", issuerFile, err)
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &NATS{issuer: issuer, nc: nc, timeout: timeout}, nil
}

// Issue creates the NATS user of agentID, its JWT expiring at expires.
func (n *NATS) Issue(agentID string, expires time.Time) ([]byte, string, error) {
	c, err := n.issuer.IssueAgentUntil(agentID, expires)
	if err != nil {
		return nil, "", err
	}
	return c.File, c.UserPublicKey, nil
}

// Renew signs a fresh JWT for agentID's existing user key.
func (n *NATS) Renew(agentID, publicKey string, expires time.Time) (string, error) {
	return n.issuer.RenewAgent(agentID, publicKey, expires)
}

// Push asks the account custodian to sign and push the account with revoked as its revocation list.
func (n *NATS) Push(ctx context.Context, revoked map[string]time.Time) error {
	_, err := n.update(ctx, revoked, true)
	return err
}

// Sync asks the custodian to push the account only when the servers' copy differs.
func (n *NATS) Sync(ctx context.Context, revoked map[string]time.Time) (bool, error) {
	return n.update(ctx, revoked, false)
}

func (n *NATS) update(ctx context.Context, revoked map[string]time.Time, force bool) (bool, error) {
	req := protocol.AccountUpdateRequest{Revocations: make(map[string]int64, len(revoked)), Force: force}
	for pub, at := range revoked {
		req.Revocations[pub] = at.Unix()
	}
	data, err := json.Marshal(req)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	msg, err := n.nc.RequestWithContext(ctx, protocol.AccountUpdateSubject, data)
	if err != nil {
		return false, fmt.Errorf("agentidentity: account update: %w", err)
	}
	var reply protocol.AccountUpdateReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return false, fmt.Errorf("agentidentity: account update: bad reply: %w", err)
	}
	if reply.Error != nil {
		return false, fmt.Errorf("agentidentity: account update: %w", reply.Error)
	}
	return reply.Pushed, nil
}
