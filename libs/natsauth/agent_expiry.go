package natsauth

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/configsync/configsync/libs/protocol"
)

// IssueAgentUntil creates a new user for agentID whose JWT expires at expires (the zero time: never,
// as IssueAgent). The server disconnects the agent when its JWT expires and refuses it afterwards, so
// an agent renews before then (RenewAgent); a revocation entry therefore only needs to outlive the
// JWTs issued before it.
func (i *Issuer) IssueAgentUntil(agentID string, expires time.Time) (Creds, error) {
	if !protocol.ValidAgentID(agentID) {
		return Creds{}, fmt.Errorf("natsauth: invalid agent id %q", agentID)
	}
	return issueUser(agentID, i.accountPub, i.signer, func(uc *jwt.UserClaims) { i.scopeAgent(uc, expires) })
}

// scopeAgent makes uc a user of i's account signed by the scoped agent key, expiring at expires (the
// zero time: never). Scoped users carry no permissions or limits of their own: the signing key's
// template applies.
func (i *Issuer) scopeAgent(uc *jwt.UserClaims, expires time.Time) {
	uc.IssuerAccount = i.accountPub
	uc.UserPermissionLimits = jwt.UserPermissionLimits{}
	if !expires.IsZero() {
		uc.Expires = expires.Unix()
	}
}

// RenewAgent signs a fresh JWT, expiring at expires, for the existing agent user userPublicKey: the
// agent keeps its seed and swaps the JWT in its creds file (protocol.CredsRenewReply).
func (i *Issuer) RenewAgent(agentID, userPublicKey string, expires time.Time) (string, error) {
	if !protocol.ValidAgentID(agentID) {
		return "", fmt.Errorf("natsauth: invalid agent id %q", agentID)
	}
	if !nkeys.IsValidPublicUserKey(userPublicKey) {
		return "", errors.New("natsauth: renew: not a user public key")
	}
	if expires.IsZero() {
		return "", errors.New("natsauth: renew: a renewed JWT must expire")
	}
	uc := jwt.NewUserClaims(userPublicKey)
	uc.Name = agentID
	i.scopeAgent(uc, expires)
	token, err := uc.Encode(i.signer)
	if err != nil {
		return "", fmt.Errorf("natsauth: sign renewed user %s: %w", agentID, err)
	}
	return token, nil
}
