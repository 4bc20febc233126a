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

// Seeds is the secret key material of a ConfigSync NATS security domain — its root keys. Keep it out of
// logs and away from the services: config-api gets only the IssuerSeeds derived from it.
type Seeds struct {
	Operator string `json:"operator"`
	// OperatorSigner signs the accounts; the operator JWT lists it, so it can be rotated without
	// re-rooting the domain.
	OperatorSigner string `json:"operator_signer"`
	System         string `json:"system"`
	Account        string `json:"account"`
	AgentSigner    string `json:"agent_signer"`
}

// ErrNoOperatorSigner is LoadAuthority's answer to a seeds document written before the domain had an
// operator signing key.
var ErrNoOperatorSigner = errors.New("natsauth: the seeds document has no operator_signer (written by an older ConfigSync); " +
	"regenerate it, or add one with natsauth.UpgradeSeeds and re-render the servers' operator JWT")

// Authority holds the operator and its signing key, the system account, the ConfigSync account and the
// account's agent signing key.
type Authority struct {
	operator, operatorSigner, system, account, agentSigner nkeys.KeyPair
}

// NewAuthority creates fresh keys.
func NewAuthority() (*Authority, error) {
	var a Authority
	for _, k := range []struct {
		dst    *nkeys.KeyPair
		create func() (nkeys.KeyPair, error)
		name   string
	}{
		{&a.operator, nkeys.CreateOperator, "operator"},
		{&a.operatorSigner, nkeys.CreateOperator, "operator signing"},
		{&a.system, nkeys.CreateAccount, "system account"},
		{&a.account, nkeys.CreateAccount, "account"},
		{&a.agentSigner, nkeys.CreateAccount, "agent signing"},
	} {
		kp, err := k.create()
		if err != nil {
			return nil, fmt.Errorf("natsauth: %s key: %w", k.name, err)
		}
		*k.dst = kp
	}
	return &a, nil
}

// LoadAuthority rebuilds an Authority from its seeds. A document without operator_signer yields an
// error wrapping ErrNoOperatorSigner.
func LoadAuthority(s Seeds) (*Authority, error) {
	if s.OperatorSigner == "" && s.Operator != "" {
		return nil, ErrNoOperatorSigner
	}
	var a Authority
	for _, k := range []struct {
		seed  string
		dst   *nkeys.KeyPair
		name  string
		valid func(string) bool
	}{
		{s.Operator, &a.operator, "operator", nkeys.IsValidPublicOperatorKey},
		{s.OperatorSigner, &a.operatorSigner, "operator_signer", nkeys.IsValidPublicOperatorKey},
		{s.System, &a.system, "system", nkeys.IsValidPublicAccountKey},
		{s.Account, &a.account, "account", nkeys.IsValidPublicAccountKey},
		{s.AgentSigner, &a.agentSigner, "agent_signer", nkeys.IsValidPublicAccountKey},
	} {
		kp, err := keyPair(k.seed, k.name, k.valid)
		if err != nil {
			return nil, err
		}
		*k.dst = kp
	}
	return &a, nil
}

// UpgradeSeeds adds a fresh operator signing key to a seeds document written before the domain had
// one; every other key, and so every credential already issued, stays. The servers must then be given
// the new operator JWT (OperatorJWT), which lists the key. A document that has one is returned as is.
func UpgradeSeeds(s Seeds) (Seeds, error) {
	if s.OperatorSigner != "" {
		return s, nil
	}
	kp, err := nkeys.CreateOperator()
	if err != nil {
		return s, fmt.Errorf("natsauth: operator signing key: %w", err)
	}
	s.OperatorSigner = seedOf(kp)
	return s, nil
}

// keyPair decodes seed and checks it is the kind of key its field name promises.
func keyPair(seed, name string, valid func(string) bool) (nkeys.KeyPair, error) {
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		return nil, fmt.Errorf("natsauth: %s seed: %w", name, err)
	}
	if pub, err := kp.PublicKey(); err != nil || !valid(pub) {
		return nil, fmt.Errorf("natsauth: %s seed is the wrong kind of key", name)
	}
	return kp, nil
}

func seedOf(kp nkeys.KeyPair) string { s, _ := kp.Seed(); return string(s) }

// Seeds returns the authority's secret seeds (for storing it; never log them).
func (a *Authority) Seeds() Seeds {
	return Seeds{
		Operator:       seedOf(a.operator),
		OperatorSigner: seedOf(a.operatorSigner),
		System:         seedOf(a.system),
		Account:        seedOf(a.account),
		AgentSigner:    seedOf(a.agentSigner),
	}
}

func publicKey(kp nkeys.KeyPair) string { pk, _ := kp.PublicKey(); return pk }

// OperatorPublicKey, SystemAccountPublicKey and AccountPublicKey name the domain's entities.
func (a *Authority) OperatorPublicKey() string      { return publicKey(a.operator) }
func (a *Authority) SystemAccountPublicKey() string { return publicKey(a.system) }
func (a *Authority) AccountPublicKey() string       { return publicKey(a.account) }

// AgentSignerSeed is the seed of the account's scoped agent signing key.
func (a *Authority) AgentSignerSeed() string { return seedOf(a.agentSigner) }

