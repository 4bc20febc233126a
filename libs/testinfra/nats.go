package testinfra

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/natsauth/tlsgen"
)

// NATSOption configures the server NATS starts.
type NATSOption func(*natsConfig)

type natsConfig struct {
	tls         bool
	configFile  string
	users       []*server.User
	accounts    []string
	noJetStream bool
	operator    *operatorConfig
	mutators    []func(*server.Options)
}

type operatorConfig struct {
	operator    *jwt.OperatorClaims
	accountJWTs map[string]string // account public key -> JWT
}

// WithConfigFile starts the server from a nats-server configuration file (accounts, permissions,
// operator mode...). The listen address is still forced to 127.0.0.1 and a random port, and the
// JetStream store to the test's temporary directory.
func WithConfigFile(path string) NATSOption {
	return func(c *natsConfig) { c.configFile = path }
}

// WithUsers adds users (with their permissions) to the server. A user whose Account is set must name
// an account given WithAccounts; the Account pointer is only read for its name.
func WithUsers(users []*server.User) NATSOption {
	return func(c *natsConfig) { c.users = append(c.users, users...) }
}

// WithAccounts adds isolated accounts, each with unlimited JetStream (unless WithoutJetStream). Only
// each account's name is used: every start builds fresh accounts, because a server binds the accounts it
// is given. For imports and exports between accounts use WithConfigFile.
func WithAccounts(accounts ...*server.Account) NATSOption {
	return func(c *natsConfig) {
		for _, a := range accounts {
			c.accounts = append(c.accounts, a.Name)
		}
	}
}

// WithOperator runs the server in operator (decentralised JWT) mode trusting operatorJWT, with an
// in-memory account resolver preloaded with accountJWTs. When the operator names a system account, its
// JWT must be among accountJWTs. JetStream for an account comes from the limits in its JWT.
func WithOperator(operatorJWT string, accountJWTs ...string) NATSOption {
	return func(c *natsConfig) {
		oc := &operatorConfig{accountJWTs: map[string]string{}}
		op, err := jwt.DecodeOperatorClaims(operatorJWT)
		if err != nil {
			panic(fmt.Sprintf("testinfra: WithOperator: operator JWT: %v", err))
		}
		oc.operator = op
		for _, a := range accountJWTs {
			ac, err := jwt.DecodeAccountClaims(a)
			if err != nil {
				panic(fmt.Sprintf("testinfra: WithOperator: account JWT: %v", err))
			}
			oc.accountJWTs[ac.Subject] = a
		}
		c.operator = oc
	}
}

// WithTLS serves the client port with TLS only: a CA and a server certificate for 127.0.0.1 and
// localhost are made in the test's temporary directory (libs/natsauth/tlsgen). CAFile names the CA;
// Connect trusts it; a plaintext client is refused.
func WithTLS() NATSOption {
	return func(c *natsConfig) { c.tls = true }
}

// WithoutJetStream starts a core NATS server without JetStream.
func WithoutJetStream() NATSOption {
	return func(c *natsConfig) { c.noJetStream = true }
}

// WithServerOptions edits the server options directly, after every other option (applied again on
// each Restart, to fresh options).
func WithServerOptions(f func(*server.Options)) NATSOption {
	return func(c *natsConfig) { c.mutators = append(c.mutators, f) }
}

// NATSServer is an in-process nats-server for one test.
type NATSServer struct {
	t        testing.TB
	cfg      natsConfig
	storeDir string
	tls      tlsgen.Files // set WithTLS

	mu   sync.Mutex
	port int // 0 until the first start picked one
	srv  *server.Server
}

// NATS starts an in-process nats-server with JetStream (store in t.TempDir()) on a random port of
// 127.0.0.1. It is shut down at cleanup.
func NATS(t testing.TB, opts ...NATSOption) *NATSServer {
	t.Helper()
	n := &NATSServer{t: t, storeDir: t.TempDir()}
	for _, o := range opts {
		o(&n.cfg)
	}
	if n.cfg.tls {
		f, err := tlsgen.Ensure(filepath.Join(t.TempDir(), "tls"), "127.0.0.1", "localhost")
		if err != nil {
			t.Fatalf("testinfra: NATS TLS: %v", err)
		}
		n.tls = f
	}
	t.Cleanup(n.Shutdown)
	n.start(t)
	return n
}

// URL is the client URL, stable across Restart.
func (n *NATSServer) URL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
}

// Server is the running server (a new value after Restart).
func (n *NATSServer) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// CAFile is the CA that signed the server's certificate (WithTLS), else "".
func (n *NATSServer) CAFile() string { return n.tls.CA }

// TLSFiles are the CA and server certificate of a WithTLS server.
func (n *NATSServer) TLSFiles() tlsgen.Files { return n.tls }

// StoreDir is the JetStream store directory, kept across Restart.
func (n *NATSServer) StoreDir() string { return n.storeDir }

