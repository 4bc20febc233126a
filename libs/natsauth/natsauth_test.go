package natsauth_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.uber.org/goleak"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer starts a nats-server trusting a's operator; NATS_DEBUG=1 prints its debug log.
func startServer(t *testing.T, a *natsauth.Authority) *server.Server {
	t.Helper()
	return startServerWith(t, a, func(o *server.Options) { o.NoLog, o.Debug = os.Getenv("NATS_DEBUG") == "", true })
}

// asyncErrors collects the server's asynchronous errors (permission violations) for one connection.
type asyncErrors struct {
	mu   sync.Mutex
	errs []string
}

func (a *asyncErrors) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, err.Error())
}

func (a *asyncErrors) waitFor(t *testing.T, substr string) {
	t.Helper()
	testinfra.EventuallyNoError(t, 5*time.Second, func() error {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, e := range a.errs {
			if strings.Contains(e, substr) {
				return nil
			}
		}
		return fmt.Errorf("asynchronous errors so far: %v", a.errs)
	}, "a permission violation mentioning %q", substr)
}

func connect(t *testing.T, ns *server.Server, creds natsauth.Creds, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), append([]nats.Option{nats.UserCredentials(credsFile(t, creds.File))}, opts...)...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// dial connects once (no reconnecting) with the creds file holding file, closes the connection and
// returns the error of connecting.
func dial(t *testing.T, ns *server.Server, file []byte) error {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), nats.UserCredentials(credsFile(t, file)), nats.NoReconnect())
	if err == nil {
		nc.Close()
	}
	return err
}

