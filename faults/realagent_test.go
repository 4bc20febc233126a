package faults_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/agent/agentrun"
	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// realAgent is the real agent (agentrun.Run, the library cmd/agent runs) in this process, with a wire
// tap on its NATS connection that records every ack it publishes and every command it receives, and
// its JSON log lines.
type realAgent struct {
	host    host
	dataDir string
	log     *lockedBuffer

	mu   sync.Mutex
	acks []protocol.Ack
	cmds []protocol.Command

	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// startRealAgent runs an agent for h under the default local policy; edit (optional) changes its wire
// tap.
func startRealAgent(t testing.TB, s *stack, h host, edit ...func(*wireTap)) *realAgent {
	t.Helper()
	return startRealAgentWithPolicy(t, s, h, agentrun.DefaultConfig().Policy, edit...)
}

// startRealAgentWithPolicy is startRealAgent with the given local policy.
func startRealAgentWithPolicy(t testing.TB, s *stack, h host, pol agentrun.PolicyConfig, edit ...func(*wireTap)) *realAgent {
	t.Helper()
	a := &realAgent{host: h, dataDir: filepath.Join(t.TempDir(), "agent"), log: &lockedBuffer{}, done: make(chan struct{})}
	tap := &wireTap{
		onPublish: func(subject string, payload []byte) {
			if subject != protocol.AckSubject(h.AgentID) {
				return
			}
			var ack protocol.Ack
			if json.Unmarshal(payload, &ack) == nil {
				a.mu.Lock()
				a.acks = append(a.acks, ack)
				a.mu.Unlock()
			}
		},
		onReceive: func(subject string, payload []byte) {
			if subject != protocol.CommandSubject(h.AgentID) {
				return
			}
			var cmd protocol.Command
			if json.Unmarshal(payload, &cmd) == nil {
				a.mu.Lock()
				a.cmds = append(a.cmds, cmd)
				a.mu.Unlock()
			}
		},
	}
	tap.tls = s.nats.TLSFiles()
	for _, e := range edit {
		e(tap)
	}
	cfg := agentrun.DefaultConfig()
	cfg.AgentID = h.AgentID
	cfg.DataDir = a.dataDir
	cfg.NATS = agentrun.NATSConfig{URL: s.nats.URL(), CredsFile: s.agentCreds(h.AgentID),
		TLS: &agentrun.NATSTLSConfig{CAFile: s.nats.CAFile()}}
	cfg.BootJitter = 0
	cfg.FetchTimeout = 3 * time.Second
	cfg.LogFormat = "json"
	cfg.LogOutput = a.log
	cfg.NATSOptions = []nats.Option{nats.SetCustomDialer(tap)}
	cfg.Policy = pol
	keys, err := agentrun.TrustKeys(s.trustKeys)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Trust.PublicKeys = keys
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() {
		defer close(a.done)
		if err := agentrun.Run(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
			a.err = err
		}
	}()
	t.Cleanup(a.stop)
	return a
}

func (a *realAgent) stop() {
	a.cancel()
	<-a.done
}

// acked returns the acks of configType at version the agent published, in order.
func (a *realAgent) acked(configType string, version int64) []protocol.Ack {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []protocol.Ack
	for _, k := range a.acks {
		if k.ConfigType == configType && k.Version == version {
			out = append(out, k)
		}
	}
	return out
}

// commands returns how many config_update commands of configType at version reached the agent.
func (a *realAgent) commands(configType string, version int64) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.cmds {
		if c.ConfigType == configType && c.Version == version {
			n++
		}
	}
	return n
}

// cached reads the agent's cache file and returns the version it holds for configType.
func (a *realAgent) cached(configType string) (int64, bool) {
	data, err := os.ReadFile(filepath.Join(a.dataDir, "config.cache.json"))
	if err != nil {
		return 0, false
	}
	var entries []agentconfig.CacheEntry
	if json.Unmarshal(data, &entries) != nil {
		return 0, false
	}
	for _, e := range entries {
		if e.ConfigType == configType {
			return e.Version, true
		}
	}
	return 0, false
}

// logLines returns the agent's JSON log lines whose msg is msg.
func (a *realAgent) logLines(msg string) []map[string]any {
	return jsonLines(a.log.Bytes(), msg)
}

// jsonLines decodes the JSON lines of data whose "msg" equals msg; other lines are skipped.
func jsonLines(data []byte, msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' || !bytes.Contains(line, []byte(msg)) {
			continue
		}
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// lockedBuffer is an io.Writer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// barrier makes sure an agent has handled every command that reached it before now: it sends a
// command of a type the agent does not act on and waits for the agent to log dropping it. The agent
// handles its command subscription in order, so everything sent earlier was handled before.
func barrier(t testing.TB, nc *nats.Conn, agents []*realAgent) {
	t.Helper()
	marker := fmt.Sprintf("barrier-%d", time.Now().UnixNano())
	for _, a := range agents {
		b, _ := json.Marshal(protocol.Command{CommandID: marker, Type: "faults_barrier"})
		if err := nc.Publish(protocol.CommandSubject(a.host.AgentID), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testinfra.EventuallyNoError(t, 15*time.Second, func() error {
		for _, a := range agents {
			found := false
			for _, l := range a.logLines("command dropped: unsupported command type") {
				if l["command_id"] == marker {
					found = true
				}
			}
			if !found {
				return errors.New("agent " + a.host.AgentID + " has not handled it yet")
			}
		}
		return nil
	}, "every agent to handle the barrier command")
}
