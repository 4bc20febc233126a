package faults_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// TestAgentKilledDuringCacheWrites SIGKILLs the agent process at random moments while it is busy
// writing its config cache, restarts it, and does it again.
//
// Setup: the real agent binary (a crash must be a real process death, mid system call) on an
// in-process NATS; no backend: the test itself sends config_update commands straight to the agent's
// command subject, a burst at a time, each changing one of four types with payloads whose size varies
// from a few bytes to tens of KiB, so a torn or mixed write could not parse or could not match. Every
// command makes the agent rewrite its cache. The first burst is timed to its last ack; later kills
// land at a random moment within that time, or (every other one) after a random number of commands,
// as soon as the agent's next temp file appears: inside a write.
//
// Proves: after every kill the cache file is exactly what it held before the burst plus the first j
// commands of the burst, for some j (old or new, never torn, mixed or going back), and the restarted
// agent loads it as is: no corrupt file set aside, temp files of the interrupted write cleaned up.
func TestAgentKilledDuringCacheWrites(t *testing.T) {
	t.Parallel()
	srv := testinfra.NATS(t, testinfra.WithTLS())
	nc := srv.Connect(t)
	const agentID = "cache-kill-agent"
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	cfgPath := filepath.Join(dir, "agent.yaml")
	// The local policy allows what the commands below ask for: watch_files under /srv and healthcheck
	// intervals from 1s (the defaults would refuse them, and a refused config is never cached). The test
	// plays the backend with unsigned commands: what it proves is the cache's crash safety, so the agent
	// skips signature checks (signed configs are proven in agent/agentrun and e2e).
	cfg := fmt.Sprintf("agent_id: %s\nnats:\n  url: %s\n  tls:\n    ca_file: %s\ndata_dir: %s\nboot_jitter: 0s\nfetch_timeout: 1s\nlog_format: json\nlog_level: info\n"+
		"policy:\n  read_paths: [/srv]\n  limits:\n    min_interval: 1s\ntrust:\n  insecure_skip_verify: true\n",
		agentID, srv.URL(), srv.CAFile(), dataDir)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	proc := newProcess(t, "agent", binary(t, "agent"), []string{"-config", cfgPath}, nil)

	var mu sync.Mutex
	acked := map[int64]bool{}
	sub, err := nc.Subscribe(protocol.AckSubject(agentID), func(m *nats.Msg) {
		var a protocol.Ack
		if json.Unmarshal(m.Data, &a) == nil {
			mu.Lock()
			acked[a.Version] = true
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	types := []string{agentconfig.Labels, agentconfig.WatchFiles, agentconfig.Healthcheck, agentconfig.LogShipping}
	var sent []change // every command sent, in order; versions are 1, 2, 3, ...
	send := func(n int) int64 {
		for range n {
			v := int64(len(sent) + 1)
			typ := types[int(v)%len(types)]
			ch := change{configType: typ, version: v, data: payloadFor(typ, v)}
			sent = append(sent, ch)
			cmd, _ := json.Marshal(protocol.Command{CommandID: fmt.Sprintf("cmd-%d", v), Type: protocol.CommandConfigUpdate,
				ConfigType: typ, Version: v, Payload: ch.data})
			if err := nc.Publish(protocol.CommandSubject(agentID), cmd); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return int64(len(sent))
	}

	const cycles, burst = 10, 120
	var window time.Duration
	held := map[string]change{} // what the cache held after the previous kill (the restarted agent loads it)
	midWrite := 0
	for cycle := 0; cycle < cycles; cycle++ {
		proc.start(t)
		proc.waitLogged(t, 30*time.Second, "agent running")
		if n := proc.logged("config cache corrupt; starting empty"); n != 0 {
			t.Fatalf("cycle %d: the restarted agent found its cache corrupt", cycle)
		}
		if left := tempFiles(t, dataDir); len(left) != 0 {
			t.Fatalf("cycle %d: temp files left after the restart: %v", cycle, left)
		}
		if _, err := os.Stat(filepath.Join(dataDir, "config.cache.json.corrupt")); err == nil {
			t.Fatalf("cycle %d: a corrupt cache was set aside", cycle)
		}

		first := len(sent)
		start := time.Now()
		last := send(burst)
		if cycle == 0 {
			// Calibrate: how long the agent takes to process a whole burst.
			testinfra.EventuallyNoError(t, 60*time.Second, func() error {
				mu.Lock()
				defer mu.Unlock()
				if acked[last] {
					return nil
				}
				return fmt.Errorf("%d acks", len(acked))
			}, "the agent to acknowledge the first burst")
			window = time.Since(start)
			t.Logf("a burst of %d cache writes takes %s", burst, window.Round(time.Millisecond))
		} else if cycle%2 == 0 {
			time.Sleep(rand.N(window)) // a random moment of the burst
		} else {
			// Inside a write: after a random number of cached commands, at the next temp file seen.
			after := last - int64(burst) + 1 + rand.Int64N(burst/2)
			testinfra.EventuallyNoError(t, 30*time.Second, func() error {
				mu.Lock()
				defer mu.Unlock()
				if acked[after] {
					return nil
				}
				return errors.New("not yet")
			}, "the agent to get into the burst")
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
				mu.Lock()
				done := acked[last]
				mu.Unlock()
				if done || len(tempFiles(t, dataDir)) > 0 {
					break
				}
				time.Sleep(50 * time.Microsecond)
			}
		}
		proc.kill(t)
		if len(tempFiles(t, dataDir)) > 0 {
			midWrite++
		}
		// The agent handles commands in order and loses the rest of the burst when it dies, so the cache
		// must be what it held before plus exactly the first j commands of this burst, for some j.
		got, j, err := matchBurst(filepath.Join(dataDir, "config.cache.json"), held, sent[first:])
		if err != nil {
			t.Fatalf("cycle %d: the cache after the kill is neither old nor new: %v", cycle, err)
		}
		t.Logf("cycle %d: killed after %d of %d commands of the burst were cached", cycle, j, burst)
		held = got
	}
	t.Logf("%d kills, %d of them mid-write (a temp file was left)", cycles, midWrite)
}

// change is one config_update the test sent.
type change struct {
	configType string
	version    int64
	data       json.RawMessage
}

// payloadFor builds a valid config of configType whose size depends on v (a few bytes to ~40 KiB).
func payloadFor(configType string, v int64) json.RawMessage {
	n := int(v*37%200) + 1
	var b []byte
	switch configType {
	case agentconfig.Labels:
		static := map[string]string{}
		for i := range n {
			static[fmt.Sprintf("k%03d", i)] = strings.Repeat(string(rune('a'+i%26)), 100) + fmt.Sprint(v)
		}
		b, _ = json.Marshal(map[string]any{"static": static})
	case agentconfig.WatchFiles:
		// Within the cap on paths, longer paths keep the payload as large as 200 would be.
		paths := make([]string, min(n, agentconfig.MaxPaths))
		for i := range paths {
			paths[i] = fmt.Sprintf("/srv/app-%d/v%d/%s", i, v, strings.Repeat("x", 100))
		}
		b, _ = json.Marshal(map[string]any{"paths": paths, "max_file_size": v})
	case agentconfig.Healthcheck:
		b = []byte(fmt.Sprintf(`{"interval_seconds":%d,"timeout_seconds":1}`, v))
	default:
		b = []byte(fmt.Sprintf(`{"enabled":%t,"level":"info"}`, v%2 == 0))
	}
	return b
}

// matchBurst reads the cache file and checks that it holds exactly held updated with the first j
// commands of burst, for some j; it returns what the file holds and j.
func matchBurst(path string, held map[string]change, burst []change) (map[string]change, int, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		if len(held) == 0 {
			return held, 0, nil
		}
		return nil, 0, fmt.Errorf("the cache file is gone")
	}
	if err != nil {
		return nil, 0, err
	}
	var entries []agentconfig.CacheEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, 0, fmt.Errorf("not JSON (%d bytes): %w", len(data), err)
	}
	var newest int64
	got := map[string]change{}
	for _, e := range entries {
		var c bytes.Buffer
		if err := json.Compact(&c, e.ConfigData); err != nil {
			return nil, 0, fmt.Errorf("entry %s: %w", e.ConfigType, err)
		}
		got[e.ConfigType] = change{configType: e.ConfigType, version: e.Version, data: c.Bytes()}
		newest = max(newest, e.Version)
	}
	j := 0
	if len(burst) > 0 && newest >= burst[0].version {
		j = int(newest-burst[0].version) + 1
		if j > len(burst) {
			return nil, 0, fmt.Errorf("newest version %d was never sent", newest)
		}
	}
	want := maps.Clone(held)
	for _, c := range burst[:j] {
		want[c.configType] = c
	}
	if len(got) != len(want) {
		return nil, 0, fmt.Errorf("%d entries, the state after %d commands of the burst has %d", len(got), j, len(want))
	}
	for typ, w := range want {
		g, ok := got[typ]
		if !ok || g.version != w.version || !bytes.Equal(g.data, w.data) {
			return nil, 0, fmt.Errorf("entry %s is version %d (%d bytes), the state after %d commands of the burst has version %d (%d bytes)",
				typ, g.version, len(g.data), j, w.version, len(w.data))
		}
	}
	return got, j, nil
}

func tempFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".config.cache.*.tmp"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
