package deploy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/configsync/configsync/deploy/internal/natsbundle"
	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/protocol"
)

// natsNode parses nats/nats-server.conf as node serverName would, with the auth include natsauthgen
// writes (rendered for resolverDir, sharing the authority in authorityDir).
func natsNode(t *testing.T, authorityDir, serverName string) *server.Options {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "auth"), 0o700); err != nil {
		t.Fatal(err)
	}
	seeds, err := os.ReadFile(filepath.Join(authorityDir, natsbundle.AuthorityFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "auth", natsbundle.AuthorityFile), seeds, 0o600); err != nil {
		t.Fatal(err)
	}
	// The same local CA too, as every node mounts the one bundle.
	if err := os.CopyFS(filepath.Join(dir, "auth", natsbundle.TLSDir), os.DirFS(filepath.Join(authorityDir, natsbundle.TLSDir))); err != nil {
		t.Fatal(err)
	}
	res, err := natsbundle.Write(natsbundle.Options{Out: filepath.Join(dir, "auth"), ResolverDir: filepath.Join(dir, "jwt")})
	if err != nil {
		t.Fatal(err)
	}
	if res.AuthorityCreated {
		t.Fatal("natsbundle created a new authority although authority.json existed")
	}
	conf := filepath.Join(dir, "nats-server.conf")
	// The TLS files sit in the auth mount (/etc/nats/auth in the containers): here, dir/auth.
	text := strings.ReplaceAll(natsConfText(t), "/etc/nats/auth/", filepath.Join(dir, "auth")+"/")
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SERVER_NAME", serverName)
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server.conf does not parse: %v", err)
	}
	opts.StoreDir = filepath.Join(dir, "jetstream")
	return opts
}

func TestNATSConfig(t *testing.T) {
	authority := t.TempDir()
	if _, err := natsbundle.Write(natsbundle.Options{Out: authority, ResolverDir: "/data/jwt"}); err != nil {
		t.Fatal(err)
	}
	opts := natsNode(t, authority, "nats-0")
	if opts.ServerName != "nats-0" {
		t.Errorf("server_name = %q, want it from $SERVER_NAME", opts.ServerName)
	}
	if !opts.JetStream {
		t.Error("JetStream is not enabled")
	}
	if opts.Cluster.Name == "" || opts.Cluster.Port == 0 || len(opts.Routes) != 3 {
		t.Errorf("cluster %q port %d with %d routes, want a named cluster with 3 routes", opts.Cluster.Name, opts.Cluster.Port, len(opts.Routes))
	}
	if len(opts.TrustedOperators) != 1 || opts.SystemAccount == "" {
		t.Errorf("operator mode: %d trusted operators, system account %q", len(opts.TrustedOperators), opts.SystemAccount)
	}
	if opts.TLSConfig == nil || opts.AllowNonTLS {
		t.Error("the client port does not require TLS")
	}
	if opts.Cluster.TLSConfig == nil || opts.Cluster.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Error("cluster routes are not TLS with verified peers")
	}
	if _, ok := opts.AccountResolver.(*server.DirAccResolver); !ok {
		t.Errorf("account resolver is %T, want the full (directory) resolver", opts.AccountResolver)
	}
	// The server accepts the whole configuration (validation happens in NewServer, nothing binds).
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats-server rejects the configuration: %v", err)
	}
	s.Shutdown()
}

