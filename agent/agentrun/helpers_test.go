package agentrun

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/configsync/configsync/agent/internal/configsync"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

const (
	agentUser   = "agent"
	backendUser = "backend"
	password    = "pw"
)

// startNATS runs an embedded nats-server with ARCHITECTURE.md's per-agent permissions for agentID:
// the agent may publish only under configsync.agent.<id>. and subscribe only to its command subject
// and its own inbox prefix. port 0 picks a free port.
func startNATS(t *testing.T, agentID string, port int) *server.Server {
	t.Helper()
	if port == 0 {
		port = -1
	}
	opts := &server.Options{
		Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: agentUser, Password: password, Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{protocol.AgentSubjectPrefix + agentID + ".>"}},
				Subscribe: &server.SubjectPermission{Allow: []string{protocol.CommandSubject(agentID), protocol.InboxPrefix(agentID) + ".>"}},
			}},
			{Username: backendUser, Password: password},
		},
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// backend is a fake ConfigSync backend: it answers fetches, records acks, heartbeats, observations and
// shipped logs, and pushes commands.
type backend struct {
	t       *testing.T
	nc      *nats.Conn
	agentID string

	mu         sync.Mutex
	reply      protocol.FetchReply
	fetches    int
	acks       []protocol.Ack
	heartbeats []protocol.Heartbeat
	obs        map[string][]json.RawMessage
	logs       []protocol.LogRecord
	signal     chan struct{}
}

func newBackend(t *testing.T, url, agentID string, reply protocol.FetchReply) *backend {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo(backendUser, password))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b := &backend{t: t, nc: nc, agentID: agentID, reply: reply, obs: map[string][]json.RawMessage{}, signal: make(chan struct{}, 1)}
	sub := func(subject string, fn func(*nats.Msg)) {
		if _, err := nc.Subscribe(subject, fn); err != nil {
			t.Fatal(err)
		}
	}
	sub(protocol.FetchSubjectAll, func(m *nats.Msg) {
		var req protocol.FetchRequest
		_ = json.Unmarshal(m.Data, &req)
		id, _ := protocol.AgentIDFromSubject(m.Subject)
		b.mu.Lock()
		b.fetches++
		reply := b.reply
		b.mu.Unlock()
		if req.AgentID != id {
			reply = protocol.FetchReply{Error: protocol.Errorf(protocol.CodeForbidden, "agent id mismatch")}
		}
		data, _ := json.Marshal(reply)
		_ = m.Respond(data)
	})
	sub(protocol.AckSubjectAll, func(m *nats.Msg) {
		var a protocol.Ack
		_ = json.Unmarshal(m.Data, &a)
		b.record(func() { b.acks = append(b.acks, a) })
	})
	sub(protocol.HeartbeatSubjectAll, func(m *nats.Msg) {
		var h protocol.Heartbeat
		_ = json.Unmarshal(m.Data, &h)
		b.record(func() { b.heartbeats = append(b.heartbeats, h) })
	})
	sub(protocol.LogsSubject(agentID), func(m *nats.Msg) {
		var r protocol.LogRecord
		_ = json.Unmarshal(m.Data, &r)
		b.record(func() { b.logs = append(b.logs, r) })
	})
	for _, kind := range []string{KindMetrics, KindChanges, KindFiles, KindHealth, KindInventory, KindProcesses, KindTraces} {
		sub(protocol.ObservationSubject(agentID, kind), func(m *nats.Msg) {
			b.record(func() { b.obs[kind] = append(b.obs[kind], json.RawMessage(m.Data)) })
		})
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *backend) record(fn func()) {
	b.mu.Lock()
	fn()
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// waitFor blocks until cond (evaluated under the backend's lock) holds.
func (b *backend) waitFor(what string, cond func() bool) {
	b.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		b.mu.Lock()
		ok := cond()
		b.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-b.signal:
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			b.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (b *backend) push(configType string, version int64, payload string, secretFields ...string) {
	b.t.Helper()
	cmd := protocol.Command{CommandID: configType + "-" + strconv.FormatInt(version, 10), Type: protocol.CommandConfigUpdate,
		ConfigType: configType, Version: version, Payload: json.RawMessage(payload), SecretFields: secretFields}
	data, _ := json.Marshal(cmd)
	if err := b.nc.Publish(protocol.CommandSubject(b.agentID), data); err != nil {
		b.t.Fatal(err)
	}
}

// ack returns the last ack of a type at a version, if any.
func (b *backend) ackFor(configType string, version int64) (protocol.Ack, bool) {
	for i := len(b.acks) - 1; i >= 0; i-- {
		if a := b.acks[i]; a.ConfigType == configType && a.Version == version {
			return a, true
		}
	}
	return protocol.Ack{}, false
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) contains(sub string) bool { return strings.Contains(s.String(), sub) }

// running is an agent started in-process.
type running struct {
	a      *agent
	cancel context.CancelFunc
	done   chan error
	logs   *syncBuffer
	mu     sync.Mutex
	res    []configsync.Resolved
}

func testConfig(t *testing.T, url, agentID, dataDir string) Config {
	cfg := DefaultConfig()
	cfg.AgentID = agentID
	cfg.NATS = NATSConfig{URL: url, User: agentUser, Password: password}
	cfg.DataDir = dataDir
	cfg.BootJitter = 0
	cfg.FetchTimeout = 2 * time.Second
	cfg.AgentVersion = "1.0.0-test"
	// The fake backend of these tests does not sign; signed_test.go runs agents that verify.
	cfg.Trust.InsecureSkipVerify = true
	// Tests run intervals of milliseconds; the local policy may lower its floor (a remote config cannot).
	cfg.Policy.Limits.MinInterval = time.Millisecond
	// Reconnect at once: the production backoff grows to a minute, which would make tests that restart
	// the server wait on it (the backoff itself is tested in internal/transport).
	cfg.NATSOptions = append(cfg.NATSOptions, nats.CustomReconnectDelay(func(int) time.Duration { return 50 * time.Millisecond }))
	return cfg
}

// start runs the agent and waits until its startup application is done.
func start(t *testing.T, cfg Config) *running {
	t.Helper()
	r := &running{done: make(chan error, 1), logs: &syncBuffer{}}
	ready := make(chan *agent, 1)
	cfg.LogOutput = r.logs
	var keysJitter *time.Duration
	if cfg.hooks != nil {
		keysJitter = cfg.hooks.keysRefetchJitter
	}
	cfg.hooks = &hooks{
		keysRefetchJitter: keysJitter,
		ready:             func(a *agent) { ready <- a },
		applied: func(res configsync.Resolved, _ error) {
			r.mu.Lock()
			r.res = append(r.res, res)
			r.mu.Unlock()
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- Run(ctx, cfg) }()
	select {
	case r.a = <-ready:
	case err := <-r.done:
		t.Fatalf("agent exited: %v\n%s", err, r.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("agent not ready:\n%s", r.logs.String())
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("agent did not stop")
	}
}

func (r *running) source(configType string) configsync.Source {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.res) - 1; i >= 0; i-- {
		if r.res[i].ConfigType == configType {
			return r.res[i].Source
		}
	}
	return ""
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func itoa(n int) string { return strconv.Itoa(n) }