// OperatorJWT is the trusted operator the server is configured with. It lists the operator signing
// key, with which every account JWT is signed.
func (a *Authority) OperatorJWT() (string, error) {
	oc := jwt.NewOperatorClaims(a.OperatorPublicKey())
	oc.Name = "configsync"
	oc.SystemAccount = a.SystemAccountPublicKey()
	oc.SigningKeys.Add(publicKey(a.operatorSigner))
	return oc.Encode(a.operator)
}

// SystemAccountJWT is the system account's JWT.
func (a *Authority) SystemAccountJWT() (string, error) {
	ac := jwt.NewAccountClaims(a.SystemAccountPublicKey())
	ac.Name = "SYS"
	return ac.Encode(a.operatorSigner)
}

// AgentPermissions is the template every agent user gets: {{name()}} is the agent id.
func AgentPermissions() jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add(protocol.AgentSubjectPrefix + "{{name()}}.>")
	p.Sub.Allow.Add(protocol.CommandSubjectPrefix+"{{name()}}", "_INBOX.{{name()}}.>")
	return p
}

// AccountJWT is the ConfigSync account: JetStream enabled, the scoped agent signing key, and the
// revocation list (user public key -> revoked at), signed with the operator signing key.
func (a *Authority) AccountJWT(revoked map[string]time.Time) (string, error) {
	return accountJWT(a.AccountPublicKey(), publicKey(a.agentSigner), a.operatorSigner, revoked)
}

// accountJWT builds and signs the ConfigSync account's claims; the Authority and the AccountAdmin both
// sign through it, so a revocation never changes anything but the revocation list.
func accountJWT(accountPub, agentSignerPub string, operatorSigner nkeys.KeyPair, revoked map[string]time.Time) (string, error) {
	token, err := accountClaims(accountPub, agentSignerPub, revoked).Encode(operatorSigner)
	if err != nil {
		return "", fmt.Errorf("natsauth: sign account: %w", err)
	}
	return token, nil
}

// accountClaims is the ConfigSync account's claims, unsigned (AccountAdmin.Sync compares the servers'
// copy with them).
func accountClaims(accountPub, agentSignerPub string, revoked map[string]time.Time) *jwt.AccountClaims {
	ac := jwt.NewAccountClaims(accountPub)
	ac.Name = AccountName
	ac.Limits.JetStreamLimits = AccountJetStreamLimits()
	scope := jwt.NewUserScope()
	scope.Key = agentSignerPub
	scope.Role = AgentRole
	scope.Description = "ConfigSync agents: own subjects only"
	scope.Template.Permissions = AgentPermissions()
	scope.Template.Limits = AgentLimits()
	ac.SigningKeys.AddScopedSigner(scope)
	if len(revoked) > 0 {
		ac.Revocations = jwt.RevocationList{}
	}
	for pub, at := range revoked {
		ac.Revocations.Revoke(pub, at)
	}
	return ac
}

// Creds is a user's credentials file content (JWT + seed) and its public key.
type Creds struct {
	File          []byte
	UserPublicKey string
}

// SystemCreds issues a user of the system account (to push account updates).
func (a *Authority) SystemCreds(name string) (Creds, error) {
	return issueUser(name, a.SystemAccountPublicKey(), a.system, nil)
}

// Issuer returns the agent credential issuer of this authority.
func (a *Authority) Issuer() *Issuer {
	return &Issuer{accountPub: a.AccountPublicKey(), signer: a.agentSigner}
}

// Issuer signs agent users with the scoped agent signing key (config-api holds one inside its
// AccountAdmin).
type Issuer struct {
	accountPub string
	signer     nkeys.KeyPair
}

// NewIssuer builds an Issuer from the account public key and the agent signing key seed.
func NewIssuer(accountPublicKey, agentSignerSeed string) (*Issuer, error) {
	if !nkeys.IsValidPublicAccountKey(accountPublicKey) {
		return nil, errors.New("natsauth: account public key is not a valid account key")
	}
	kp, err := keyPair(agentSignerSeed, "agent_signer", nkeys.IsValidPublicAccountKey)
	if err != nil {
		return nil, err
	}
	return &Issuer{accountPub: accountPublicKey, signer: kp}, nil
}

// IssueAgent creates a new user for agentID whose JWT never expires. Its permissions come from the
// signing key's template.
func (i *Issuer) IssueAgent(agentID string) (Creds, error) {
	return i.IssueAgentUntil(agentID, time.Time{})
}

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
	file, err := userCredsFile(token, seed)
	if err != nil {
		return Creds{}, fmt.Errorf("natsauth: format creds: %w", err)
	}
	return Creds{File: file, UserPublicKey: pub}, nil
}

// userCredsFile lays out a user's creds file: the decorated JWT, then the decorated seed. It is what
// jwt.FormatUserConfig writes (a test holds them equal), without that function's re-decoding and
// verifying of a JWT signed a moment ago and re-deriving the key pair from the seed, which were half of
// the CPU of issuing an agent user.
func userCredsFile(token string, seed []byte) ([]byte, error) {
	decoratedSeed, err := jwt.DecorateSeed(seed)
	if err != nil {
		return nil, err
	}
	file := make([]byte, 0, len(token)+len(decoratedSeed)+80)
	file = append(file, "-----BEGIN NATS USER JWT-----\n"...)
	file = append(file, token...)
	file = append(file, "\n------END NATS USER JWT------\n\n"...)
	return append(file, decoratedSeed...), nil
}
