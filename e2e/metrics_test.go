package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/platform/metrics/metricstest"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// scrape reads the /metrics of service kind's first replica.
func (s *stack) scrape(kind string) metricstest.Scrape {
	s.t.Helper()
	return metricstest.Get(s.t, "http://"+s.replica(kind, 1).metricsAddr+"/metrics")
}

// scrapeAll reads every service's /metrics.
func (s *stack) scrapeAll() map[string]metricstest.Scrape {
	out := map[string]metricstest.Scrape{}
	for _, kind := range serviceNames {
		out[kind] = s.scrape(kind)
	}
	return out
}

// waitMetric waits until the value of name{labels} on kind satisfies ok.
func (s *stack) waitMetric(kind, name string, labels map[string]string, what string, ok func(float64) bool) metricstest.Scrape {
	s.t.Helper()
	var last metricstest.Scrape
	s.eventually(convergeTimeout, kind+" "+name+fmt.Sprint(labels)+" "+what, why(func() (string, bool) {
		last = s.scrape(kind)
		v := last.Value(name, labels)
		return fmt.Sprintf("value %v", v), ok(v)
	}))
	return last
}

// TestMetricsMoveWithTheWork: each service serves /metrics on its own METRICS_ADDR (never on its public
// port), with its build info, and every family moves when the thing it counts happens: an operator
// PUT (HTTP, outbox), its fan-out (delivery, resolver), a credential injected into a push
// (credential decrypts), the agent's ack (ack-ingest), a fetch, and the fleet gauges (online, failed
// apply, drift) on the replica holding the lease.
func TestMetricsMoveWithTheWork(t *testing.T) {
	s := startStack(t, stackOptions{replicas: 1, agents: []string{"host-a"}})
	a := s.agents["host-a"]
	s.waitOnline(1)

	for _, kind := range serviceNames {
		sc := s.scrape(kind)
		if got := sc.Value("configsync_build_info", map[string]string{"service": kind}); got != 1 {
			t.Errorf("%s: configsync_build_info{service=%q} = %v, want 1", kind, kind, got)
		}
		if sc.Value("go_goroutines", nil) <= 0 || sc.Value("process_start_time_seconds", nil) <= 0 {
			t.Errorf("%s: no Go or process collector", kind)
		}
		resp, err := http.Get("http://" + s.replica(kind, 1).httpAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s serves /metrics on its public port: HTTP %d", kind, resp.StatusCode)
		}
	}
	// The fleet gauges: one host, online, nothing failed.
	s.waitMetric("config-api", "configsync_fleet_hosts_online", nil, "= 1", func(v float64) bool { return v == 1 })

	before := s.scrapeAll()
	secret := "e2e-metrics-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	credID := s.createCredential(1, "pg-metrics", map[string]string{"username": "monitor", "password": secret})
	collectorsV := s.putEnvConfig(1, "collectors", []map[string]any{{
		"type": "postgres", "name": "main", "host": "127.0.0.1", "port": testinfra.FreePort(t), "database": "app",
		"credential_id": credID,
	}})
	s.waitApplied(1, convergeTimeout, "collectors", collectorsV, a)
	if _, err := s.fetchAs(s.agentConn(a), a); err != nil {
		t.Fatal(err)
	}
	acked := map[string]string{"consumer": "configsync-ack-ingest-acks", "outcome": "ack", "result": "ok"}
	s.waitMetric("ack-ingest", "configsync_consumer_messages_total", acked, "moved",
		func(v float64) bool {
			return v > before["ack-ingest"].Value("configsync_consumer_messages_total", acked)
		})
	// And at least one heartbeat (one a second) ingested since the first scrape.
	hb := map[string]string{"kind": "heartbeats", "result": "ok"}
	s.waitMetric("ack-ingest", "configsync_ingest_commit_duration_seconds", hb, "moved", func(v float64) bool {
		return v > before["ack-ingest"].Value("configsync_ingest_commit_duration_seconds", hb)
	})
	after := s.scrapeAll()

	moved := func(kind, name string, labels map[string]string, atLeast float64) {
		t.Helper()
		if d := after[kind].Value(name, labels) - before[kind].Value(name, labels); d < atLeast {
			t.Errorf("%s: %s%v moved by %v, want at least %v", kind, name, labels, d, atLeast)
		}
	}
	put := map[string]string{"service": "config-api", "route": "/api/v1/environments/{envID}/agent-configs/{configType}", "method": "PUT", "code": "200"}
	moved("config-api", "configsync_http_requests_total", put, 1)
	moved("config-api", "configsync_http_request_duration_seconds", map[string]string{"route": put["route"], "method": "PUT"}, 1)
	moved("config-api", "configsync_outbox_published_total", map[string]string{"result": "ok"}, 1)
	moved("config-api", "configsync_db_pool_acquires_total", nil, 1)
	if !after["config-api"].Has("configsync_outbox_pending", nil) || !after["config-api"].Has("configsync_outbox_oldest_age_seconds", nil) {
		t.Error("config-api: no outbox backlog gauges")
	}
	for _, l := range after["config-api"].Labels("configsync_http_requests_total") {
		if strings.Contains(l["route"], s.envID) || strings.Contains(l["route"], a.hostID) {
			t.Errorf("config-api: an id in a route label: %v", l)
		}
	}
	push := map[string]string{"consumer": "configsync-delivery-push"}
	moved("delivery", "configsync_consumer_messages_total", map[string]string{"consumer": push["consumer"], "outcome": "ack"}, 1)
	moved("delivery", "configsync_consumer_handle_duration_seconds", push, 1)
	moved("delivery", "configsync_consumer_lag_seconds", push, 1)
	moved("delivery", "configsync_delivery_commands_published_total", map[string]string{"result": "ok"}, 1)
	fetch := map[string]string{"service": "delivery", "endpoint": "fetch"}
	moved("delivery", "configsync_rpc_requests_total", map[string]string{"service": "delivery", "endpoint": "fetch", "code": "ok"}, 1)
	moved("delivery", "configsync_rpc_request_duration_seconds", fetch, 1)
	moved("delivery", "configsync_rpc_batch_size", fetch, 1)
	if !after["delivery"].Has("configsync_delivery_fetch_queue_depth", nil) {
		t.Error("delivery: no fetch queue depth")
	}
	moved("resolver", "configsync_rpc_requests_total", map[string]string{"service": "resolver", "code": "ok"}, 1)
	moved("resolver", "configsync_rpc_request_duration_seconds", map[string]string{"service": "resolver"}, 1)
	moved("credential", "configsync_rpc_requests_total", map[string]string{"service": "credential", "code": "ok"}, 2) // create + inject
	moved("credential", "configsync_credential_encrypts_total", map[string]string{"cipher": "local", "result": "ok"}, 1)
	moved("credential", "configsync_credential_decrypts_total", map[string]string{"cipher": "local", "result": "ok"}, 1)
	moved("ack-ingest", "configsync_consumer_messages_total", acked, 1)
	moved("ack-ingest", "configsync_consumer_batch_size", map[string]string{"consumer": "configsync-ack-ingest-acks"}, 1)
	moved("ack-ingest", "configsync_consumer_lag_seconds", map[string]string{"consumer": "configsync-ack-ingest-heartbeats"}, 1)
	moved("ack-ingest", "configsync_ingest_commit_duration_seconds", map[string]string{"kind": "acks", "result": "ok"}, 1)
	moved("ack-ingest", "configsync_ingest_commit_duration_seconds", map[string]string{"kind": "heartbeats", "result": "ok"}, 1)
	moved("ack-ingest", "configsync_db_pool_acquires_total", nil, 1)
	// The streams and durables each consuming service reads from JetStream with its own NATS user (its
	// permissions allow exactly these stream and consumer infos).
	for _, c := range []struct{ kind, family, label, value string }{
		{"ack-ingest", "configsync_stream_info_up", "stream", protocol.AcksStream},
		{"ack-ingest", "configsync_stream_info_up", "stream", protocol.HeartbeatsStream},
		{"ack-ingest", "configsync_consumer_info_up", "consumer", "configsync-ack-ingest-acks"},
		{"ack-ingest", "configsync_consumer_info_up", "consumer", protocol.HeartbeatsIngestDurable},
		{"delivery", "configsync_stream_info_up", "stream", protocol.EventsStream},
		{"delivery", "configsync_consumer_info_up", "consumer", "configsync-delivery-push"},
	} {
		if got := after[c.kind].Value(c.family, map[string]string{c.label: c.value}); got != 1 {
			t.Errorf("%s: %s{%s=%q} = %v, want 1", c.kind, c.family, c.label, c.value, got)
		}
	}
	for _, stream := range []string{protocol.AcksStream, protocol.HeartbeatsStream} {
		if after["ack-ingest"].Value("configsync_stream_max_bytes", map[string]string{"stream": stream}) <= 0 {
			t.Errorf("ack-ingest: no max bytes for %s", stream)
		}
	}
	if after["delivery"].Value("configsync_stream_messages", map[string]string{"stream": protocol.EventsStream}) < 1 {
		t.Error("delivery: the events stream holds no message after a PUT")
	}

	// A config the agent's policy refuses: a failed apply, and the host drifts (it keeps reporting the
	// previous version).
	if got := after["config-api"].Value("configsync_fleet_hosts_failed_apply", nil); got != 0 {
		t.Fatalf("fleet: %v hosts with a failed apply before any failed", got)
	}
	// Once the agent's heartbeat reports the collectors version, nothing is drifted.
	s.waitMetric("config-api", "configsync_fleet_hosts_drifted", nil, "= 0", func(v float64) bool { return v == 0 })
	s.putEnvConfig(1, "labels", map[string]any{
		"dynamic": []map[string]any{{"name": "x", "source": "command", "command": []string{"sh", "-c", "true"}}},
	})
	s.waitMetric("config-api", "configsync_fleet_hosts_failed_apply", nil, "= 1", func(v float64) bool { return v == 1 })
	s.waitMetric("config-api", "configsync_fleet_failed_applies", nil, "= 1", func(v float64) bool { return v == 1 })
	s.waitMetric("config-api", "configsync_fleet_hosts_drifted", nil, "= 1", func(v float64) bool { return v == 1 })
	last := s.scrape("config-api")
	if last.Value("configsync_fleet_lease_held", nil) != 1 || last.Value("configsync_fleet_hosts", nil) != 1 {
		t.Errorf("fleet: lease %v, hosts %v; want 1 and 1", last.Value("configsync_fleet_lease_held", nil), last.Value("configsync_fleet_hosts", nil))
	}
}

