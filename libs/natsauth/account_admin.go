package natsauth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nkeys"
)

// IssuerSeeds is the narrow key material config-api holds: enough to issue agent users and to re-sign
// the ConfigSync account with a new revocation list, and nothing more — no operator identity, system
// account or account seed. Keep it out of logs.
type IssuerSeeds struct {
	AccountPublicKey string `json:"account_public_key"`
	AgentSigner      string `json:"agent_signer"`
	OperatorSigner   string `json:"operator_signer"`
}

// ErrFullSeeds is ParseIssuerSeeds' answer to the domain's full Seeds document.
var ErrFullSeeds = errors.New("natsauth: this is the NATS security domain's full seeds document (operator, system and account keys), " +
	"not an issuer document; give the service the issuer document instead (account_public_key, agent_signer, operator_signer; " +
	"natsauth.Authority.IssuerSeeds writes it)")

// IssuerSeeds derives the narrow document config-api needs from the authority.
func (a *Authority) IssuerSeeds() IssuerSeeds {
	return IssuerSeeds{AccountPublicKey: a.AccountPublicKey(), AgentSigner: seedOf(a.agentSigner), OperatorSigner: seedOf(a.operatorSigner)}
}

// ParseIssuerSeeds decodes an issuer document. It refuses the full Seeds document (ErrFullSeeds), so a
// service is never handed the domain's root keys by mistake, and any other unknown field.
func ParseIssuerSeeds(data []byte) (IssuerSeeds, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return IssuerSeeds{}, fmt.Errorf("natsauth: issuer document: %w", err)
	}
	for _, root := range []string{"operator", "system", "account"} {
		if _, ok := fields[root]; ok {
			return IssuerSeeds{}, ErrFullSeeds
		}
	}
	var s IssuerSeeds
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return IssuerSeeds{}, fmt.Errorf("natsauth: issuer document: %w", err)
	}
	return s, nil
}

// AccountAdmin is config-api's share of the authority: it issues agent users with the scoped agent
// signing key and re-signs the ConfigSync account — the same claims as Authority.AccountJWT, with a new
// revocation list — with the operator signing key.
type AccountAdmin struct {
	issuer         *Issuer
	agentSignerPub string
	operatorSigner nkeys.KeyPair
}

// NewAccountAdmin builds an AccountAdmin from an issuer document.
func NewAccountAdmin(s IssuerSeeds) (*AccountAdmin, error) {
	issuer, err := NewIssuer(s.AccountPublicKey, s.AgentSigner)
	if err != nil {
		return nil, err
	}
	opSigner, err := keyPair(s.OperatorSigner, "operator_signer", nkeys.IsValidPublicOperatorKey)
	if err != nil {
		return nil, err
	}
	return &AccountAdmin{issuer: issuer, agentSignerPub: publicKey(issuer.signer), operatorSigner: opSigner}, nil
}

// AccountAdmin returns the authority's AccountAdmin (what config-api would build from IssuerSeeds).
func (a *Authority) AccountAdmin() *AccountAdmin {
	return &AccountAdmin{issuer: a.Issuer(), agentSignerPub: publicKey(a.agentSigner), operatorSigner: a.operatorSigner}
}

// AccountPublicKey names the account the admin manages.
func (m *AccountAdmin) AccountPublicKey() string { return m.issuer.accountPub }

// IssueAgent creates a new user for agentID (see Issuer.IssueAgent).
func (m *AccountAdmin) IssueAgent(agentID string) (Creds, error) { return m.issuer.IssueAgent(agentID) }

// AccountJWT is the ConfigSync account with revoked (user public key -> revoked at) as its revocation
// list, signed with the operator signing key.
func (m *AccountAdmin) AccountJWT(revoked map[string]time.Time) (string, error) {
	return accountJWT(m.issuer.accountPub, m.agentSignerPub, m.operatorSigner, revoked)
}
