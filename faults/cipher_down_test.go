package faults_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/credential"
)

// TestCipherUnavailable makes Vault unreachable for the credential service while collectors (with a
// credential) and another config type change, then brings it back.
//
// Setup: a real dev Vault (testinfra.Vault: Transit and AppRole) behind a TCP proxy the test can cut,
// as when Vault dies or the network to it fails; the credential service uses it as its only cipher.
// Everything else runs in-process with three fake agents.
//
// Proves: while Vault is away a collectors change reaches no agent, in part or in whole, and delivery
// logs why; a change of another type still reaches every agent; a fetch still answers, leaving
// collectors out and naming the reason in type_errors; once Vault is back the collectors change is
// pushed, secrets injected, without any new write. The planted secret never appears in a log.
func TestCipherUnavailable(t *testing.T) {
	t.Parallel()
	vault := testinfra.Vault(t)
	proxy := newTCPProxy(t, strings.TrimPrefix(vault.Addr, "http://"))

	s := newStack(t)
	s.startResolver(nil)
	s.startCredential(func(c *credential.Config) {
		c.Cipher, c.Keyring = credential.CipherVault, ""
		c.VaultAddr = "http://" + proxy.addr
		c.VaultRoleID, c.VaultSecretID = vault.RoleID, vault.SecretID
		c.VaultTimeout, c.VaultMaxRetries = 2*time.Second, 0
	})
	s.startDelivery(nil)
	s.startAckIngest()
	s.startRelay()
	api := s.startAPI()
	ten := api.newTenant("cipher-down")
	hosts := api.registerHosts(ten.EnvID, "mysql", 3)
	fakes := newFakeAgents(t, s.nc, hosts)
	s.bringOnline(fakes, hosts)
	ops := api.as(ten.Token)

	const secret = "planted-S3cret-for-faults"
	var cred struct{ ID string }
	ops.must(http.MethodPost, "/api/v1/clients/"+ten.ClientID+"/credentials",
		map[string]any{"name": "mysql-main", "environment_id": ten.EnvID, "secret": map[string]string{"username": "monitor", "password": secret}}, &cred)
	collectors := func(interval int) string {
		return fmt.Sprintf(`[{"type":"mysql","name":"primary","host":"db.internal","port":3306,"interval":"%ds","credential_id":"%s"}]`, interval, cred.ID)
	}
	c1 := ops.putEnv(ten.EnvID, "collectors", collectors(10))
	waitReceived(t, 30*time.Second, fakes, "collectors", c1)
	checkInjected(t, fakes, secret)

	proxy.down()
	c2 := ops.putEnv(ten.EnvID, "collectors", collectors(20))
	h := ops.putEnv(ten.EnvID, "healthcheck", `{"interval_seconds":20,"timeout_seconds":2}`)
	waitReceived(t, 30*time.Second, fakes, "healthcheck", h)
	testinfra.EventuallyNoError(t, 30*time.Second, func() error {
		n := s.logged("push failed, will redo", map[string]any{"version": c2}) +
			s.logged("push: hosts skipped, their config cannot be delivered", map[string]any{"version": c2, "code": protocol.CodeUnavailable})
		if n > 0 {
			return nil
		}
		return errors.New("nothing logged for the collectors change yet")
	}, "delivery to log why the collectors change could not be pushed")
	for _, a := range fakes {
		if n := a.count("collectors", c2); n != 0 {
			t.Fatalf("agent %s received collectors v%d while Vault was away", a.id, c2)
		}
	}
	reply := fakes[0].fetch(t)
	if reply.Error != nil {
		t.Fatalf("fetch while Vault is away failed as a whole: %+v", reply.Error)
	}
	if _, ok := reply.Configs["healthcheck"]; !ok || reply.Versions["healthcheck"] != h {
		t.Errorf("fetch while Vault is away lacks healthcheck v%d: %v", h, reply.Versions)
	}
	_, inConfigs := reply.Configs["collectors"]
	_, inVersions := reply.Versions["collectors"]
	if inConfigs || inVersions || reply.TypeErrors["collectors"].Code == "" {
		t.Errorf("fetch while Vault is away: collectors in configs %t, in versions %t, type error %+v; want only a type error",
			inConfigs, inVersions, reply.TypeErrors["collectors"])
	}

	proxy.up(t)
	waitReceived(t, 60*time.Second, fakes, "collectors", c2)
	checkInjected(t, fakes, secret)
	s.waitApplied(30*time.Second, hosts, "collectors", c2)
	for _, e := range s.logs.All() {
		if line, _ := json.Marshal(e.ContextMap()); strings.Contains(e.Message+string(line), secret) {
			t.Errorf("the secret reached a log entry: %q", e.Message)
		}
	}
}

// checkInjected fails unless every collectors command the fakes received carries the secret inline and
// no credential_id: a push is whole or absent.
func checkInjected(t testing.TB, fakes []*fakeAgent, secret string) {
	t.Helper()
	for _, a := range fakes {
		for _, c := range a.received("collectors") {
			var list []map[string]any
			if err := json.Unmarshal(c.Payload, &list); err != nil || len(list) != 1 {
				t.Fatalf("agent %s: collectors v%d payload %s", a.id, c.Version, c.Payload)
			}
			if list[0]["password"] != secret || list[0]["credential_id"] != nil || len(c.SecretFields) == 0 {
				t.Errorf("agent %s: collectors v%d not injected whole (password set %t, credential_id %v, secret_fields %v)",
					a.id, c.Version, list[0]["password"] == secret, list[0]["credential_id"], c.SecretFields)
			}
		}
	}
}
