package testinfra

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

func TestNATSJetStreamSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	srv := NATS(t)
	url := srv.URL()
	if !strings.HasPrefix(srv.StoreDir(), os.TempDir()) && !strings.Contains(srv.StoreDir(), t.Name()) {
		t.Logf("store dir %s", srv.StoreDir())
	}
	reconnected := make(chan struct{}, 1)
	nc := srv.Connect(t, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.one", []byte("1")); err != nil {
		t.Fatal(err)
	}

	srv.Restart(t)
	if srv.URL() != url {
		t.Fatalf("restart moved the server from %s to %s", url, srv.URL())
	}
	<-reconnected // the client finds the restarted server on the same port
	st, err := js.Stream(ctx, "T")
	if err != nil {
		t.Fatalf("stream lost across restart: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream has %d messages after restart, want 1", info.State.Msgs)
	}
}

func TestNATSShutdownIsIdempotent(t *testing.T) {
	srv := NATS(t)
	srv.Shutdown()
	srv.Shutdown()
	if srv.Server() != nil {
		t.Fatal("Server() after Shutdown should be nil")
	}
	if _, err := nats.Connect(srv.URL(), nats.Timeout(200*time.Millisecond)); err == nil {
		t.Fatal("connected to a shut down server")
	}
}

func TestNATSWithoutJetStream(t *testing.T) {
	srv := NATS(t, WithoutJetStream())
	if err := jetStreamAccountInfo(t, srv.Connect(t)); err == nil {
		t.Fatal("JetStream answered on a server started WithoutJetStream")
	}
}

func TestNATSUsersAndPermissions(t *testing.T) {
	srv := NATS(t, WithUsers([]*server.User{
		{Username: "agent-a", Password: "pa", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"configsync.agent.a.>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"configsync.cmd.a"}},
		}},
		{Username: "backend", Password: "pb"},
	}))
	if _, err := nats.Connect(srv.URL()); err == nil {
		t.Fatal("anonymous connection accepted on a server with users")
	}
	asyncErr := make(chan error, 4)
	agent := srv.Connect(t, nats.UserInfo("agent-a", "pa"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { asyncErr <- err }))
	backend := srv.Connect(t, nats.UserInfo("backend", "pb"))

	// Allowed: publish under its own prefix.
	sub := subscribeFlushed(t, backend, "configsync.agent.>")
	if err := agent.Publish("configsync.agent.a.heartbeat", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("allowed publish not delivered: %v", err)
	}
	// Denied: subscribing to another agent's commands.
	subscribeFlushed(t, agent, "configsync.cmd.b")
	if err := <-asyncErr; !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("want a permissions violation, got %v", err)
	}
}

func TestNATSAccountsIsolateAndHaveJetStream(t *testing.T) {
	a, b := server.NewAccount("A"), server.NewAccount("B")
	srv := NATS(t, WithAccounts(a, b), WithUsers([]*server.User{
		{Username: "ua", Password: "p", Account: a},
		{Username: "ub", Password: "p", Account: b},
	}))
	ca := srv.Connect(t, nats.UserInfo("ua", "p"))
	cb := srv.Connect(t, nats.UserInfo("ub", "p"))
	sub := subscribeFlushed(t, cb, "x")
	if err := ca.Publish("x", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := ca.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(200 * time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("a message crossed accounts: %v", err)
	}
	js, err := jetstream.New(ca)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}}); err != nil {
		t.Fatalf("JetStream in account A: %v", err)
	}
	// Accounts are rebuilt on restart.
	srv.Restart(t)
	srv.Connect(t, nats.UserInfo("ub", "p"))
}

func TestNATSConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nats.conf")
	conf := `
port: 4222
authorization {
  users = [
    { user: svc, password: s3cret, permissions: { publish: ["configsync.>", "$JS.API.>"], subscribe: ["configsync.>", "_INBOX.>"] } }
  ]
}
`
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := NATS(t, WithConfigFile(path))
	if strings.HasSuffix(srv.URL(), ":4222") {
		t.Fatal("the config file's fixed port was used; tests need a random one")
	}
	if err := jetStreamAccountInfo(t, srv.Connect(t, nats.UserInfo("svc", "s3cret"))); err != nil {
		t.Fatalf("JetStream not enabled from a config file: %v", err)
	}
	if _, err := nats.Connect(srv.URL(), nats.UserInfo("svc", "wrong")); err == nil {
		t.Fatal("wrong password accepted")
	}
}

func TestNATSOperatorMode(t *testing.T) {
	opKP, _ := nkeys.CreateOperator()
	opPub, _ := opKP.PublicKey()
	sysKP, _ := nkeys.CreateAccount()
	sysPub, _ := sysKP.PublicKey()
	accKP, _ := nkeys.CreateAccount()
	accPub, _ := accKP.PublicKey()
	userKP, _ := nkeys.CreateUser()
	userPub, _ := userKP.PublicKey()
	userSeed, _ := userKP.Seed()

	oc := jwt.NewOperatorClaims(opPub)
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	sysJWT, err := jwt.NewAccountClaims(sysPub).Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	ac := jwt.NewAccountClaims(accPub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accJWT, err := ac.Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	uc := jwt.NewUserClaims(userPub)
	uc.IssuerAccount = accPub
	uc.Pub.Allow.Add("configsync.agent.a1.>", "$JS.API.>")
	uc.Sub.Allow.Add("configsync.cmd.a1", "_INBOX.>")
	userJWT, err := uc.Encode(accKP)
	if err != nil {
		t.Fatal(err)
	}

	srv := NATS(t, WithOperator(opJWT, sysJWT, accJWT))
	if _, err := nats.Connect(srv.URL()); err == nil {
		t.Fatal("connection without credentials accepted in operator mode")
	}
	if err := jetStreamAccountInfo(t, srv.Connect(t, nats.UserJWTAndSeed(userJWT, string(userSeed)))); err != nil {
		t.Fatalf("JetStream from the account JWT limits: %v", err)
	}
}

// A WithTLS server serves TLS only: a client trusting its CA connects (also after a restart), one that
// does not is refused, and a plaintext client speaking the protocol on the raw socket is refused.
func TestNATSWithTLS(t *testing.T) {
	srv := NATS(t, WithTLS())
	nc := srv.Connect(t)
	if !nc.TLSRequired() {
		t.Fatal("the server does not require TLS")
	}
	if _, err := nc.TLSConnectionState(); err != nil {
		t.Fatalf("not a TLS connection: %v", err)
	}
	if _, err := nats.Connect(srv.URL(), nats.NoReconnect()); err == nil {
		t.Fatal("a client that does not trust the CA connected")
	}

	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(srv.URL(), "nats://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil || !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("INFO %q, %v", info, err)
	}
	if _, err := conn.Write([]byte("CONNECT {\"verbose\":false}\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	var readErr error
	for readErr == nil {
		var line string
		line, readErr = r.ReadString('\n')
		got.WriteString(line)
	}
	// The server takes the plaintext for a broken TLS handshake and closes the connection.
	var ne net.Error
	if strings.Contains(got.String(), "PONG") || errors.As(readErr, &ne) && ne.Timeout() {
		t.Fatalf("a plaintext client was served or kept: %q, %v", got.String(), readErr)
	}

	srv.Restart(t)
	again := srv.Connect(t)
	if err := again.Flush(); err != nil {
		t.Fatalf("TLS after a restart: %v", err)
	}
}

// subscribeFlushed subscribes nc to subject and flushes, so the server has the subscription (or has
// refused it) before the test goes on.
func subscribeFlushed(t *testing.T, nc *nats.Conn, subject string) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// jetStreamAccountInfo asks for the JetStream account info of nc's account: an error when JetStream is
// not enabled for it.
func jetStreamAccountInfo(t *testing.T, nc *nats.Conn) error {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}
