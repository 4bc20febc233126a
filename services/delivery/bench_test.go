package delivery_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

const benchFleet = 10000

// BenchmarkFetchBurst replays a fleet restart: 10,000 agents fetch their configs, each after a random
// boot jitter of 0-5 s (the agent's), against one delivery, resolver and credential instance. Every
// fetch must succeed; it reports the p50/p99 latency and how long the burst took.
func BenchmarkFetchBurst(b *testing.B) {
	s := newStack(b, benchFleet)
	s.startResolver(b)
	s.startCredential(b)
	s.startDelivery(b, testDeliveryConfig(b))
	cred := s.createCredential(b, s.clientID, "db", map[string]string{"password": "pw"})
	s.putEnv(b, "collectors", fmt.Sprintf(`[{"type":"mysql","name":"db","host":"db","port":3306,"credential_id":%q},{"type":"http","name":"web","url":"http://x"}]`, cred))
	s.putEnv(b, "labels", `{"static":{"env":"prod"}}`)
	s.putEnv(b, "intervals", `{"metrics":"30s","heartbeat":"30s"}`)
	s.putEnv(b, "watch_files", `{"paths":["/etc"],"exclude_patterns":["*.swp"]}`)
	b.ResetTimer()
	for range b.N {
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			latencies []time.Duration
			failed    atomic.Int64
		)
		start := time.Now()
		for _, h := range s.hosts {
			wg.Go(func() {
				time.Sleep(time.Duration(rand.Int64N(int64(5 * time.Second))))
				data, _ := json.Marshal(protocol.FetchRequest{AgentID: h.agent})
				t0 := time.Now()
				msg, err := testinfra.RequestAsAgent(s.nc, h.agent, protocol.FetchSubject(h.agent), data, 10*time.Second)
				d := time.Since(t0)
				var r protocol.FetchReply
				if err != nil || json.Unmarshal(msg.Data, &r) != nil || r.Error != nil || len(r.TypeErrors) != 0 || len(r.Configs) != 4 {
					failed.Add(1)
					return
				}
				mu.Lock()
				latencies = append(latencies, d)
				mu.Unlock()
			})
		}
		wg.Wait()
		took := time.Since(start)
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d of %d fetches failed", n, benchFleet)
		}
		slices.Sort(latencies)
		b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(took.Seconds(), "burst-s")
	}
}

// BenchmarkPushFanOut measures one environment-wide change reaching 10,000 hosts (two thirds online):
// from the event's publication until it is acknowledged, every command having been published.
func BenchmarkPushFanOut(b *testing.B) {
	s := newStack(b, benchFleet)
	s.startResolver(b)
	s.startCredential(b)
	cfg := testDeliveryConfig(b)
	cfg.PushPageSize = 1000
	cfg.PushAckWait = 30 * time.Second
	s.startDelivery(b, cfg)
	cred := s.createCredential(b, s.clientID, "db", map[string]string{"password": "pw"})
	online := 0
	for _, h := range s.hosts {
		if h.online {
			online++
		}
	}
	b.ResetTimer()
	for i := range b.N {
		v := s.putEnv(b, "collectors", fmt.Sprintf(`[{"type":"mysql","name":"db%d","host":"db","port":3306,"credential_id":%q}]`, i, cred))
		s.fleet.reset()
		start := time.Now()
		s.changed(b, protocol.ConfigChanged{Scope: protocol.ScopeEnvironment, ConfigType: "collectors", Version: v})
		s.eventsSettled(b)
		took := time.Since(start)
		if got := len(s.fleet.agents()); got != online {
			b.Fatalf("%d agents received the push, want %d", got, online)
		}
		b.ReportMetric(took.Seconds(), "fanout-s")
		b.ReportMetric(float64(online)/took.Seconds(), "pushes/s")
	}
}
