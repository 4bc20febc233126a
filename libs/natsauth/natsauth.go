// Package natsauth is ConfigSync's per-agent NATS identity: decentralized JWT auth where every agent
// connects as its own user, signed by a scoped signing key whose permission template uses {{name()}}.
// An agent may publish only configsync.agent.<own id>.> and subscribe only configsync.cmd.<own id> and
// its own inbox prefix. No per-agent server configuration exists, so it scales to any fleet size;
// revoking a host adds its user key to the account's revocation list.
package natsauth

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/configsync/configsync/libs/protocol"
)

// AccountName is the NATS account agents and services share.
const AccountName = "CONFIGSYNC"

// AgentRole names the scoped signing key that signs agent users.
const AgentRole = "agent"

// Seeds is the secret key material of a ConfigSync NATS security domain. Keep it out of logs.
type Seeds struct {
	Operator    string `json:"operator"`
	System      string `json:"system"`
	Account     string `json:"account"`
	AgentSigner string `json:"agent_signer"`
}

// Authority holds the operator, the system account, the ConfigSync account and its agent signing key.
type Authority struct {
	operator, system, account, agentSigner nkeys.KeyPair
}

// NewAuthority creates fresh keys.
func NewAuthority() (*Authority, error) {
	op, err := nkeys.CreateOperator()
	if err != nil {
		return nil, fmt.Errorf("natsauth: operator key: %w", err)
	}
	sys, err := nkeys.CreateAccount()
	if err != nil {
		return nil, fmt.Errorf("natsauth: system account key: %w", err)
	}
	acc, err := nkeys.CreateAccount()
	if err != nil {
		return nil, fmt.Errorf("natsauth: account key: %w", err)
	}
	signer, err := nkeys.CreateAccount()
	if err != nil {
		return nil, fmt.Errorf("natsauth: signing key: %w", err)
	}
	return &Authority{operator: op, system: sys, account: acc, agentSigner: signer}, nil
}

// LoadAuthority rebuilds an Authority from its seeds.
func LoadAuthority(s Seeds) (*Authority, error) {
	var a Authority
	for _, k := range []struct {
		seed string
		dst  *nkeys.KeyPair
		name string
	}{{s.Operator, &a.operator, "operator"}, {s.System, &a.system, "system"}, {s.Account, &a.account, "account"}, {s.AgentSigner, &a.agentSigner, "agent_signer"}} {
		kp, err := nkeys.FromSeed([]byte(k.seed))
		if err != nil {
			return nil, fmt.Errorf("natsauth: %s seed: %w", k.name, err)
		}
		*k.dst = kp
	}
	return &a, nil
}

// Seeds returns the authority's secret seeds (for storing it; never log them).
func (a *Authority) Seeds() Seeds {
	seed := func(kp nkeys.KeyPair) string { s, _ := kp.Seed(); return string(s) }
	return Seeds{Operator: seed(a.operator), System: seed(a.system), Account: seed(a.account), AgentSigner: seed(a.agentSigner)}
}

func publicKey(kp nkeys.KeyPair) string { pk, _ := kp.PublicKey(); return pk }

// OperatorPublicKey, SystemAccountPublicKey and AccountPublicKey name the domain's entities.
func (a *Authority) OperatorPublicKey() string      { return publicKey(a.operator) }
func (a *Authority) SystemAccountPublicKey() string { return publicKey(a.system) }
func (a *Authority) AccountPublicKey() string       { return publicKey(a.account) }

// AgentSignerSeed is what config-api needs to issue agent credentials (NATS_AGENT_SIGNING_KEY).
func (a *Authority) AgentSignerSeed() string { s, _ := a.agentSigner.Seed(); return string(s) }

// OperatorJWT is the trusted operator the server is configured with.
func (a *Authority) OperatorJWT() (string, error) {
	oc := jwt.NewOperatorClaims(a.OperatorPublicKey())
	oc.Name = "configsync"
	oc.SystemAccount = a.SystemAccountPublicKey()
	return oc.Encode(a.operator)
}

// SystemAccountJWT is the system account's JWT.
func (a *Authority) SystemAccountJWT() (string, error) {
	ac := jwt.NewAccountClaims(a.SystemAccountPublicKey())
	ac.Name = "SYS"
	return ac.Encode(a.operator)
}

