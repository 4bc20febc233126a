package account_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/natsauth/natsserver"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/credential/internal/account"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func writeFile(t *testing.T, dir, name string, data []byte, mode os.FileMode) string {
	t.Helper()
	return testinfra.WriteFile(t, filepath.Join(dir, name), data, mode)
}

// TestCustodianUpdatesTheAccount: the credential service, holding only the account signer document,
// answers account updates: a forced one revokes an agent on the real operator-mode server; an
// unforced one pushes only when the servers' account differs (after someone overwrote it) — and a
// malformed request or the wrong documents are refused.
func TestCustodianUpdatesTheAccount(t *testing.T) {
	a, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ns := testinfra.NATS(t, testinfra.WithServerOptions(func(o *server.Options) {
		if err := natsserver.Configure(o, a, filepath.Join(dir, "accounts")); err != nil {
			t.Fatal(err)
		}
	}))
	svcCreds, _ := a.ServiceCreds("credential")
	sysCreds, _ := a.SystemCreds("credential")
	svcFile := writeFile(t, dir, "svc.creds", svcCreds.File, 0o600)
	sysFile := writeFile(t, dir, "sys.creds", sysCreds.File, 0o600)
	nc := ns.Connect(t, nats.UserCredentials(svcFile), nats.CustomInboxPrefix(natsauth.ServiceInboxPrefix(natsauth.CredentialService)))
	// config-api's user is the one allowed to ask (natsauth.ServicePermissions).
	apiCreds, _ := a.ServiceCreds(natsauth.ConfigAPIService)
	api := ns.Connect(t, nats.UserCredentials(writeFile(t, dir, "api.creds", apiCreds.File, 0o600)),
		nats.CustomInboxPrefix(natsauth.ServiceInboxPrefix(natsauth.ConfigAPIService)))

	signerDoc, _ := json.Marshal(a.AccountSignerSeeds())
	fullDoc, _ := json.Marshal(a.Seeds())
	issuerDoc, _ := json.Marshal(map[string]string{"account_public_key": a.AccountPublicKey(), "agent_signer": a.AgentSignerSeed()})
	for name, tc := range map[string]struct {
		doc  []byte
		mode os.FileMode
		sys  string
		want string
	}{
		"full seeds":     {fullDoc, 0o600, sysFile, "full seeds"},
		"issuer":         {issuerDoc, 0o600, sysFile, "agent_signer"},
		"world-readable": {signerDoc, 0o644, sysFile, "readable by everyone"},
		"no system user": {signerDoc, 0o600, "", "NATS_SYSTEM_CREDS"},
	} {
		if _, err := account.Load(writeFile(t, dir, "bad.json", tc.doc, tc.mode), tc.sys, nc, time.Second); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error mentioning %q", name, err, tc.want)
		}
	}
	c, err := account.Load(writeFile(t, dir, "signer.json", signerDoc, 0o640), sysFile, nc, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := account.Serve(nc, c, 10*time.Second, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	agentCreds, err := a.Issuer().IssueAgentUntil("agent-a", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	agent, err := nats.Connect(ns.URL(), nats.UserCredentials(writeFile(t, dir, "agent.creds", agentCreds.File, 0o600)),
		nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()

	ask := func(req any) protocol.AccountUpdateReply {
		t.Helper()
		data, _ := json.Marshal(req)
		msg, err := api.Request(protocol.AccountUpdateSubject, data, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var reply protocol.AccountUpdateReply
		if err := json.Unmarshal(msg.Data, &reply); err != nil {
			t.Fatal(err)
		}
		return reply
	}
	revoked := map[string]int64{agentCreds.UserPublicKey: time.Now().Add(time.Hour).Unix()}
	if r := ask(protocol.AccountUpdateRequest{Revocations: revoked, Force: true}); r.Error != nil || !r.Pushed {
		t.Fatalf("forced update: %+v", r)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked agent is still connected")
	}
	if r := ask(protocol.AccountUpdateRequest{Revocations: revoked}); r.Error != nil || r.Pushed {
		t.Fatalf("an update that changes nothing pushed: %+v", r)
	}
	// Someone pushes an account without the revocation: the next unforced update restores it.
	sys, err := nats.Connect(ns.URL(), nats.UserCredentials(sysFile))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if err := a.AccountAdmin().Revoke(sys, nil); err != nil {
		t.Fatal(err)
	}
	if r := ask(protocol.AccountUpdateRequest{Revocations: revoked}); r.Error != nil || !r.Pushed {
		t.Fatalf("reconcile after an overwrite: %+v", r)
	}
	held, err := natsauth.LookupAccount(sys, a.AccountPublicKey(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := jwt.DecodeAccountClaims(held)
	if err != nil || !ac.Revocations.IsRevoked(agentCreds.UserPublicKey, time.Now()) {
		t.Fatalf("the servers' account does not revoke the agent: %v", err)
	}
	if r := ask(map[string]any{"revocations": revoked, "sneaky": true}); r.Error == nil || r.Error.Code != protocol.CodeInvalidRequest {
		t.Fatalf("malformed request: %+v", r)
	}
	_ = context.Background
}

// TestCustodianOverTLS: on servers that serve TLS only, the custodian's system connection verifies
// them with the service connection's CA and pushes the account.
func TestCustodianOverTLS(t *testing.T) {
	a, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ns := testinfra.NATS(t, testinfra.WithTLS(), testinfra.WithServerOptions(func(o *server.Options) {
		if err := natsserver.Configure(o, a, filepath.Join(dir, "accounts")); err != nil {
			t.Fatal(err)
		}
	}))
	svcCreds, _ := a.ServiceCreds(natsauth.CredentialService)
	sysCreds, _ := a.SystemCreds("credential")
	nc := ns.Connect(t, nats.UserCredentials(writeFile(t, dir, "svc.creds", svcCreds.File, 0o600)),
		nats.CustomInboxPrefix(natsauth.ServiceInboxPrefix(natsauth.CredentialService)))
	signerDoc, _ := json.Marshal(a.AccountSignerSeeds())
	c, err := account.Load(writeFile(t, dir, "signer.json", signerDoc, 0o600), writeFile(t, dir, "sys.creds", sysCreds.File, 0o600), nc, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	agentCreds, err := a.Issuer().IssueAgentUntil("agent-a", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pushed, err := c.Update(ctx, map[string]time.Time{agentCreds.UserPublicKey: time.Now().Add(time.Hour)}, true)
	if err != nil || !pushed {
		t.Fatalf("forced update over TLS: pushed %t, %v", pushed, err)
	}
	sys := ns.Connect(t, nats.UserCredentials(filepath.Join(dir, "sys.creds")))
	held, err := natsauth.LookupAccount(sys, a.AccountPublicKey(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ac, err := jwt.DecodeAccountClaims(held); err != nil || !ac.Revocations.IsRevoked(agentCreds.UserPublicKey, time.Now()) {
		t.Fatalf("the servers' account does not carry the revocation: %v", err)
	}
}
