package credsrenew

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.uber.org/goleak"

	"github.com/configsync/configsync/libs/protocol"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// domain is a NATS operator-mode trust chain: the server enforces user JWT signatures and expiry.
type domain struct {
	account nkeys.KeyPair
	accPub  string
	srv     *server.Server
}

func newDomain(t *testing.T) *domain {
	t.Helper()
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	acc, _ := nkeys.CreateAccount()
	accPub, _ := acc.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	opJWT, err := oc.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	ac := jwt.NewAccountClaims(accPub)
	accJWT, err := ac.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	trusted, err := jwt.DecodeOperatorClaims(opJWT)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	if err := resolver.Store(accPub, accJWT); err != nil {
		t.Fatal(err)
	}
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TrustedOperators: []*jwt.OperatorClaims{trusted}, AccountResolver: resolver}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return &domain{account: acc, accPub: accPub, srv: srv}
}

// userJWT signs a JWT for the user key pub named name, expiring at exp (zero: never).
func (d *domain) userJWT(t *testing.T, pub, name string, exp time.Time) string {
	t.Helper()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	if !exp.IsZero() {
		uc.Expires = exp.Unix()
	}
	token, err := uc.Encode(d.account)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestRenewalKeepsTheAgentConnected: a JWT that expires in seconds is renewed before it does (same
// key; the seed never leaves), the renewed creds file lands in the data directory with mode 0600, the
// connection moves to the new JWT, and it is still usable after the first JWT has expired.
func TestRenewalKeepsTheAgentConnected(t *testing.T) {
	d := newDomain(t)
	const agentID = "agent-1"
	user, _ := nkeys.CreateUser()
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	const lifetime = 10 * time.Second
	first := time.Now().Add(lifetime)
	dir := t.TempDir()
	configured := filepath.Join(dir, "configured.creds")
	if err := os.WriteFile(configured, Format(d.userJWT(t, pub, agentID, first), seed), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}

	// The backend: answers renewals for the agent's key with a JWT one lifetime from now.
	backendUser, _ := nkeys.CreateUser()
	bpub, _ := backendUser.PublicKey()
	bseed, _ := backendUser.Seed()
	backendCreds := filepath.Join(dir, "backend.creds")
	if err := os.WriteFile(backendCreds, Format(d.userJWT(t, bpub, "backend", time.Time{}), bseed), 0o600); err != nil {
		t.Fatal(err)
	}
	backend, err := nats.Connect(d.srv.ClientURL(), nats.UserCredentials(backendCreds))
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	var renewals atomic.Int32
	if _, err := backend.Subscribe(protocol.CredsRenewSubjectAll, func(m *nats.Msg) {
		var req protocol.CredsRenewRequest
		_ = json.Unmarshal(m.Data, &req)
		reply := protocol.CredsRenewReply{Error: protocol.Errorf(protocol.CodeNotFound, "unknown key")}
		if req.PublicKey == pub && req.AgentID == agentID {
			exp := time.Now().Add(lifetime)
			reply = protocol.CredsRenewReply{JWT: d.userJWT(t, pub, agentID, exp), ExpiresAt: exp}
			renewals.Add(1)
		}
		data, _ := json.Marshal(reply)
		_ = m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := backend.Flush(); err != nil {
		t.Fatal(err)
	}

	r, err := Open(configured, dataDir, agentID, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	// As the agent's transport connects: it never gives up after authentication errors.
	nc, err := nats.Connect(d.srv.ClientURL(), r.Option(), nats.CustomInboxPrefix(protocol.InboxPrefix(agentID)),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.IgnoreAuthErrorAbort())
	if err != nil {
		t.Fatalf("agent connect: %v", err)
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.Run(ctx, nc, func() { _ = nc.ForceReconnect() }) }()
	defer func() { cancel(); wg.Wait() }()

	deadline := time.Now().Add(60 * time.Second)
	for renewals.Load() < 2 || time.Now().Before(first.Add(time.Second)) {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals by the deadline", renewals.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Past the first JWT's expiry, and renewed twice: the connection still works. Each renewal forces a
	// reconnect (onRenewed), and nats.go fails a flush in flight at a reconnect with "connection closed"
	// although the connection is not closed; so a flush is retried while the connection lives, and the
	// test fails only if it closed for good or no round trip succeeds by the deadline.
	flushBy := time.Now().Add(30 * time.Second)
	for {
		waitConnected(t, nc)
		err := nc.Publish(protocol.HeartbeatSubject(agentID), []byte(`{}`))
		if err == nil {
			err = nc.FlushTimeout(5 * time.Second)
		}
		if err == nil {
			break
		}
		if nc.IsClosed() || time.Now().After(flushBy) {
			t.Fatalf("flush after renewals: %v (closed: %v)", err, nc.IsClosed())
		}
		time.Sleep(50 * time.Millisecond)
	}
	renewed := filepath.Join(dataDir, RenewedFile)
	info, err := os.Stat(renewed)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("renewed creds file: %v %v", info, err)
	}
	c, err := readCreds(renewed)
	if err != nil || c.PublicKey != pub || !c.Expires.After(first) {
		t.Fatalf("renewed creds: %+v %v", c, err)
	}
	if got := Choose(configured, dataDir, agentID, time.Now()); got != renewed {
		t.Fatalf("Choose picked %s, want the renewed file", got)
	}
	// The renewer keeps renewing (10s lifetimes): stop it first, so no write is in flight when the
	// directory is checked for temporary files an ended write left behind.
	cancel()
	wg.Wait()
	if leftovers, _ := filepath.Glob(filepath.Join(dataDir, ".nats-creds-*")); len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
}

func waitConnected(t *testing.T, nc *nats.Conn) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !nc.IsConnected() {
		if time.Now().After(deadline) {
			t.Fatalf("not connected: %v", nc.LastError())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fakeCreds is a creds file whose JWT carries the given claims (unsigned: Choose reads, never verifies).
func fakeCreds(t *testing.T, kp nkeys.KeyPair, name string, iat, exp time.Time) []byte {
	t.Helper()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	claims := map[string]any{"sub": pub, "name": name, "iat": iat.Unix()}
	if !exp.IsZero() {
		claims["exp"] = exp.Unix()
	}
	payload, _ := json.Marshal(claims)
	enc := base64.RawURLEncoding
	token := enc.EncodeToString([]byte(`{"typ":"JWT","alg":"ed25519-nkey"}`)) + "." + enc.EncodeToString(payload) + "." + enc.EncodeToString([]byte("sig"))
	return Format(token, seed)
}

// TestChoose: the renewed file wins only while it is valid for this agent, unexpired and issued after
// the configured one — so credentials an operator re-issues and installs replace an older renewal.
func TestChoose(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	now := time.Now()
	dir := t.TempDir()
	configured := filepath.Join(dir, "agent.creds")
	renewed := filepath.Join(dir, RenewedFile)
	write := func(path string, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(configured, fakeCreds(t, kp, "a1", now.Add(-time.Hour), now.Add(time.Hour)))
	if got := Choose(configured, dir, "a1", now); got != configured {
		t.Fatalf("no renewed file: %s", got)
	}
	write(renewed, fakeCreds(t, kp, "a1", now.Add(-time.Minute), now.Add(2*time.Hour)))
	if got := Choose(configured, dir, "a1", now); got != renewed {
		t.Fatalf("newer renewed file: %s", got)
	}
	if got := Choose(configured, dir, "a2", now); got != configured {
		t.Fatalf("renewed file of another agent: %s", got)
	}
	if got := Choose(configured, dir, "a1", now.Add(3*time.Hour)); got != configured {
		t.Fatalf("expired renewed file: %s", got)
	}
	other, _ := nkeys.CreateUser()
	write(configured, fakeCreds(t, other, "a1", now, now.Add(time.Hour)))
	if got := Choose(configured, dir, "a1", now); got != configured {
		t.Fatalf("re-issued configured file must win over an older renewal: %s", got)
	}
	write(renewed, []byte("garbage"))
	if got := Choose(configured, dir, "a1", now); got != configured {
		t.Fatalf("broken renewed file: %s", got)
	}
	// A seed that is not the JWT's key is refused.
	token, err := nkeys.ParseDecoratedJWT(fakeCreds(t, kp, "a1", now, now.Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	otherSeed, _ := other.Seed()
	if _, err := Parse(Format(token, otherSeed)); err == nil {
		t.Fatal("a creds file whose seed is another key's parsed")
	}
}