// TestNATSClusterWithGeneratedAuth runs the configuration as a real 3-node JetStream cluster in this
// process (ports and routes moved to loopback, everything else as deployed): a service user creates an
// R3 stream, an agent user reaches its own subjects and nothing else.
func TestNATSClusterWithGeneratedAuth(t *testing.T) {
	authority := t.TempDir()
	if _, err := natsbundle.Write(natsbundle.Options{Out: authority, ResolverDir: "/data/jwt", Agents: []string{"agent-a"}}); err != nil {
		t.Fatal(err)
	}
	// JetStream clustering needs every node's routes configured up front: reserve three ports.
	var routes []*url.URL
	var clusterPorts []int
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		clusterPorts = append(clusterPorts, port)
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
	}
	var servers []*server.Server
	for i, name := range []string{"nats-0", "nats-1", "nats-2"} {
		opts := natsNode(t, authority, name)
		opts.Host, opts.Port, opts.HTTPPort, opts.PidFile = "127.0.0.1", -1, 0, ""
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", clusterPorts[i]
		opts.Routes = routes
		opts.NoSigs, opts.NoLog = true, true
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		t.Cleanup(s.Shutdown)
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("%s not ready", name)
		}
		servers = append(servers, s)
	}

	// TLS only: a client that does not verify the servers with the bundle's CA is refused.
	if nc, err := nats.Connect(servers[1].ClientURL(), nats.UserCredentials(filepath.Join(authority, natsbundle.ServiceCreds(natsauth.ConfigAPIService))),
		nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("a client without the CA connected")
	}
	servicesCA := nats.RootCAs(filepath.Join(authority, natsbundle.ServicesCA))
	// config-api's user is the one that may manage the streams (libs/natsauth ServicePermissions).
	svc, err := nats.Connect(servers[1].ClientURL(), nats.UserCredentials(filepath.Join(authority, natsbundle.ServiceCreds(natsauth.ConfigAPIService))),
		nats.CustomInboxPrefix(natsauth.ServiceInboxPrefix(natsauth.ConfigAPIService)), servicesCA)
	if err != nil {
		t.Fatalf("service user cannot connect: %v", err)
	}
	defer svc.Close()
	js, err := jetstream.New(svc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The JetStream meta group needs a leader first; retry until ctx ends.
	var stream jetstream.Stream
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		stream, err = js.CreateOrUpdateStream(attempt, jetstream.StreamConfig{Name: protocol.EventsStream, Subjects: []string{protocol.EventsSubjects}, Replicas: 3,
			MaxBytes: 1 << 20, MaxMsgSize: 1 << 10})
		cancelAttempt()
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("service user cannot create an R3 stream: %v", err)
	}
	if _, err := js.Publish(ctx, protocol.ConfigChangedSubject, []byte("1")); err != nil {
		t.Fatalf("publish to the R3 stream: %v", err)
	}
	if info, err := stream.Info(ctx); err != nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("stream info %v: want a leader and 2 replicas", err)
	}

	violations := make(chan error, 4)
	agent, err := nats.Connect(servers[2].ClientURL(),
		nats.UserCredentials(filepath.Join(authority, natsbundle.AgentCreds("agent-a"))),
		nats.RootCAs(filepath.Join(authority, natsbundle.AgentsCA)),
		nats.CustomInboxPrefix(protocol.InboxPrefix("agent-a")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatalf("agent user cannot connect: %v", err)
	}
	defer agent.Close()
	// delivery's user receives the agent's fetches (the subject it serves).
	del, err := nats.Connect(servers[0].ClientURL(), nats.UserCredentials(filepath.Join(authority, natsbundle.ServiceCreds(natsauth.DeliveryService))),
		nats.CustomInboxPrefix(natsauth.ServiceInboxPrefix(natsauth.DeliveryService)), servicesCA)
	if err != nil {
		t.Fatalf("delivery user cannot connect: %v", err)
	}
	defer del.Close()
	own, err := del.SubscribeSync(protocol.FetchSubject("agent-a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := del.Flush(); err != nil {
		t.Fatal(err)
	}
	// The subscription is on another node: its interest reaches the agent's node over the route
	// asynchronously, so publish until one arrives (a message sent before that has no receiver).
	var lastErr error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if err := agent.Publish(protocol.FetchSubject("agent-a"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if _, lastErr = own.NextMsg(200 * time.Millisecond); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Errorf("the agent's fetch on its own subject did not arrive: %v", lastErr)
	}
	if _, err := agent.SubscribeSync(protocol.CommandSubject("agent-b")); err != nil {
		t.Fatal(err)
	}
	if err := agent.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Errorf("subscribing to another agent's commands: %v, want a permissions violation", err)
		}
	case <-ctx.Done():
		t.Error("subscribing to another agent's commands was not refused")
	}

	// The credential service's account signer document revokes the agent on every node: the account
	// JWT it signs with the operator signing key is accepted by servers that trust auth.conf's operator.
	doc, err := os.ReadFile(filepath.Join(authority, natsbundle.AccountSignerFile))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := natsauth.ParseAccountSignerSeeds(doc)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := natsauth.NewAccountAdmin(signer)
	if err != nil {
		t.Fatal(err)
	}
	agentCreds := filepath.Join(authority, natsbundle.AgentCreds("agent-a"))
	raw, err := os.ReadFile(agentCreds)
	if err != nil {
		t.Fatal(err)
	}
	userJWT, err := jwt.ParseDecoratedJWT(raw)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(userJWT)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := nats.Connect(servers[0].ClientURL(), nats.UserCredentials(filepath.Join(authority, natsbundle.SystemCreds)), servicesCA)
	if err != nil {
		t.Fatalf("system user cannot connect: %v", err)
	}
	defer sys.Close()
	if err := admin.Revoke(sys, map[string]time.Time{uc.Subject: time.Now().Add(time.Second)}); err != nil {
		t.Fatalf("revoke with %s: %v", natsbundle.AccountSignerFile, err)
	}
	for _, s := range servers {
		refused := false
		for deadline := time.Now().Add(10 * time.Second); !refused && time.Now().Before(deadline); {
			nc, err := nats.Connect(s.ClientURL(), nats.UserCredentials(agentCreds), nats.NoReconnect(),
				nats.RootCAs(filepath.Join(authority, natsbundle.AgentsCA)))
			if refused = err != nil; !refused {
				nc.Close()
				time.Sleep(100 * time.Millisecond)
			}
		}
		if !refused {
			t.Errorf("%s still lets the revoked agent connect", s.Name())
		}
	}
}
