package natsauth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
)

// accountLookupSubject is where the servers' full resolver answers with the account JWT it holds (an
// empty answer when it has none).
const accountLookupSubject = "$SYS.REQ.ACCOUNT.%s.CLAIMS.LOOKUP"

// LookupAccount returns the account JWT the servers hold for accountPub ("" when they have none), over
// a system-account connection.
func LookupAccount(sys *nats.Conn, accountPub string, timeout time.Duration) (string, error) {
	msg, err := sys.Request(fmt.Sprintf(accountLookupSubject, accountPub), nil, timeout)
	if err != nil {
		return "", fmt.Errorf("natsauth: look up account: %w", err)
	}
	return string(msg.Data), nil
}

// InSync reports whether serverJWT (what the servers hold, LookupAccount) carries exactly the claims
// AccountJWT(revoked) would sign: the same revocation list (to the second), signing keys, limits and
// name, issued by this admin's operator signing key. Issue time and JWT id are not compared.
func (m *AccountAdmin) InSync(serverJWT string, revoked map[string]time.Time) (bool, error) {
	if serverJWT == "" {
		return false, nil
	}
	held, err := jwt.DecodeAccountClaims(serverJWT)
	if err != nil {
		return false, fmt.Errorf("natsauth: decode the servers' account JWT: %w", err)
	}
	if held.Subject != m.accountPub {
		return false, errors.New("natsauth: the servers answered with another account's JWT")
	}
	if held.Issuer != publicKey(m.operatorSigner) {
		return false, nil
	}
	// Encoded and decoded, as the servers' copy was, so fields set while encoding compare equal.
	wantJWT, err := m.AccountJWT(revoked)
	if err != nil {
		return false, err
	}
	want, err := jwt.DecodeAccountClaims(wantJWT)
	if err != nil {
		return false, err
	}
	a, err := json.Marshal(held.Account)
	if err != nil {
		return false, err
	}
	b, err := json.Marshal(want.Account)
	if err != nil {
		return false, err
	}
	return held.Name == want.Name && bytes.Equal(a, b), nil
}

// Sync makes the servers' ConfigSync account carry revoked as its revocation list: it looks up their
// copy and pushes a newly signed one only when it differs (InSync). It reports whether it pushed.
// This is the reconciliation of a push that failed, or that another signer overwrote.
func (m *AccountAdmin) Sync(sys *nats.Conn, revoked map[string]time.Time, timeout time.Duration) (bool, error) {
	held, err := LookupAccount(sys, m.accountPub, timeout)
	if err != nil {
		return false, err
	}
	ok, err := m.InSync(held, revoked)
	if err != nil {
		return false, err
	}
	if ok {
		return false, nil
	}
	accJWT, err := m.AccountJWT(revoked)
	if err != nil {
		return false, err
	}
	if err := PushAccount(sys, accJWT, timeout); err != nil {
		return false, err
	}
	return true, nil
}
