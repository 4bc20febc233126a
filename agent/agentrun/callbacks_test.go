package agentrun

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/configsync/configsync/agent/internal/changedetect"
	"github.com/configsync/configsync/agent/internal/healthcheck"
	"github.com/configsync/configsync/agent/internal/logcollect"
	"github.com/configsync/configsync/agent/internal/watchfiles"
	"github.com/configsync/configsync/libs/protocol"
)

// Each of the ten config types, pushed over NATS, changes what the running agent does.
func TestTenCallbacksChangeLiveBehaviour(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	ns := startNATS(t, agentID, 0)
	be := newBackend(t, ns.ClientURL(), agentID, protocol.FetchReply{Configs: map[string]json.RawMessage{}, Versions: map[string]int64{}})
	dir := t.TempDir()
	watched, _ := filepath.EvalSymlinks(t.TempDir())
	cfg := testConfig(t, ns.ClientURL(), agentID, dir)
	// What this test makes the agent do, the local policy has to allow.
	cfg.Policy.ReadPaths = []string{watched, "/var/log"}
	cfg.Policy.Env = []string{"CONFIGSYNC_TEST_WHO"}
	cfg.Policy.UploadFileContents = true
	r := start(t, cfg)
	version := int64(100)
	push := func(typ, payload string) {
		t.Helper()
		version++
		v := version
		be.push(typ, v, payload)
		be.waitFor(typ+" ack", func() bool { _, ok := be.ackFor(typ, v); return ok })
		if a, _ := be.ackFor(typ, v); a.Status != protocol.AckApplied {
			t.Fatalf("%s not applied: %+v", typ, a)
		}
	}

	t.Run("intervals", func(t *testing.T) {
		// At the default 30s heartbeat, 3 more heartbeats would take a minute and a half; at the 1s
		// floor, three seconds.
		be.waitFor("first heartbeat", func() bool { return len(be.heartbeats) >= 1 })
		push("intervals", `{"heartbeat":"1s","metrics":"1s"}`)
		be.waitFor("fast heartbeats", func() bool { return len(be.heartbeats) >= 4 })
		if r.a.heartbeats.Load() < 4 {
			t.Fatal("heartbeat counter disagrees")
		}
		push("intervals", `{"heartbeat":"1h","metrics":"1s"}`)
	})

	t.Run("labels", func(t *testing.T) {
		push("labels", `{"static":{"team":"sre"},"dynamic":[{"name":"who","source":"env","env":"CONFIGSYNC_TEST_WHO"}]}`)
		be.waitFor("labelled metrics", func() bool { return metricValue(be.obs[KindMetrics], "memory.total_bytes", "", "team", "sre") > 0 })
	})

	t.Run("collectors", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		defer srv.Close()
		push("collectors", fmt.Sprintf(`[{"type":"tcp","name":"svc","address":%q}]`, l.Addr().String()))
		be.waitFor("tcp samples", func() bool { return metricValue(be.obs[KindMetrics], "tcp.up", "svc", "team", "sre") == 1 })
		push("collectors", fmt.Sprintf(`[{"type":"http","name":"web","url":%q}]`, srv.URL))
		be.waitFor("http samples replace tcp", func() bool {
			return metricValue(be.obs[KindMetrics], "http.up", "web", "team", "sre") == 1 &&
				metricValue(be.obs[KindMetrics][len(be.obs[KindMetrics])-1:], "tcp.up", "svc", "team", "sre") == -1
		})
	})

	conf := filepath.Join(watched, "app.conf")
	os.WriteFile(conf, []byte("port=80"), 0o600)
	os.WriteFile(filepath.Join(watched, "tls.key"), []byte("KEY-MATERIAL"), 0o600)

	t.Run("change_detection", func(t *testing.T) {
		scans := r.a.changes.Scans()
		push("change_detection", fmt.Sprintf(`{"enabled":true,"paths":[%q],"interval":"1s"}`, watched))
		be.waitFor("baseline scan", func() bool { return r.a.changes.Scans() >= scans+2 })
		os.WriteFile(conf, []byte("port=8080"), 0o600)
		be.waitFor("change reported", func() bool {
			for _, raw := range be.obs[KindChanges] {
				var rep changedetect.Report
				json.Unmarshal(raw, &rep)
				for _, c := range rep.Changes {
					if c.Path == conf && c.Change == "modified" {
						return true
					}
				}
			}
			return false
		})
		push("change_detection", `{"enabled":false}`)
	})

	t.Run("watch_files", func(t *testing.T) {
		push("watch_files", fmt.Sprintf(`{"paths":[%q],"sensitive_files":["*.key"],"max_file_size":4096}`, watched))
		be.waitFor("files report", func() bool {
			for _, raw := range be.obs[KindFiles] {
				var rep watchfiles.Report
				json.Unmarshal(raw, &rep)
				var app, key bool
				for _, f := range rep.Files {
					app = app || (f.Path == conf && f.Content != nil && *f.Content == "port=8080")
					key = key || (strings.HasSuffix(f.Path, "tls.key") && f.Sensitive && f.Content == nil && f.SHA256 != "")
				}
				if app && key {
					return true
				}
			}
			return false
		})
		be.mu.Lock()
		defer be.mu.Unlock()
		for _, raw := range be.obs[KindFiles] {
			if strings.Contains(string(raw), "KEY-MATERIAL") {
				t.Fatal("sensitive content published")
			}
		}
	})

	t.Run("healthcheck", func(t *testing.T) {
		// The default interval is 60s; after the push a run with the new timeout comes within a second.
		push("healthcheck", `{"interval_seconds":1,"timeout_seconds":2}`)
		be.waitFor("health with new timeout", func() bool {
			for _, raw := range be.obs[KindHealth] {
				var rep healthcheck.Report
				json.Unmarshal(raw, &rep)
				if rep.TimeoutMS == 2000 {
					return true
				}
			}
			return false
		})
	})

	t.Run("log_collection", func(t *testing.T) {
		push("log_collection", `{"files":[{"name":"app","path":"/var/log/app/*.log"}]}`)
		b, err := os.ReadFile(filepath.Join(dir, logcollect.FileName))
		if err != nil || !strings.Contains(string(b), "/var/log/app/*.log") {
			t.Fatalf("fluent-bit config: %v\n%s", err, b)
		}
		if !r.logs.contains("restart Fluent Bit") {
			t.Fatal("no restart-required warning")
		}
	})

	t.Run("agent_settings", func(t *testing.T) {
		if r.logs.contains("task interval changed") {
			t.Fatal("debug line logged at info level")
		}
		push("agent_settings", `{"log_level":"debug","memory_limit_mb":512,"collector_timeout":"3s"}`)
		push("intervals", `{"heartbeat":"2h","metrics":"1s"}`) // produces a debug line
		be.waitFor("debug line", func() bool { return r.logs.contains("task interval changed") })
		if got := debug.SetMemoryLimit(-1); got != 512<<20 {
			t.Fatalf("memory limit %d", got)
		}
		if r.a.metrics.Timeout() != 3*time.Second {
			t.Fatalf("collector timeout %v", r.a.metrics.Timeout())
		}
		push("agent_settings", `{"log_level":"warn"}`)
		if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
			t.Fatalf("memory limit not lifted: %d", got)
		}
	})

	t.Run("tracing", func(t *testing.T) {
		be.mu.Lock()
		n := len(be.obs[KindTraces])
		be.mu.Unlock()
		if n != 0 || r.a.tracing.Ended() != 0 {
			t.Fatal("spans recorded while tracing is off")
		}
		push("tracing", `{"enabled":true,"sample_ratio":1}`)
		be.waitFor("task spans", func() bool {
			for _, raw := range be.obs[KindTraces] {
				if strings.Contains(string(raw), `"name":"task.metrics"`) {
					return true
				}
			}
			return false
		})
		push("tracing", `{"enabled":false}`)
		before := r.a.tracing.Ended()
		_, s := r.a.tracer.Start(context.Background(), "probe")
		s.End()
		if r.a.tracing.Ended() != before {
			t.Fatal("span recorded after tracing was disabled")
		}
	})

	t.Run("log_shipping", func(t *testing.T) {
		push("log_shipping", `{"enabled":true,"level":"warn"}`)
		version++
		be.push("intervals", version, `{"metrcs":"1s"}`) // rejected: a warn line
		be.waitFor("shipped warn", func() bool {
			for _, l := range be.logs {
				if l.Message == "config update rejected" && l.Level == "warn" && l.AgentID == agentID {
					return true
				}
			}
			return false
		})
		be.mu.Lock()
		for _, l := range be.logs {
			if l.Level == "info" || l.Level == "debug" {
				be.mu.Unlock()
				t.Fatalf("shipped below warn: %+v", l)
			}
		}
		be.mu.Unlock()
		push("log_shipping", `{"enabled":true,"level":"info"}`)
		push("labels", `{"static":{"team":"sre2"}}`) // "config applied" at info
		be.waitFor("shipped info", func() bool {
			for _, l := range be.logs {
				if l.Message == "config applied" && l.Attrs["config_type"] == "labels" {
					return true
				}
			}
			return false
		})
	})
}