// AgentPermissions is the template every agent user gets: {{name()}} is the agent id.
func AgentPermissions() jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add(protocol.AgentSubjectPrefix + "{{name()}}.>")
	p.Sub.Allow.Add(protocol.CommandSubjectPrefix+"{{name()}}", "_INBOX.{{name()}}.>")
	return p
}

// AccountJWT is the ConfigSync account: JetStream enabled, the scoped agent signing key, and the
// revocation list (user public key -> revoked at).
func (a *Authority) AccountJWT(revoked map[string]time.Time) (string, error) {
	ac := jwt.NewAccountClaims(a.AccountPublicKey())
	ac.Name = AccountName
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit, Streams: jwt.NoLimit, Consumer: jwt.NoLimit}
	scope := jwt.NewUserScope()
	scope.Key = publicKey(a.agentSigner)
	scope.Role = AgentRole
	scope.Description = "ConfigSync agents: own subjects only"
	scope.Template.Permissions = AgentPermissions()
	ac.SigningKeys.AddScopedSigner(scope)
	if len(revoked) > 0 {
		ac.Revocations = jwt.RevocationList{}
	}
	for pub, at := range revoked {
		ac.Revocations.Revoke(pub, at)
	}
	return ac.Encode(a.operator)
}

// Creds is a user's credentials file content (JWT + seed) and its public key.
type Creds struct {
	File          []byte
	UserPublicKey string
}

// ServiceCreds issues an unrestricted user of the ConfigSync account for a backend service.
func (a *Authority) ServiceCreds(name string) (Creds, error) {
	return issueUser(name, a.AccountPublicKey(), a.account, nil)
}

// SystemCreds issues a user of the system account (to push account updates).
func (a *Authority) SystemCreds(name string) (Creds, error) {
	return issueUser(name, a.SystemAccountPublicKey(), a.system, nil)
}

// Issuer returns the agent credential issuer of this authority.
func (a *Authority) Issuer() *Issuer {
	return &Issuer{accountPub: a.AccountPublicKey(), signer: a.agentSigner}
}

// Issuer signs agent users with the scoped agent signing key; config-api holds one.
type Issuer struct {
	accountPub string
	signer     nkeys.KeyPair
}

// NewIssuer builds an Issuer from the account public key and the agent signing key seed.
func NewIssuer(accountPublicKey, agentSignerSeed string) (*Issuer, error) {
	if !nkeys.IsValidPublicAccountKey(accountPublicKey) {
		return nil, errors.New("natsauth: account public key is not a valid account key")
	}
	kp, err := nkeys.FromSeed([]byte(agentSignerSeed))
	if err != nil {
		return nil, fmt.Errorf("natsauth: agent signing key: %w", err)
	}
	return &Issuer{accountPub: accountPublicKey, signer: kp}, nil
}

// IssueAgent creates a new user for agentID. Its permissions come from the signing key's template.
func (i *Issuer) IssueAgent(agentID string) (Creds, error) {
	if !protocol.ValidAgentID(agentID) {
		return Creds{}, fmt.Errorf("natsauth: invalid agent id %q", agentID)
	}
	return issueUser(agentID, i.accountPub, i.signer, func(uc *jwt.UserClaims) {
		uc.IssuerAccount = i.accountPub
		// Scoped users carry no permissions or limits of their own: the signing key's template applies.
		uc.UserPermissionLimits = jwt.UserPermissionLimits{}
	})
}

func issueUser(name, accountPub string, signer nkeys.KeyPair, edit func(*jwt.UserClaims)) (Creds, error) {
	user, err := nkeys.CreateUser()
	if err != nil {
		return Creds{}, fmt.Errorf("natsauth: user key: %w", err)
	}
	pub, _ := user.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	if edit != nil {
		edit(uc)
	}
	token, err := uc.Encode(signer)
	if err != nil {
		return Creds{}, fmt.Errorf("natsauth: sign user %s: %w", name, err)
	}
	seed, _ := user.Seed()
	file, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return Creds{}, fmt.Errorf("natsauth: format creds: %w", err)
	}
	return Creds{File: file, UserPublicKey: pub}, nil
}