// Connect connects to the server with opts; the connection is closed at cleanup.
func (n *NATSServer) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	if n.tls.CA != "" {
		opts = append([]nats.Option{nats.RootCAs(n.tls.CA)}, opts...)
	}
	nc, err := nats.Connect(n.URL(), opts...)
	if err != nil {
		t.Fatalf("testinfra: connect to NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Shutdown stops the server and waits until it is down. Calling it again is a no-op.
func (n *NATSServer) Shutdown() {
	n.mu.Lock()
	s := n.srv
	n.srv = nil
	n.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart stops the server (if running) and starts a new one on the same port with the same JetStream
// store, as after a crash or an upgrade; clients configured to reconnect find it again.
func (n *NATSServer) Restart(t testing.TB) {
	t.Helper()
	n.Shutdown()
	n.start(t)
}

func (n *NATSServer) start(t testing.TB) {
	t.Helper()
	opts, err := n.options()
	if err != nil {
		t.Fatalf("testinfra: NATS options: %v", err)
	}
	var s *server.Server
	// The port of a restart was free a moment ago; a listener just closed may need a moment to go.
	for attempt := 0; ; attempt++ {
		s, err = server.NewServer(opts)
		if err != nil {
			t.Fatalf("testinfra: new NATS server: %v", err)
		}
		s.Start()
		if s.ReadyForConnections(10 * time.Second) {
			break
		}
		s.Shutdown()
		s.WaitForShutdown()
		if attempt == 3 {
			t.Fatalf("testinfra: NATS server on %s:%d did not become ready", opts.Host, opts.Port)
		}
		time.Sleep(100 * time.Millisecond)
		if opts, err = n.options(); err != nil {
			t.Fatalf("testinfra: NATS options: %v", err)
		}
	}
	if !n.cfg.noJetStream && n.cfg.operator == nil {
		for _, name := range n.cfg.accounts {
			acc, err := s.LookupAccount(name)
			if err != nil {
				s.Shutdown()
				t.Fatalf("testinfra: NATS account %s: %v", name, err)
			}
			if err := acc.EnableJetStream(map[string]server.JetStreamAccountLimits{"": unlimitedJetStream}, nil); err != nil {
				s.Shutdown()
				t.Fatalf("testinfra: enable JetStream for account %s: %v", name, err)
			}
		}
	}
	n.mu.Lock()
	n.srv = s
	n.port = s.Addr().(*net.TCPAddr).Port
	n.mu.Unlock()
}

var unlimitedJetStream = server.JetStreamAccountLimits{
	MaxMemory: -1, MaxStore: -1, MaxStreams: -1, MaxConsumers: -1, MaxAckPending: -1,
	MemoryMaxStreamBytes: -1, StoreMaxStreamBytes: -1,
}

// options builds fresh server options for each start (a server mutates and keeps the ones it gets).
func (n *NATSServer) options() (*server.Options, error) {
	opts := &server.Options{}
	if n.cfg.configFile != "" {
		o, err := server.ProcessConfigFile(n.cfg.configFile)
		if err != nil {
			return nil, fmt.Errorf("config file %s: %w", n.cfg.configFile, err)
		}
		opts = o
	}
	n.mu.Lock()
	port := n.port
	n.mu.Unlock()
	opts.Host = "127.0.0.1"
	opts.Port = -1
	if port != 0 {
		opts.Port = port
	}
	opts.NoSigs = true
	opts.NoLog = true
	opts.JetStream = !n.cfg.noJetStream
	opts.StoreDir = n.storeDir
	if n.tls.CA != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: n.tls.ServerCert, KeyFile: n.tls.ServerKey, Timeout: 5})
		if err != nil {
			return nil, fmt.Errorf("TLS config: %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSTimeout = tc, true, 5
	}

	accounts := map[string]*server.Account{}
	for _, name := range n.cfg.accounts {
		acc := server.NewAccount(name)
		accounts[name] = acc
		opts.Accounts = append(opts.Accounts, acc)
	}
	for _, u := range n.cfg.users {
		cp := *u
		if u.Account != nil {
			acc, ok := accounts[u.Account.Name]
			if !ok {
				return nil, fmt.Errorf("user %s: account %s not given WithAccounts", u.Username, u.Account.Name)
			}
			cp.Account = acc
		}
		opts.Users = append(opts.Users, &cp)
	}
	if oc := n.cfg.operator; oc != nil {
		resolver := &server.MemAccResolver{}
		for pub, j := range oc.accountJWTs {
			if err := resolver.Store(pub, j); err != nil {
				return nil, fmt.Errorf("store account JWT: %w", err)
			}
		}
		opts.TrustedOperators = []*jwt.OperatorClaims{oc.operator}
		opts.AccountResolver = resolver
		if oc.operator.SystemAccount != "" {
			opts.SystemAccount = oc.operator.SystemAccount
		}
	}
	for _, f := range n.cfg.mutators {
		f(opts)
	}
	return opts, nil
}