// credsFile writes a creds file into the test's temporary directory and returns its path.
func credsFile(t *testing.T, file []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAgentIsolation(t *testing.T) {
	a := must(natsauth.NewAuthority())
	ns := startServer(t, a)
	issuer := a.Issuer()
	credsA := must(issuer.IssueAgent("agent-a"))
	svcCreds := must(a.ServiceCreds("delivery"))
	svc := connect(t, ns, svcCreds)
	var errsA asyncErrors
	agentA := connect(t, ns, credsA, nats.ErrorHandler(errsA.handler), nats.CustomInboxPrefix(protocol.InboxPrefix("agent-a")))

	// Allowed: its own command subject, its own request/reply, its own publishes.
	own := must(agentA.SubscribeSync(protocol.CommandSubject("agent-a")))
	if _, err := svc.Subscribe(protocol.FetchSubject("agent-a"), func(m *nats.Msg) { m.Respond([]byte(`{"configs":{}}`)) }); err != nil {
		t.Fatal(err)
	}
	svc.Flush()
	if _, err := agentA.Request(protocol.FetchSubject("agent-a"), []byte(`{"agent_id":"agent-a"}`), 2*time.Second); err != nil {
		t.Fatalf("own fetch request denied: %v", err)
	}
	if err := svc.Publish(protocol.CommandSubject("agent-a"), []byte("cmd")); err != nil {
		t.Fatal(err)
	}
	if _, err := own.NextMsg(2 * time.Second); err != nil {
		t.Fatalf("own command not received: %v", err)
	}

	// Denied subscriptions: another agent's commands, everything, every inbox, the JetStream API.
	for _, subj := range []string{protocol.CommandSubject("agent-b"), ">", "_INBOX.>", "$JS.API.>", "configsync.cmd.*", "configsync.agent.agent-b.>"} {
		sub := must(agentA.SubscribeSync(subj))
		errsA.waitFor(t, "Subscription to \""+subj+"\"")
		if err := svc.Publish(protocol.CommandSubject("agent-b"), []byte("secret for b")); err != nil {
			t.Fatal(err)
		}
		svc.Flush()
		if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
			t.Fatalf("agent-a received %q on %s", m.Data, subj)
		}
	}
	// Denied publish: impersonating another agent.
	spy := connect(t, ns, must(a.UnrestrictedCreds("spy")))
	spyB, _ := spy.SubscribeSync(protocol.HeartbeatSubject("agent-b"))
	spy.Flush()
	if err := agentA.Publish(protocol.HeartbeatSubject("agent-b"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	errsA.waitFor(t, "Publish to \""+protocol.HeartbeatSubject("agent-b")+"\"")
	if m, err := spyB.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("forged heartbeat delivered: %q", m.Data)
	}
}

// fromDocument builds what a service builds from its key document: s as JSON, parsed back with
// parse and handed to build (the credential service's AccountAdmin, config-api's Issuer).
func fromDocument[S, T any](s S, parse func([]byte) (S, error), build func(S) (T, error)) T {
	return must(build(must(parse(must(json.Marshal(s))))))
}

func adminFromDocument(s natsauth.AccountSignerSeeds) *natsauth.AccountAdmin {
	return fromDocument(s, natsauth.ParseAccountSignerSeeds, natsauth.NewAccountAdmin)
}

func issuerFromDocument(s natsauth.IssuerSeeds) *natsauth.Issuer {
	return fromDocument(s, natsauth.ParseIssuerSeeds, natsauth.NewIssuerFromSeeds)
}

// TestAccountsSignedByOperatorSigningKey: the operator JWT lists a signing key, every account JWT is
// signed by it (not by the operator's identity key), and a server trusting that operator accepts them.
func TestAccountsSignedByOperatorSigningKey(t *testing.T) {
	a := must(natsauth.NewAuthority())
	opJWT := must(a.OperatorJWT())
	oc := must(jwt.DecodeOperatorClaims(opJWT))
	if len(oc.SigningKeys) != 1 || oc.SigningKeys.Contains(a.OperatorPublicKey()) {
		t.Fatalf("operator signing keys %v: want exactly one, not the identity key", oc.SigningKeys)
	}
	admin := adminFromDocument(a.AccountSignerSeeds())
	fromAdmin := must(admin.AccountJWT(nil))
	fromAuthority := must(a.AccountJWT(nil))
	sysJWT := must(a.SystemAccountJWT())
	for name, token := range map[string]string{"account (authority)": fromAuthority, "account (admin)": fromAdmin, "system account": sysJWT} {
		ac, err := jwt.DecodeAccountClaims(token)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !oc.SigningKeys.Contains(ac.Issuer) {
			t.Errorf("%s JWT issued by %s, not by the operator's signing key", name, ac.Issuer)
		}
	}
	// Both sign the same claims: same account, same scoped agent signer and template.
	accA, _ := jwt.DecodeAccountClaims(fromAuthority)
	accB, _ := jwt.DecodeAccountClaims(fromAdmin)
	scopeA, _ := accA.SigningKeys.GetScope(mustPub(t, a.AgentSignerSeed()))
	scopeB, okB := accB.SigningKeys.GetScope(mustPub(t, a.AgentSignerSeed()))
	if accA.Subject != accB.Subject || accA.Name != accB.Name || !okB || scopeA == nil || scopeB == nil ||
		scopeA.(*jwt.UserScope).Role != scopeB.(*jwt.UserScope).Role || accA.Limits.JetStreamLimits != accB.Limits.JetStreamLimits {
		t.Fatalf("authority and admin sign different account claims:\n%+v\n%+v", accA, accB)
	}

	ns := startServer(t, a)
	svcCreds := must(a.ServiceCreds("ack-ingest"))
	connect(t, ns, svcCreds)
	svc := connect(t, ns, must(a.UnrestrictedCreds("observer")))
	agentCreds := must(issuerFromDocument(a.IssuerSeeds()).IssueAgent("agent-a"))
	agent := connect(t, ns, agentCreds, nats.CustomInboxPrefix(protocol.InboxPrefix("agent-a")))
	beats := must(svc.SubscribeSync(protocol.HeartbeatSubject("agent-a")))
	svc.Flush()
	if err := agent.Publish(protocol.HeartbeatSubject("agent-a"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := beats.NextMsg(2 * time.Second); err != nil {
		t.Fatalf("agent issued by the admin could not publish its heartbeat: %v", err)
	}
}

func mustPub(t *testing.T, seed string) string {
	t.Helper()
	kp := must(nkeys.FromSeed([]byte(seed)))
	pub, _ := kp.PublicKey()
	return pub
}

// TestRevokeDisconnectsAgent pushes the revocation with the narrow AccountAdmin the credential service
// holds, for an agent issued with config-api's narrow issuer.
func TestRevokeDisconnectsAgent(t *testing.T) {
	a := must(natsauth.NewAuthority())
	ns := startServer(t, a)
	admin := adminFromDocument(a.AccountSignerSeeds())
	issuer := issuerFromDocument(a.IssuerSeeds())
	credsA := must(issuer.IssueAgent("agent-a"))
	sysCreds := must(a.SystemCreds("config-api"))
	sys := connect(t, ns, sysCreds)
	closed := make(chan struct{})
	agentA := connect(t, ns, credsA, nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err := agentA.Publish(protocol.HeartbeatSubject("agent-a"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	revoked := map[string]time.Time{credsA.UserPublicKey: time.Now().Add(time.Second)}

	// An account JWT signed by a key the operator does not list takes no effect (the server may still
	// acknowledge the push: it verifies the issuer when it applies the update, and logs the failure).
	other, _ := natsauth.NewAuthority()
	forged := a.AccountSignerSeeds()
	forged.OperatorSigner = other.AccountSignerSeeds().OperatorSigner
	_ = adminFromDocument(forged).Revoke(sys, revoked)
	select {
	case <-closed:
		t.Fatal("a revocation signed by an unknown operator signing key disconnected the agent")
	case <-time.After(500 * time.Millisecond):
	}
	if err := agentA.Flush(); err != nil {
		t.Fatalf("agent lost its connection over an unapplied update: %v", err)
	}

	if err := admin.Revoke(sys, revoked); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("revoked agent still connected")
	}
	if dial(t, ns, credsA.File) == nil {
		t.Fatal("revoked agent could connect again")
	}
	// Another agent issued afterwards is unaffected, and so are the services.
	credsB, _ := issuer.IssueAgent("agent-b")
	connect(t, ns, credsB)
	svcCreds, _ := a.ServiceCreds("delivery")
	connect(t, ns, svcCreds)
}

// docFields returns a document's field names (sorted) and fails on an empty value.
func docFields(t *testing.T, v any) (string, string) {
	t.Helper()
	doc := must(json.Marshal(v))
	var fields map[string]string
	if err := json.Unmarshal(doc, &fields); err != nil {
		t.Fatal(err)
	}
	var names []string
	for k, v := range fields {
		names = append(names, k)
		if v == "" {
			t.Errorf("document field %s is empty", k)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ","), string(doc)
}

// TestIssuerSeedsHoldNoRootKey: config-api's issuer document holds only the account's public key and
// the agent signing key, and the credential service's account signer document only the operator
// signing key and public keys: neither holds a root seed, config-api's holds no key that re-signs the
// account, and the custodian's holds no key that signs users.
func TestIssuerSeedsHoldNoRootKey(t *testing.T) {
	a := must(natsauth.NewAuthority())
	full := a.Seeds()
	issuerFields, issuerDoc := docFields(t, a.IssuerSeeds())
	if issuerFields != "account_public_key,agent_signer" {
		t.Fatalf("issuer document fields %v", issuerFields)
	}
	signerFields, signerDoc := docFields(t, a.AccountSignerSeeds())
	if signerFields != "account_public_key,agent_signer_public_key,operator_signer" {
		t.Fatalf("account signer document fields %v", signerFields)
	}
	for doc, seeds := range map[string]map[string]string{
		issuerDoc: {"operator": full.Operator, "system": full.System, "account": full.Account, "operator signer": full.OperatorSigner},
		signerDoc: {"operator": full.Operator, "system": full.System, "account": full.Account, "agent signer": full.AgentSigner},
	} {
		for name, seed := range seeds {
			// A seed's public key is harmless, but its private part must not appear under any encoding.
			if seed == "" || strings.Contains(doc, seed[3:]) {
				t.Errorf("a document carries (part of) the %s seed: %s", name, doc)
			}
		}
	}
	if got := a.IssuerSeeds(); got.AccountPublicKey != a.AccountPublicKey() || got.AgentSigner != a.AgentSignerSeed() {
		t.Error("issuer document does not name the authority's account and agent signer")
	}

	// The full document is refused with ErrFullSeeds; an issuer document with the operator signer
	// (older ConfigSync) and a signer document with the agent signer seed are refused by name; so is
	// anything with an unknown field.
	fullDoc, _ := json.Marshal(full)
	if _, err := natsauth.ParseIssuerSeeds(fullDoc); !errors.Is(err, natsauth.ErrFullSeeds) {
		t.Fatalf("full seeds document: %v, want ErrFullSeeds", err)
	}
	if _, err := natsauth.ParseAccountSignerSeeds(fullDoc); !errors.Is(err, natsauth.ErrFullSeeds) {
		t.Fatalf("full seeds document as signer: %v, want ErrFullSeeds", err)
	}
	if _, err := natsauth.ParseIssuerSeeds([]byte(`{"account_public_key":"x","agent_signer":"y","operator_signer":"z"}`)); !errors.Is(err, natsauth.ErrOperatorSignerInIssuer) {
		t.Fatalf("older issuer document: %v, want ErrOperatorSignerInIssuer", err)
	}
	if _, err := natsauth.ParseAccountSignerSeeds([]byte(`{"account_public_key":"x","agent_signer":"y","operator_signer":"z"}`)); !errors.Is(err, natsauth.ErrAgentSignerInAccountSigner) {
		t.Fatalf("signer document with the agent signer: %v", err)
	}
	if _, err := natsauth.ParseIssuerSeeds([]byte(`{"account_public_key":"x","agent_signer":"y","extra":"w"}`)); err == nil {
		t.Fatal("unknown field accepted")
	}
	// Keys of the wrong kind are refused: the account seed is no operator signing key.
	swapped := a.AccountSignerSeeds()
	swapped.OperatorSigner = full.Account
	if _, err := natsauth.NewAccountAdmin(swapped); err == nil {
		t.Fatal("an account seed accepted as operator signing key")
	}
}

func TestSeedsRoundTrip(t *testing.T) {
	a, _ := natsauth.NewAuthority()
	b := must(natsauth.LoadAuthority(a.Seeds()))
	if a.AccountPublicKey() != b.AccountPublicKey() || a.OperatorPublicKey() != b.OperatorPublicKey() || a.Seeds() != b.Seeds() {
		t.Fatal("authority changed across seeds")
	}
	iss := must(natsauth.NewIssuer(a.AccountPublicKey(), a.AgentSignerSeed()))
	if _, err := iss.IssueAgent("bad id with spaces"); err == nil {
		t.Fatal("invalid agent id accepted")
	}
	if _, err := natsauth.NewIssuer("not-a-key", a.AgentSignerSeed()); err == nil {
		t.Fatal("bad account key accepted")
	}
}

// TestOlderSeedsUpgrade: a document from before operator signing keys is refused with
// ErrNoOperatorSigner; UpgradeSeeds adds the key and keeps every other one.
func TestOlderSeedsUpgrade(t *testing.T) {
	a, _ := natsauth.NewAuthority()
	old := a.Seeds()
	old.OperatorSigner = ""
	if _, err := natsauth.LoadAuthority(old); !errors.Is(err, natsauth.ErrNoOperatorSigner) {
		t.Fatalf("older seeds: %v, want ErrNoOperatorSigner", err)
	}
	up := must(natsauth.UpgradeSeeds(old))
	b := must(natsauth.LoadAuthority(up))
	if up.Operator != old.Operator || up.System != old.System || up.Account != old.Account || up.AgentSigner != old.AgentSigner || up.OperatorSigner == "" {
		t.Fatal("UpgradeSeeds changed a key other than the operator signer")
	}
	if b.AccountPublicKey() != a.AccountPublicKey() {
		t.Fatal("upgraded authority names another account")
	}
	if again, _ := natsauth.UpgradeSeeds(up); again != up {
		t.Fatal("UpgradeSeeds replaced an existing operator signer")
	}
}

// The creds file issueUser writes is byte for byte what the NATS library's formatter writes, and the
// library parses both parts back.
func TestUserCredsFileMatchesTheLibraryFormat(t *testing.T) {
	a := must(natsauth.NewAuthority())
	for _, name := range []string{"agent-1", "an_agent-with-a-longer-name-0123456789"} {
		creds := must(a.Issuer().IssueAgent(name))
		token := must(jwt.ParseDecoratedJWT(creds.File))
		kp := must(jwt.ParseDecoratedUserNKey(creds.File))
		seed, _ := kp.Seed()
		want := must(jwt.FormatUserConfig(token, seed))
		if !bytes.Equal(creds.File, want) {
			t.Fatalf("creds file differs from jwt.FormatUserConfig:\n%s\nwant:\n%s", creds.File, want)
		}
		if pub, _ := kp.PublicKey(); pub != creds.UserPublicKey {
			t.Fatalf("seed's public key %s, creds say %s", pub, creds.UserPublicKey)
		}
	}
}
