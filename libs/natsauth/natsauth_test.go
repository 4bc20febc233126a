package natsauth_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/natsauth/natsserver"
	"github.com/configsync/configsync/libs/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startServer(t *testing.T, a *natsauth.Authority) *server.Server {
	t.Helper()
	dir := t.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "js"), NoSigs: true, NoLog: os.Getenv("NATS_DEBUG") == "", Debug: true}
	if err := natsserver.Configure(opts, a, filepath.Join(dir, "accounts")); err != nil {
		t.Fatal(err)
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("NATS_DEBUG") != "" {
		ns.ConfigureLogger()
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
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
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		a.mu.Lock()
		for _, e := range a.errs {
			if strings.Contains(e, substr) {
				a.mu.Unlock()
				return
			}
		}
		a.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no permission violation mentioning %q; got %v", substr, a.errs)
}

func connect(t *testing.T, ns *server.Server, creds natsauth.Creds, opts ...nats.Option) *nats.Conn {
	t.Helper()
	file := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(file, creds.File, 0o600); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), append([]nats.Option{nats.UserCredentials(file)}, opts...)...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func TestAgentIsolation(t *testing.T) {
	a, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	ns := startServer(t, a)
	issuer := a.Issuer()
	credsA, err := issuer.IssueAgent("agent-a")
	if err != nil {
		t.Fatal(err)
	}
	svcCreds, err := a.ServiceCreds("delivery")
	if err != nil {
		t.Fatal(err)
	}
	svc := connect(t, ns, svcCreds)
	var errsA asyncErrors
	agentA := connect(t, ns, credsA, nats.ErrorHandler(errsA.handler), nats.CustomInboxPrefix(protocol.InboxPrefix("agent-a")))

	// Allowed: its own command subject, its own request/reply, its own publishes.
	own, err := agentA.SubscribeSync(protocol.CommandSubject("agent-a"))
	if err != nil {
		t.Fatal(err)
	}
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
		sub, err := agentA.SubscribeSync(subj)
		if err != nil {
			t.Fatal(err)
		}
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
	spy, _ := svc.SubscribeSync(protocol.HeartbeatSubject("agent-b"))
	svc.Flush()
	if err := agentA.Publish(protocol.HeartbeatSubject("agent-b"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	errsA.waitFor(t, "Publish to \""+protocol.HeartbeatSubject("agent-b")+"\"")
	if m, err := spy.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("forged heartbeat delivered: %q", m.Data)
	}
}

func TestRevokeDisconnectsAgent(t *testing.T) {
	a, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	ns := startServer(t, a)
	credsA, err := a.Issuer().IssueAgent("agent-a")
	if err != nil {
		t.Fatal(err)
	}
	sysCreds, err := a.SystemCreds("config-api")
	if err != nil {
		t.Fatal(err)
	}
	sys := connect(t, ns, sysCreds)
	closed := make(chan struct{})
	agentA := connect(t, ns, credsA, nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err := agentA.Publish(protocol.HeartbeatSubject("agent-a"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := a.Revoke(sys, map[string]time.Time{credsA.UserPublicKey: time.Now().Add(time.Second)}); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("revoked agent still connected")
	}
	file := filepath.Join(t.TempDir(), "a.creds")
	os.WriteFile(file, credsA.File, 0o600)
	if nc, err := nats.Connect(ns.ClientURL(), nats.UserCredentials(file), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("revoked agent could connect again")
	}
	// Another agent issued afterwards is unaffected.
	credsB, _ := a.Issuer().IssueAgent("agent-b")
	connect(t, ns, credsB)
}

func TestSeedsRoundTrip(t *testing.T) {
	a, _ := natsauth.NewAuthority()
	b, err := natsauth.LoadAuthority(a.Seeds())
	if err != nil {
		t.Fatal(err)
	}
	if a.AccountPublicKey() != b.AccountPublicKey() || a.OperatorPublicKey() != b.OperatorPublicKey() {
		t.Fatal("authority changed across seeds")
	}
	iss, err := natsauth.NewIssuer(a.AccountPublicKey(), a.AgentSignerSeed())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := iss.IssueAgent("bad id with spaces"); err == nil {
		t.Fatal("invalid agent id accepted")
	}
	if _, err := natsauth.NewIssuer("not-a-key", a.AgentSignerSeed()); err == nil {
		t.Fatal("bad account key accepted")
	}
}
