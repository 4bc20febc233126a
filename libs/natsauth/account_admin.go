package natsauth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nkeys"
)

// The domain's secret keys are split between two narrow documents, so no internet-facing service can
// rewrite the account:
//   - IssuerSeeds, config-api's: the account's public key and the scoped agent signing key — enough
//     to issue and renew agent users, which the signing key's template confines to their own subjects.
//   - AccountSignerSeeds, the credential service's: the operator signing key, which re-signs the
//     ConfigSync account (its revocation list), with the public keys the account's claims name.
//
// Neither holds the operator's identity key, the system account or the account's own seed.

// IssuerSeeds is config-api's key material: it issues agent users with the scoped agent signing key,
// and nothing more. Keep it out of logs.
type IssuerSeeds struct {
	AccountPublicKey string `json:"account_public_key"`
	AgentSigner      string `json:"agent_signer"`
}

// AccountSignerSeeds is the account custodian's key material (the credential service): the operator
// signing key that re-signs the ConfigSync account, and the public keys its claims carry. Keep it out
// of logs.
type AccountSignerSeeds struct {
	AccountPublicKey     string `json:"account_public_key"`
	AgentSignerPublicKey string `json:"agent_signer_public_key"`
	OperatorSigner       string `json:"operator_signer"`
}

// ErrFullSeeds is the parsers' answer to the domain's full Seeds document.
var ErrFullSeeds = errors.New("natsauth: this is the NATS security domain's full seeds document (operator, system and account keys), " +
	"not a service's document; give config-api its issuer document (account_public_key, agent_signer) and the credential " +
	"service its account signer document (natsauth.Authority.IssuerSeeds and AccountSignerSeeds write them)")

// ErrOperatorSignerInIssuer is ParseIssuerSeeds' answer to an issuer document that still carries the
// operator signing key (written by an older ConfigSync, when config-api re-signed the account itself).
var ErrOperatorSignerInIssuer = errors.New("natsauth: this issuer document carries operator_signer, which config-api no longer holds " +
	"(the credential service re-signs the account); regenerate the documents with natsauthgen, or drop operator_signer from " +
	"config-api's and give it to the credential service's account signer document")

// ErrAgentSignerInAccountSigner is ParseAccountSignerSeeds' answer to a document carrying the agent
// signing key's seed: the account custodian signs no users.
var ErrAgentSignerInAccountSigner = errors.New("natsauth: this document carries agent_signer (a seed); the credential service's " +
	"account signer document holds only agent_signer_public_key")

// IssuerSeeds derives config-api's document from the authority.
func (a *Authority) IssuerSeeds() IssuerSeeds {
	return IssuerSeeds{AccountPublicKey: a.AccountPublicKey(), AgentSigner: seedOf(a.agentSigner)}
}

// AccountSignerSeeds derives the credential service's document from the authority.
func (a *Authority) AccountSignerSeeds() AccountSignerSeeds {
	return AccountSignerSeeds{AccountPublicKey: a.AccountPublicKey(), AgentSignerPublicKey: publicKey(a.agentSigner),
		OperatorSigner: seedOf(a.operatorSigner)}
}

// parseDocument decodes a narrow key document (named what in errors) strictly. It refuses the full
// Seeds document (ErrFullSeeds) and the field forbidden (forbiddenErr), returned as they are; any other
// problem, such as an unknown field, is wrapped.
func parseDocument[T any](data []byte, what, forbidden string, forbiddenErr error) (T, error) {
	var doc, zero T
	switch err := decodeDocument(data, &doc, forbidden, forbiddenErr); {
	case err == nil:
		return doc, nil
	case errors.Is(err, ErrFullSeeds) || errors.Is(err, forbiddenErr):
		return zero, err
	default:
		return zero, fmt.Errorf("natsauth: %s: %w", what, err)
	}
}

func decodeDocument(data []byte, dst any, forbidden string, forbiddenErr error) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	for _, root := range []string{"operator", "system", "account"} {
		if _, ok := fields[root]; ok {
			return ErrFullSeeds
		}
	}
	if _, ok := fields[forbidden]; ok {
		return forbiddenErr
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(dst)
}

// ParseIssuerSeeds decodes config-api's issuer document. It refuses the full Seeds document
// (ErrFullSeeds), one with the operator signing key (ErrOperatorSignerInIssuer) and any other unknown
// field.
func ParseIssuerSeeds(data []byte) (IssuerSeeds, error) {
	return parseDocument[IssuerSeeds](data, "issuer document", "operator_signer", ErrOperatorSignerInIssuer)
}

// ParseAccountSignerSeeds decodes the credential service's account signer document, refusing the full
// Seeds document, the agent signing key's seed and any other unknown field.
func ParseAccountSignerSeeds(data []byte) (AccountSignerSeeds, error) {
	return parseDocument[AccountSignerSeeds](data, "account signer document", "agent_signer", ErrAgentSignerInAccountSigner)
}

// NewIssuerFromSeeds builds config-api's agent user issuer from its document.
func NewIssuerFromSeeds(s IssuerSeeds) (*Issuer, error) {
	return NewIssuer(s.AccountPublicKey, s.AgentSigner)
}

// AccountAdmin is the account custodian's share of the authority: it re-signs the ConfigSync account —
// the same claims as Authority.AccountJWT, with a new revocation list — with the operator signing key.
// It signs no users.
type AccountAdmin struct {
	accountPub     string
	agentSignerPub string
	operatorSigner nkeys.KeyPair
}

// NewAccountAdmin builds an AccountAdmin from an account signer document.
func NewAccountAdmin(s AccountSignerSeeds) (*AccountAdmin, error) {
	if !nkeys.IsValidPublicAccountKey(s.AccountPublicKey) {
		return nil, errors.New("natsauth: account_public_key is not an account key")
	}
	if !nkeys.IsValidPublicAccountKey(s.AgentSignerPublicKey) {
		return nil, errors.New("natsauth: agent_signer_public_key is not an account signing key")
	}
	opSigner, err := keyPair(s.OperatorSigner, "operator_signer", nkeys.IsValidPublicOperatorKey)
	if err != nil {
		return nil, err
	}
	return &AccountAdmin{accountPub: s.AccountPublicKey, agentSignerPub: s.AgentSignerPublicKey, operatorSigner: opSigner}, nil
}

// AccountAdmin returns the authority's AccountAdmin (what the credential service builds from
// AccountSignerSeeds).
func (a *Authority) AccountAdmin() *AccountAdmin {
	return &AccountAdmin{accountPub: a.AccountPublicKey(), agentSignerPub: publicKey(a.agentSigner), operatorSigner: a.operatorSigner}
}

// AccountPublicKey names the account the admin manages.
func (m *AccountAdmin) AccountPublicKey() string { return m.accountPub }

// AccountJWT is the ConfigSync account with revoked (user public key -> revoked at) as its revocation
// list, signed with the operator signing key.
func (m *AccountAdmin) AccountJWT(revoked map[string]time.Time) (string, error) {
	return accountJWT(m.accountPub, m.agentSignerPub, m.operatorSigner, revoked)
}
