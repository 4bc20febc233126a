package agentrun

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configsync/configsync/agent/internal/configcache"
	"github.com/configsync/configsync/agent/internal/configsync"
	"github.com/configsync/configsync/agent/internal/metrics"
	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

const agentID = "550e8400-e29b-41d4-a716-446655440000"

// The whole conversation with a fake backend over a real (embedded) nats-server that enforces the
// per-agent permissions: fetch reply, startup application, acks, heartbeat with the right hash, pushes
// (applied, stale, deleted) and a clean stop.
func TestFullFlow(t *testing.T) {
	ns := startNATS(t, agentID, 0)
	secretCollectors := `[{"type":"postgres","name":"pg","host":"127.0.0.1","port":5432,"database":"test","password":"s3cr3t-pw"}]`
	be := newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{
		Configs: map[string]json.RawMessage{
			"labels":     json.RawMessage(`{"static":{"env":"prod"}}`),
			"intervals":  json.RawMessage(`{"heartbeat":"1s","metrics":"1s"}`),
			"collectors": json.RawMessage(secretCollectors),
		},
		Versions:     map[string]int64{"labels": 3, "intervals": 4, "collectors": 7},
		SecretFields: map[string][]string{"collectors": {"/0/password"}},
	})
	dir := t.TempDir()
	cfg := testConfig(t, ns.ClientURL(), agentID, dir)
	cfg.Defaults = Defaults{"labels": json.RawMessage(`{"static":{"env":"local-default"}}`)}
	r := start(t, cfg)

	for _, typ := range []string{"labels", "intervals", "collectors"} {
		if src := r.source(typ); src != configsync.SourceNATS {
			t.Fatalf("%s applied from %q", typ, src)
		}
	}
	if src := r.source("tracing"); src != configsync.SourceLocal {
		t.Fatalf("tracing from %q", src)
	}
	// Acks for the three fetched configs.
	be.waitFor("startup acks", func() bool {
		_, a := be.ackFor("labels", 3)
		_, b := be.ackFor("intervals", 4)
		c, ok := be.ackFor("collectors", 7)
		return a && b && ok && c.Status == protocol.AckApplied
	})
	// The heartbeat reports the hash libs/agentconfig computes over the redacted entries.
	wantHash := agentconfig.ConfigHash([]agentconfig.CacheEntry{
		{ConfigType: "labels", ConfigData: json.RawMessage(`{"static":{"env":"prod"}}`)},
		{ConfigType: "intervals", ConfigData: json.RawMessage(`{"heartbeat":"1s","metrics":"1s"}`)},
		{ConfigType: "collectors", ConfigData: json.RawMessage(strings.Replace(secretCollectors, "s3cr3t-pw", agentconfig.RedactedValue, 1))},
	})
	be.waitFor("heartbeat", func() bool {
		for _, h := range be.heartbeats {
			if h.ConfigHash == wantHash && h.ConfigVersion == 7 && h.ConfigVersions["labels"] == 3 &&
				h.AgentID == agentID && h.AgentVersion == "1.0.0-test" && !h.SentAt.IsZero() {
				return true
			}
		}
		return false
	})
	// The live postgres collector (with its in-memory credentials) runs; labels ride along.
	be.waitFor("postgres sample", func() bool { return metricValue(be.obs[KindMetrics], "postgres.up", "pg", "env", "prod") == 1 })
	// The secret never reached the disk cache or the log.
	cacheFile, _ := os.ReadFile(filepath.Join(dir, configcache.FileName))
	if bytes.Contains(cacheFile, []byte("s3cr3t-pw")) || !bytes.Contains(cacheFile, []byte(agentconfig.RedactedValue)) {
		t.Fatalf("cache file:\n%s", cacheFile)
	}

	// Push: applied and acked, and live.
	be.push("labels", 10, `{"static":{"env":"staging","rack":"r1"}}`)
	be.waitFor("ack labels 10", func() bool { a, ok := be.ackFor("labels", 10); return ok && a.Status == protocol.AckApplied })
	be.waitFor("new labels in metrics", func() bool { return metricValue(be.obs[KindMetrics], "memory.total_bytes", "", "rack", "r1") > 0 })

	// A stale push is ignored and acked with the version held.
	be.push("labels", 5, `{"static":{"env":"old"}}`)
	be.waitFor("stale ack", func() bool {
		n := len(be.acks)
		return n > 0 && be.acks[n-1].ConfigType == "labels" && be.acks[n-1].Version == 10 && be.acks[n-1].Status == protocol.AckApplied
	})
	if got := r.a.labels.Labels()["env"]; got != "staging" {
		t.Fatalf("stale push applied: env=%s", got)
	}

	// A failing push is acked failed with the error text and still cached.
	be.push("collectors", 11, `[{"type":"postgres","name":"pg","host":"127.0.0.1","port":5432,"password":"[REDACTED]"}]`, "/0/password")
	be.waitFor("failed ack", func() bool {
		a, ok := be.ackFor("collectors", 11)
		return ok && a.Status == protocol.AckFailed && strings.Contains(a.Error, "redacted")
	})

	// Deleting labels falls back to the local default.
	be.push("labels", 12, `null`)
	be.waitFor("ack delete", func() bool { _, ok := be.ackFor("labels", 12); return ok })
	if got := r.a.labels.Labels()["env"]; got != "local-default" {
		t.Fatalf("after delete env=%s", got)
	}
	be.waitFor("heartbeat without labels", func() bool {
		h := be.heartbeats[len(be.heartbeats)-1]
		_, has := h.ConfigVersions["labels"]
		return !has && h.ConfigVersion == 11
	})
	if strings.Contains(r.logs.String(), "s3cr3t-pw") {
		t.Fatal("secret in the agent's log")
	}
	r.stop(t)
}

