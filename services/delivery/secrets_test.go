package delivery_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// Planted credential secrets: they must reach agents (fetch replies and pushes) and nothing else.
const (
	plantedMySQL   = "pl4nted-mysql-S3CRET-a1f0"
	plantedRedis   = "pl4nted-redis-S3CRET-b2e1"
	plantedRotated = "pl4nted-rotated-S3CRET-c3d2"
	plantedDeleted = "pl4nted-deleted-S3CRET-d4c3"
)

// Fetches and pushes through the real resolver and credential services, with every service logging
// at debug into the captured logger, on the happy path and on the failure paths (a deleted credential,
// a rotation): the secrets reach the agents and no log entry, message or field, ever holds one.
func TestSecretsNeverLogged(t *testing.T) {
	s := newStack(t, 4) // hosts 0, 1 and 3 online
	if !s.log.Core().Enabled(zapcore.DebugLevel) {
		t.Fatal("the captured logger is not at debug level")
	}
	s.startResolver(t)
	s.startCredential(t)
	s.startDelivery(t, testDeliveryConfig(t))

	mysql := s.createCredential(t, s.clientID, "mysql", map[string]string{"username": "monitor", "password": plantedMySQL})
	redis := s.createCredential(t, s.clientID, "redis", map[string]string{"password": plantedRedis})
	gone := s.createCredential(t, s.clientID, "gone", map[string]string{"password": plantedDeleted})
	credentialCall(t, s, protocol.CredentialDeleteSubject, protocol.CredentialRef{ClientID: s.clientID.String(), ID: gone})

	ok, broken := s.hosts[0], s.hosts[1]
	v := s.putEnv(t, "collectors", fmt.Sprintf(`[{"type":"mysql","name":"primary","host":"db","port":3306,"credential_id":%q},`+
		`{"type":"redis","name":"cache","host":"r","port":6379,"credential_id":%q}]`, mysql, redis))
	s.putHost(t, broken, "collectors", fmt.Sprintf(`[{"type":"postgres","name":"old","host":"pg","port":5432,"credential_id":%q}]`, gone))

	// Fetch: injected for one host, refused (and logged) for the one whose credential is gone.
	if r := s.fetch(t, ok.agent, ok.agent); !strings.Contains(string(r.Configs["collectors"]), plantedMySQL) ||
		!strings.Contains(string(r.Configs["collectors"]), plantedRedis) {
		t.Fatalf("fetch did not inject the secrets: %+v", r)
	}
	if r := s.fetch(t, broken.agent, broken.agent); r.TypeErrors["collectors"].Code != protocol.CodeCredentialFailed {
		t.Fatalf("fetch with a deleted credential: %+v", r)
	}

	// Push: the same, through the config-change consumer.
	s.changed(t, protocol.ConfigChanged{Scope: protocol.ScopeEnvironment, ConfigType: "collectors", Version: v})
	s.eventsSettled(t)
	if cmds := s.fleet.commands(ok.agent, "collectors"); len(cmds) != 1 || !strings.Contains(string(cmds[0].Payload), plantedRedis) {
		t.Fatalf("push did not inject the secrets: %+v", cmds)
	}
	if cmds := s.fleet.commands(broken.agent, "collectors"); len(cmds) != 0 {
		t.Fatalf("host with a deleted credential was pushed %+v", cmds)
	}

	// Rotation, then a push and a fetch with the new secret.
	credentialCall(t, s, protocol.CredentialRotateSubject, protocol.CredentialRotateRequest{
		ClientID: s.clientID.String(), ID: redis, Secret: map[string]string{"password": plantedRotated}})
	s.fleet.reset()
	v = s.putEnv(t, "collectors", fmt.Sprintf(`[{"type":"redis","name":"cache","host":"r","port":6379,"credential_id":%q}]`, redis))
	s.changed(t, protocol.ConfigChanged{Scope: protocol.ScopeEnvironment, ConfigType: "collectors", Version: v})
	s.eventsSettled(t)
	if cmds := s.fleet.commands(ok.agent, "collectors"); len(cmds) != 1 || !strings.Contains(string(cmds[0].Payload), plantedRotated) {
		t.Fatalf("push after rotation: %+v", cmds)
	}
	if r := s.fetch(t, ok.agent, ok.agent); !strings.Contains(string(r.Configs["collectors"]), plantedRotated) {
		t.Fatalf("fetch after rotation: %+v", r)
	}

	// The failure paths did log; none of it, nor anything else, holds a secret.
	if s.logs.FilterMessage("push: hosts skipped, their config cannot be delivered").Len() == 0 ||
		s.logs.FilterMessage("fetch: collector credentials failed, collectors withheld").Len() == 0 {
		t.Fatal("the credential failures were not logged")
	}
	assertSecretsNotLogged(t, s.logs, plantedMySQL, plantedRedis, plantedRotated, plantedDeleted)
}

// credentialCall sends a management request to the credential service and fails on an error reply.
func credentialCall(t *testing.T, s *stack, subject string, req any) {
	t.Helper()
	msg := testinfra.RequestJSON(t, s.nc, subject, req, 10*time.Second)
	var reply struct {
		Error *protocol.Error `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &reply); err == nil && reply.Error != nil {
		t.Fatalf("%s: %+v", subject, reply.Error)
	}
}

// assertSecretsNotLogged checks that something was logged (else the check would prove nothing) and
// that no entry holds a secret (testinfra.AssertNotLogged).
func assertSecretsNotLogged(t *testing.T, logs *observer.ObservedLogs, secrets ...string) {
	t.Helper()
	if len(logs.All()) == 0 {
		t.Fatal("nothing was logged: the check would prove nothing")
	}
	testinfra.AssertNotLogged(t, logs, secrets...)
}
