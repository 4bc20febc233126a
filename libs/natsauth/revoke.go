package natsauth

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// ClaimsUpdateSubject is where a system-account user pushes a new account JWT to the servers' resolver.
const ClaimsUpdateSubject = "$SYS.REQ.CLAIMS.UPDATE"

// PushAccount sends the ConfigSync account JWT — for example with a new revocation list — to the
// servers over a system-account connection and checks their answer.
func PushAccount(sys *nats.Conn, accountJWT string, timeout time.Duration) error {
	msg, err := sys.Request(ClaimsUpdateSubject, []byte(accountJWT), timeout)
	if err != nil {
		return fmt.Errorf("natsauth: push account: %w", err)
	}
	var reply struct {
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return fmt.Errorf("natsauth: push account: bad reply: %w", err)
	}
	if reply.Error != nil {
		return fmt.Errorf("natsauth: push account: %d %s", reply.Error.Code, reply.Error.Description)
	}
	return nil
}

// Revoke pushes the account with revoked (user public key -> revoked at) as its revocation list; users
// whose JWTs were issued before their revocation time are disconnected and can no longer connect.
func (m *AccountAdmin) Revoke(sys *nats.Conn, revoked map[string]time.Time) error {
	accJWT, err := m.AccountJWT(revoked)
	if err != nil {
		return err
	}
	return PushAccount(sys, accJWT, 5*time.Second)
}