// metricValue finds a sample in the metrics reports (newest first) whose report carries the label.
func metricValue(reports []json.RawMessage, name, collector, label, labelValue string) float64 {
	for i := len(reports) - 1; i >= 0; i-- {
		var rep metrics.Report
		if json.Unmarshal(reports[i], &rep) != nil || rep.Labels[label] != labelValue {
			continue
		}
		for _, s := range rep.Samples {
			if s.Name == name && (collector == "" || s.Labels["collector"] == collector) {
				return s.Value
			}
		}
	}
	return -1
}

// Backend (even NATS) unreachable at start: the agent runs from its cache, skipping the redacted
// collectors, and keeps fetching in the background until the backend answers.
func TestBackendUnreachableAtStart(t *testing.T) {
	dir := t.TempDir()
	// A previous run cached labels and credentialed collectors.
	c, err := configcache.Open(dir, discard())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Put("labels", json.RawMessage(`{"static":{"env":"cached"}}`), 2, nil)
	_ = c.Put("collectors", json.RawMessage(`[{"type":"redis","name":"r","host":"127.0.0.1","port":6379,"password":"pw"}]`), 3, []string{"/0/password"})

	port := freePort(t)
	url := "nats://127.0.0.1:" + itoa(port)
	cfg := testConfig(t, url, agentID, dir)
	cfg.FetchTimeout = 200 * 1e6
	cfg.Defaults = Defaults{"collectors": json.RawMessage(`[{"type":"tcp","name":"local","address":"127.0.0.1:1"}]`)}
	r := start(t, cfg)
	if r.source("labels") != configsync.SourceCache || r.a.labels.Labels()["env"] != "cached" {
		t.Fatalf("labels from %s: %v", r.source("labels"), r.a.labels.Labels())
	}
	if r.source("collectors") != configsync.SourceLocal || strings.Join(r.a.metrics.PluginNames(), ",") != "tcp/local" {
		t.Fatalf("collectors from %s: %v", r.source("collectors"), r.a.metrics.PluginNames())
	}

	// The backend comes up on the agent's URL.
	ns := startNATS(t, agentID, port)
	be := newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{
		Configs: map[string]json.RawMessage{
			"labels":     json.RawMessage(`{"static":{"env":"fresh"}}`),
			"collectors": json.RawMessage(`[{"type":"redis","name":"r","host":"127.0.0.1","port":6379,"password":"pw"}]`),
		},
		Versions:     map[string]int64{"labels": 5, "collectors": 3},
		SecretFields: map[string][]string{"collectors": {"/0/password"}},
	})
	be.waitFor("background fetch applied", func() bool {
		_, a := be.ackFor("labels", 5)
		_, b := be.ackFor("collectors", 3)
		return a && b
	})
	if r.a.labels.Labels()["env"] != "fresh" || strings.Join(r.a.metrics.PluginNames(), ",") != "redis/r" {
		t.Fatalf("after fetch: %v %v", r.a.labels.Labels(), r.a.metrics.PluginNames())
	}
	// Subscriptions made while disconnected work: a push arrives.
	be.push("labels", 6, `{"static":{"env":"pushed"}}`)
	be.waitFor("push after late connect", func() bool { _, ok := be.ackFor("labels", 6); return ok })
}

// After a server restart the agent reconnects, its command subscription is back, and it re-fetches.
func TestReconnectResubscribesAndRefetches(t *testing.T) {
	port := freePort(t)
	ns := startNATS(t, agentID, port)
	reply := protocol.FetchReply{Configs: map[string]json.RawMessage{"labels": json.RawMessage(`{"static":{"v":"1"}}`)}, Versions: map[string]int64{"labels": 1}}
	be := newBackend(t, ns.ClientURL(), agentID, reply)
	r := start(t, testConfig(t, ns.ClientURL(), agentID, t.TempDir()))
	be.waitFor("first fetch", func() bool { return be.fetches == 1 })

	ns.Shutdown()
	ns.WaitForShutdown()
	ns2 := startNATS(t, agentID, port)
	reply.Configs = map[string]json.RawMessage{"labels": json.RawMessage(`{"static":{"v":"2"}}`)}
	reply.Versions = map[string]int64{"labels": 2}
	be2 := newBackend(t, ns2.ClientURL(), agentID, reply)
	be2.waitFor("re-fetch after reconnect", func() bool { _, ok := be2.ackFor("labels", 2); return ok })
	if r.a.labels.Labels()["v"] != "2" {
		t.Fatalf("labels %v", r.a.labels.Labels())
	}
	be2.push("labels", 3, `{"static":{"v":"3"}}`)
	be2.waitFor("push after reconnect", func() bool { _, ok := be2.ackFor("labels", 3); return ok })
}
