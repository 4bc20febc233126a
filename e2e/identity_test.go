package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
)

// credsExpiry reads the expiry of the JWT in a creds file.
func credsExpiry(path string) (time.Time, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	token, err := jwt.ParseDecoratedJWT(raw)
	if err != nil {
		return time.Time{}, err
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return time.Time{}, err
	}
	if uc.Expires == 0 {
		return time.Time{}, fmt.Errorf("%s: the JWT does not expire", path)
	}
	return time.Unix(uc.Expires, 0), nil
}

// TestAgentCredentialsRenewal: with agent JWTs that expire within seconds, the real agent renews its
// own credentials over NATS (config-api answers), writes them to its data directory with mode 0600,
// and keeps heartbeating after the JWT it was registered with has expired. Revoking the host through
// the batch route (config-api asks the credential service, the account's custodian, to push the
// revocation) then refuses the renewed credentials too.
func TestAgentCredentialsRenewal(t *testing.T) {
	s := startStack(t, stackOptions{replicas: 1, agents: []string{"host-a"},
		configAPIEnv: []string{"CONFIGAPI_AGENT_CREDS_LIFETIME=24s"}})
	a := s.agentList()[0]
	s.waitOnline(1)
	first, err := credsExpiry(filepath.Join(filepath.Dir(a.dataDir), "agent.creds"))
	if err != nil {
		t.Fatal(err)
	}
	renewed := filepath.Join(a.dataDir, "nats.creds")
	s.eventually(60*time.Second, "the agent to renew its NATS credentials", why(func() (string, bool) {
		info, err := os.Stat(renewed)
		if err != nil {
			return err.Error(), false
		}
		if info.Mode().Perm() != 0o600 {
			return fmt.Sprintf("%s has mode %v", renewed, info.Mode().Perm()), false
		}
		exp, err := credsExpiry(renewed)
		if err != nil {
			return err.Error(), false
		}
		return fmt.Sprintf("renewed JWT expires %v, the first %v", exp, first), exp.After(first)
	}))
	// Heartbeats keep arriving after the first JWT expired (the agent reconnected with the new one).
	after := first.Add(2 * time.Second)
	s.eventually(60*time.Second, "a heartbeat after the registered JWT expired", why(func() (string, bool) {
		h, r, ok := s.host(1, a)
		if !ok {
			return r.String(), false
		}
		if h.LastHeartbeatAt == nil {
			return "no heartbeat yet", false
		}
		return fmt.Sprintf("last heartbeat %v, want after %v", *h.LastHeartbeatAt, after), h.LastHeartbeatAt.After(after)
	}))

	s.api(1).mustDo(t, http.MethodPost, "/api/v1/environments/"+s.envID+"/hosts/revoke", map[string]any{"host_ids": []string{a.hostID}}, nil)
	s.eventually(30*time.Second, "the revoked agent's renewed credentials to be refused", why(func() (string, bool) {
		exp, err := credsExpiry(renewed)
		if err != nil {
			return err.Error(), false
		}
		nc, err := nats.Connect(s.nats.URL(), nats.UserCredentials(renewed), nats.NoReconnect())
		if err == nil {
			nc.Close()
			return "the renewed credentials still connect", false
		}
		// Refused while the JWT is still valid: by the revocation, not by expiry.
		return fmt.Sprintf("refused (%v) with the JWT valid until %v", err, exp), time.Now().Before(exp)
	}))
}
