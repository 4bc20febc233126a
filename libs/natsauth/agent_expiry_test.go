package natsauth_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/configsync/configsync/libs/natsauth"
)

// TestExpiringAgentUsers: IssueAgentUntil's JWT carries the expiry and the server refuses it once past;
// RenewAgent signs a later JWT for the same key that connects with the agent's own seed; InSync tells
// the servers' account apart from one with another revocation list or another signer.
func TestExpiringAgentUsers(t *testing.T) {
	a, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	ns := startServer(t, a)
	issuer := a.Issuer()
	exp := time.Now().Add(2 * time.Second).Truncate(time.Second)
	creds, err := issuer.IssueAgentUntil("agent-a", exp)
	if err != nil {
		t.Fatal(err)
	}
	token, _ := jwt.ParseDecoratedJWT(creds.File)
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil || uc.Expires != exp.Unix() || uc.Subject != creds.UserPublicKey {
		t.Fatalf("issued claims %+v, %v", uc, err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "a.creds")
	if err := os.WriteFile(file, creds.File, 0o600); err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(exp.Add(1100 * time.Millisecond)) {
		time.Sleep(100 * time.Millisecond)
	}
	if nc, err := nats.Connect(ns.ClientURL(), nats.UserCredentials(file), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("an expired agent JWT was accepted")
	}

	later := time.Now().Add(time.Hour)
	renewed, err := issuer.RenewAgent("agent-a", creds.UserPublicKey, later)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := nkeys.ParseDecoratedNKey(creds.File)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := seed.Seed()
	renewedFile, err := jwt.FormatUserConfig(renewed, raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, renewedFile, 0o600); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.UserCredentials(file), nats.NoReconnect())
	if err != nil {
		t.Fatalf("renewed JWT refused: %v", err)
	}
	nc.Close()
	if _, err := issuer.RenewAgent("agent-a", creds.UserPublicKey, time.Time{}); err == nil {
		t.Fatal("a renewal without expiry accepted")
	}
	if _, err := issuer.RenewAgent("agent-a", a.AccountPublicKey(), later); err == nil {
		t.Fatal("a renewal for a non-user key accepted")
	}

	admin := a.AccountAdmin()
	revoked := map[string]time.Time{creds.UserPublicKey: later}
	held, err := admin.AccountJWT(revoked)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := admin.InSync(held, revoked); err != nil || !ok {
		t.Fatalf("identical account not in sync: %v", err)
	}
	if ok, _ := admin.InSync(held, nil); ok {
		t.Fatal("an account with another revocation list is in sync")
	}
	other, _ := natsauth.NewAuthority()
	foreign, _ := other.AccountAdmin().AccountJWT(revoked)
	if ok, _ := admin.InSync(foreign, revoked); ok {
		t.Fatal("another domain's account is in sync")
	}
	if ok, _ := admin.InSync("", revoked); ok {
		t.Fatal("no account is in sync")
	}
}
