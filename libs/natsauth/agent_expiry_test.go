package natsauth_test

import (
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/configsync/configsync/libs/natsauth"
)

// TestExpiringAgentUsers: IssueAgentUntil's JWT carries the expiry and the server refuses it once past;
// RenewAgent signs a later JWT for the same key that connects with the agent's own seed; InSync tells
// the servers' account apart from one with another revocation list or another signer.
func TestExpiringAgentUsers(t *testing.T) {
	a := must(natsauth.NewAuthority())
	ns := startServer(t, a)
	issuer := a.Issuer()
	exp := time.Now().Add(2 * time.Second).Truncate(time.Second)
	creds := must(issuer.IssueAgentUntil("agent-a", exp))
	token, _ := jwt.ParseDecoratedJWT(creds.File)
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil || uc.Expires != exp.Unix() || uc.Subject != creds.UserPublicKey {
		t.Fatalf("issued claims %+v, %v", uc, err)
	}
	for time.Now().Before(exp.Add(1100 * time.Millisecond)) {
		time.Sleep(100 * time.Millisecond)
	}
	if dial(t, ns, creds.File) == nil {
		t.Fatal("an expired agent JWT was accepted")
	}

	later := time.Now().Add(time.Hour)
	renewed := must(issuer.RenewAgent("agent-a", creds.UserPublicKey, later))
	seed := must(nkeys.ParseDecoratedNKey(creds.File))
	raw, _ := seed.Seed()
	renewedFile := must(jwt.FormatUserConfig(renewed, raw))
	if err := dial(t, ns, renewedFile); err != nil {
		t.Fatalf("renewed JWT refused: %v", err)
	}
	if _, err := issuer.RenewAgent("agent-a", creds.UserPublicKey, time.Time{}); err == nil {
		t.Fatal("a renewal without expiry accepted")
	}
	if _, err := issuer.RenewAgent("agent-a", a.AccountPublicKey(), later); err == nil {
		t.Fatal("a renewal for a non-user key accepted")
	}

	admin := a.AccountAdmin()
	revoked := map[string]time.Time{creds.UserPublicKey: later}
	held := must(admin.AccountJWT(revoked))
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