// TestMetricsCardinalityDoesNotGrowWithHosts registers 10 hosts, then 1,000 (the batch registration
// route), with heartbeats for all of them: every service exports as many configsync_ series at 1,000
// hosts as at 10, and no label value is an id. Both phases must do the same kinds of work: the simulated
// hosts report no versions, so anti-entropy would repair the second phase's hosts (whose heartbeats come
// more than a repair grace after the first phase's write) through an endpoint the first phase never
// calls, a new series of a bounded label that says nothing about cardinality. The grace is set past the
// test's length so no repair runs in either phase.
func TestMetricsCardinalityDoesNotGrowWithHosts(t *testing.T) {
	s := startStack(t, stackOptions{replicas: 1, serviceEnv: []string{"CONFIGSYNC_REPAIR_GRACE=1h"}})
	var agents []string
	register := func(from, to int) {
		t.Helper()
		batch := make([]map[string]string, 0, to-from)
		for i := from; i < to; i++ {
			batch = append(batch, map[string]string{"hostname": fmt.Sprintf("fleet-%04d", i)})
		}
		var hosts []struct {
			ID      string `json:"id"`
			AgentID string `json:"agent_id"`
		}
		s.api(1).mustDo(t, http.MethodPost, "/api/v1/environments/"+s.envID+"/hosts/batch", map[string]any{"hosts": batch}, &hosts)
		if len(hosts) != to-from {
			t.Fatalf("registered %d hosts, want %d", len(hosts), to-from)
		}
		for _, h := range hosts {
			agents = append(agents, h.AgentID)
		}
	}
	heartbeats := func() {
		t.Helper()
		for _, id := range agents {
			b, _ := json.Marshal(protocol.Heartbeat{AgentID: id, SentAt: time.Now().UTC(), AgentVersion: "e2e",
				ConfigHash: "sha256:e2e", ConfigVersions: map[string]int64{}})
			if err := s.obs.nc.Publish(protocol.HeartbeatSubject(id), b); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.obs.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	series := func(n int) map[string]map[string]int {
		t.Helper()
		register(len(agents), n)
		heartbeats()
		want := float64(n)
		s.waitMetric("config-api", "configsync_fleet_hosts_online", nil, fmt.Sprintf("= %d", n), func(v float64) bool { return v == want })
		// A push to every online host: resolver batches, delivery's fan-out and one command per host.
		sent := s.scrape("delivery").Value("configsync_delivery_commands_published_total", map[string]string{"result": "ok"})
		s.putEnvConfig(1, "labels", map[string]any{"static": map[string]any{"hosts": strconv.Itoa(n)}})
		s.waitMetric("delivery", "configsync_delivery_commands_published_total", map[string]string{"result": "ok"},
			fmt.Sprintf("moved by %d", n), func(v float64) bool { return v >= sent+want })
		known := map[string]bool{}
		for _, id := range agents {
			known[id] = true
		}
		out := map[string]map[string]int{}
		for kind, sc := range s.scrapeAll() {
			out[kind] = map[string]int{}
			for name, f := range sc {
				if strings.HasPrefix(name, "configsync_") {
					out[kind][name] = len(f.GetMetric())
				}
			}
			for name := range sc {
				for _, l := range sc.Labels(name) {
					for k, v := range l {
						if strings.Contains(v, s.envID) || strings.Contains(v, s.clientID) || strings.HasPrefix(v, "fleet-") {
							t.Errorf("%s: %s has an id in label %s=%q", kind, name, k, v)
						}
						if known[v] {
							t.Errorf("%s: %s has an agent id in label %s=%q", kind, name, k, v)
						}
					}
				}
			}
		}
		return out
	}
	small := series(10)
	large := series(1000)
	for _, kind := range serviceNames {
		total10, total1000 := 0, 0
		var diffs []string
		names := map[string]bool{}
		for n := range small[kind] {
			names[n] = true
		}
		for n := range large[kind] {
			names[n] = true
		}
		for n := range names {
			total10 += small[kind][n]
			total1000 += large[kind][n]
			if small[kind][n] != large[kind][n] {
				diffs = append(diffs, fmt.Sprintf("%s %d -> %d", n, small[kind][n], large[kind][n]))
			}
		}
		sort.Strings(diffs)
		t.Logf("%s: %d configsync_ series at 10 hosts, %d at 1000", kind, total10, total1000)
		if len(diffs) > 0 {
			t.Errorf("%s: series changed with the number of hosts: %s", kind, strings.Join(diffs, "; "))
		}
	}
}
