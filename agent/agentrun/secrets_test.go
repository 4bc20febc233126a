package agentrun

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configsync/configsync/agent/internal/configcache"
	"github.com/configsync/configsync/agent/internal/metrics"
	"github.com/configsync/configsync/libs/protocol"
)

// With every log at debug and shipped to the backend, the secrets the backend injects into collectors
// reach only the collectors' connections: never the agent's log, the shipped log records, acks,
// heartbeats, observations (collector errors included) or the cache file. The credentialed checks fail
// on purpose, so their error paths run and log.
func TestSecretsNeverLeaveTheAgentAtDebug(t *testing.T) {
	const (
		pgSecret      = "pl4nted-pg-S3CRET-1a2b"
		redisSecret   = "pl4nted-redis-S3CRET-3c4d"
		pushedSecret  = "pl4nted-push-S3CRET-7a8b"
		refusedSecret = "pl4nted-refused-S3CRET-9c0d"
	)
	secrets := []string{pgSecret, redisSecret, pushedSecret, refusedSecret}
	closed := freePort(t) // nothing listens there: the postgres and redis checks fail

	ns := startNATS(t, agentID, 0)
	collectors := fmt.Sprintf(`[`+
		`{"type":"postgres","name":"pg","host":"127.0.0.1","port":%d,"username":"monitor","password":%q},`+
		`{"type":"redis","name":"cache","host":"127.0.0.1","port":%d,"username":"monitor","password":%q}]`,
		closed, pgSecret, closed, redisSecret)
	be := newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{
		Configs: map[string]json.RawMessage{
			"collectors":     json.RawMessage(collectors),
			"intervals":      json.RawMessage(`{"metrics":"1s","heartbeat":"1s"}`),
			"log_shipping":   json.RawMessage(`{"enabled":true,"level":"debug"}`),
			"agent_settings": json.RawMessage(`{"log_level":"debug"}`),
		},
		Versions:     map[string]int64{"collectors": 7, "intervals": 7, "log_shipping": 7, "agent_settings": 7},
		SecretFields: map[string][]string{"collectors": {"/0/password", "/0/username", "/1/password", "/1/username"}},
	})
	dir := t.TempDir()
	cfg := testConfig(t, ns.ClientURL(), agentID, dir)
	cfg.LogLevel = "debug"
	r := start(t, cfg)

	be.waitFor("collectors applied", func() bool {
		a, ok := be.ackFor("collectors", 7)
		return ok && a.Status == protocol.AckApplied
	})
	failing := func(names ...string) func() bool {
		return func() bool {
			for _, raw := range be.obs[KindMetrics] {
				var rep metrics.Report
				if json.Unmarshal(raw, &rep) != nil {
					continue
				}
				failed := map[string]bool{}
				for _, e := range rep.Errors {
					failed[e.Collector] = true
				}
				all := true
				for _, n := range names {
					all = all && failed[n]
				}
				if all {
					return true
				}
			}
			return false
		}
	}
	be.waitFor("credentialed checks failing", failing("postgres/pg", "redis/cache"))

	// A pushed secret, and a push the cache refuses (its secret pointer names nothing).
	be.push("collectors", 8, fmt.Sprintf(`[{"type":"redis","name":"pushed","host":"127.0.0.1","port":%d,"password":%q}]`, closed, pushedSecret), "/0/password")
	be.waitFor("pushed collectors applied", func() bool {
		a, ok := be.ackFor("collectors", 8)
		return ok && a.Status == protocol.AckApplied
	})
	be.mu.Lock()
	be.obs[KindMetrics] = nil
	be.mu.Unlock()
	be.waitFor("pushed check failing", failing("redis/pushed"))
	be.push("collectors", 9, fmt.Sprintf(`[{"type":"redis","name":"refused","host":"127.0.0.1","port":%d,"password":%q}]`, closed, refusedSecret), "/3/password")
	be.waitFor("refused push acked failed", func() bool {
		a, ok := be.ackFor("collectors", 9)
		return ok && a.Status == protocol.AckFailed
	})
	be.waitFor("shipped debug records", func() bool {
		for _, rec := range be.logs {
			if rec.Level == "debug" {
				return true
			}
		}
		return false
	})
	r.stop(t)
	if !strings.Contains(r.logs.String(), "collector failed") {
		t.Fatalf("the failing checks were not logged at debug:\n%s", r.logs.String())
	}

	// Everything the agent sent, logged or wrote.
	be.mu.Lock()
	sent, err := json.Marshal(map[string]any{"acks": be.acks, "heartbeats": be.heartbeats, "observations": be.obs, "logs": be.logs})
	be.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	cacheFile, err := os.ReadFile(filepath.Join(dir, configcache.FileName))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		for where, text := range map[string]string{"agent log": r.logs.String(), "backend": string(sent), "cache file": string(cacheFile)} {
			if strings.Contains(text, s) {
				t.Errorf("secret %s reached the %s", s, where)
			}
		}
	}
}
