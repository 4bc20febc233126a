package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/testinfra"
)

// TestEndToEnd runs one replica of every service and two agents, and walks the whole life of a config:
// push to an environment, a host override, a collector with a credential, NATS going away and coming
// back, drift detection.
func TestEndToEnd(t *testing.T) {
	s := startStack(t, stackOptions{replicas: 1, agents: []string{"host-a", "host-b"}})
	a, b := s.agents["host-a"], s.agents["host-b"]
	s.waitOnline(1)

	// 1. An environment config reaches both agents; their acks show in the API.
	labelsV := s.putEnvConfig(1, "labels", map[string]any{"static": map[string]any{"team": "core", "tier": "web"}})
	s.waitApplied(1, convergeTimeout, "labels", labelsV, a, b)
	for _, ag := range []*agent{a, b} {
		if got := s.obs.commandsFor(ag.agentID, "labels", labelsV); len(got) != 1 {
			t.Errorf("%s received %d config_update commands for labels v%d, want 1", ag.hostname, len(got), labelsV)
		}
		if n := ag.appliedCount("labels", labelsV); n != 1 {
			t.Errorf("%s logged 'config applied' %d times for labels v%d, want 1", ag.hostname, n, labelsV)
		}
		if e := s.mustCacheEntry(ag, "labels"); e.Version != labelsV {
			t.Errorf("%s caches labels v%d, want v%d", ag.hostname, e.Version, labelsV)
		}
	}

	// 2. A host override changes only that host; its effective config is "merged".
	overrideV := s.putHostConfig(1, a, "labels", map[string]any{"static": map[string]any{"role": "db"}})
	s.waitApplied(1, convergeTimeout, "labels", overrideV, a)
	var eff effectiveConfig
	s.api(1).mustDo(t, http.MethodGet, "/api/v1/hosts/"+a.hostID+"/agent-configs/labels", nil, &eff)
	var effData struct {
		Static map[string]string `json:"static"`
	}
	if err := json.Unmarshal(eff.ConfigData, &effData); err != nil {
		t.Fatalf("effective labels of host-a: %v (%s)", err, eff.ConfigData)
	}
	if eff.Source != "merged" || eff.Version != overrideV ||
		effData.Static["team"] != "core" || effData.Static["tier"] != "web" || effData.Static["role"] != "db" {
		t.Errorf("GET effective labels of host-a = %s, want source merged, version %d, static team+tier+role", jsonString(eff), overrideV)
	}
	// A later environment write acts as a barrier: once host-b applied it, a push of the override to
	// host-b would have arrived too.
	barrierV := s.putEnvConfig(1, "healthcheck", map[string]any{"interval_seconds": 30, "timeout_seconds": 5})
	s.waitApplied(1, convergeTimeout, "healthcheck", barrierV, a, b)
	if h, r, ok := s.host(1, b); !ok {
		t.Fatalf("GET host-b: %s", r)
	} else if st := h.ApplyStatus["labels"]; st.Version != labelsV {
		t.Errorf("host-b apply_status[labels] = %s after host-a's override, want still v%d", jsonString(st), labelsV)
	}
	if e := s.mustCacheEntry(b, "labels"); e.Version != labelsV {
		t.Errorf("host-b caches labels v%d after host-a's override, want v%d", e.Version, labelsV)
	}
	for _, c := range s.obs.commandsTo(b.agentID) {
		if c.cmd.ConfigType == "labels" && c.cmd.Version != labelsV {
			t.Errorf("host-b received labels v%d (command %s); the override was host-a's only", c.cmd.Version, c.cmd.CommandID)
		}
	}
	var effB effectiveConfig
	s.api(1).mustDo(t, http.MethodGet, "/api/v1/hosts/"+b.hostID+"/agent-configs/labels", nil, &effB)
	if effB.Source != "environment" || effB.Version != labelsV {
		t.Errorf("GET effective labels of host-b = %s, want source environment, version %d", jsonString(effB), labelsV)
	}

	// 3. A collector with a credential: the agent gets the secret, its cache file never does.
	secret := "e2e-pw-" + strconv.FormatInt(int64(os.Getpid()), 36) + "-Zq7"
	credID := s.createCredential(1, "pg-main", map[string]string{"username": "monitor", "password": secret})
	collectorsV := s.putEnvConfig(1, "collectors", []map[string]any{{
		"type": "postgres", "name": "main", "host": "127.0.0.1", "port": testinfra.FreePort(t), "database": "app",
		"credential_id": credID,
	}})
	s.waitApplied(1, convergeTimeout, "collectors", collectorsV, a, b)
	for _, ag := range []*agent{a, b} {
		cmds := s.obs.commandsFor(ag.agentID, "collectors", collectorsV)
		if len(cmds) != 1 {
			t.Fatalf("%s received %d collectors v%d commands, want 1", ag.hostname, len(cmds), collectorsV)
		}
		cs, err := decodeCollectors(cmds[0].cmd.Payload)
		if err != nil || len(cs) != 1 {
			t.Fatalf("%s collectors push payload %s: %v", ag.hostname, cmds[0].cmd.Payload, err)
		}
		if cs[0].Password != secret || cs[0].Username != "monitor" || cs[0].CredentialID != "" || len(cmds[0].cmd.SecretFields) == 0 {
			t.Errorf("%s collectors push: username %q, password injected %v, credential_id %q, secret_fields %v; want the secret injected, credential_id removed, secret_fields set",
				ag.hostname, cs[0].Username, cs[0].Password == secret, cs[0].CredentialID, cmds[0].cmd.SecretFields)
		}
		s.assertCacheRedacted(ag, secret)
	}
	r := s.api(1).mustDo(t, http.MethodGet, "/api/v1/hosts/"+a.hostID+"/agent-configs/collectors", nil, nil)
	if bytes.Contains(r.body, []byte(secret)) {
		t.Errorf("GET effective collectors returned the secret: %s", r)
	}

	// 4. What the agents report is what the backend expects.
	s.waitConverged(1, convergeTimeout)

	// 5. NATS goes away; a restarted agent runs from its cache; NATS comes back; everything converges,
	// including a write made while NATS was down.
	entriesBefore, _, err := readCache(a)
	if err != nil {
		t.Fatal(err)
	}
	hashBefore := agentconfig.ConfigHash(entriesBefore)
	runsBefore := len(a.proc.logLines("agent running"))
	s.nats.Shutdown()
	if !a.proc.stop(t) {
		t.Errorf("host-a's agent needed SIGKILL to stop while NATS was down")
	}
	a.proc.start(t)
	s.eventually(convergeTimeout, "restarted host-a agent running from its cache", func() error {
		runs := a.proc.logLines("agent running")
		if len(runs) <= runsBefore {
			return fmt.Errorf("%d 'agent running' lines, waiting for a new one; log tail:\n%s", len(runs), a.proc.logTail(5))
		}
		last := runs[len(runs)-1]
		if last["config_from_backend"] == false && last["config_hash"] == hashBefore {
			return nil
		}
		return errors.New(jsonString(last))
	})
	// The restarted agent knows the collector only redacted: it must not run it with "[REDACTED]".
	s.assertCacheRedacted(a, secret)
	outageV := s.putEnvConfig(1, "healthcheck", map[string]any{"interval_seconds": 20, "timeout_seconds": 4})
	s.restartNATS()
	s.waitApplied(1, recoverTimeout, "healthcheck", outageV, a, b)
	s.waitOnline(1)
	s.waitConverged(1, recoverTimeout)
	s.eventually(recoverTimeout, "host-a's re-fetch after NATS came back carrying the injected secret", func() error {
		for _, rep := range s.obs.fetchRepliesTo(a.agentID) {
			cs, err := decodeCollectors(rep.Configs["collectors"])
			if err == nil && len(cs) == 1 && cs[0].Password == secret {
				return nil
			}
		}
		return fmt.Errorf("%d fetch replies seen for host-a", len(s.obs.fetchRepliesTo(a.agentID)))
	})
	s.assertCacheRedacted(a, secret)

	// 6. A cache changed by hand (value changed, signature kept) is not used at the next start: its
	// signature no longer verifies, the agent drops the entry, fetches, and converges to what the
	// resolver signed; no host stays in the drift list and the edited hash is never reported.
	if !a.proc.stop(t) {
		t.Errorf("host-a's agent needed SIGKILL to stop")
	}
	tampered := s.tamperCache(a, "labels")
	a.proc.start(t)
	s.eventually(recoverTimeout, "host-a refusing its hand-edited cache entry", func() error {
		if len(a.proc.logLines("cached config not used: its signature does not verify")) == 0 {
			return errors.New("host-a did not log the refused cache entry")
		}
		return nil
	})
	s.waitConverged(1, recoverTimeout)
	if h, r, ok := s.host(1, a); !ok || h.ConfigHash == nil || *h.ConfigHash == tampered {
		t.Errorf("host-a reports the hash of its hand-edited cache (or no hash): %s", r.String())
	}
	if e := s.mustCacheEntry(a, "labels"); strings.Contains(string(e.ConfigData), "edited_by_hand") {
		t.Errorf("host-a still caches the hand-edited labels: %s", e.ConfigData)
	}

	s.assertNoSecretInLogs(secret)
	if err := s.alive(); err != nil {
		t.Fatal(err)
	}
}

// createCredential stores a credential through the API (metadata comes back, never the secret).
func (s *stack) createCredential(api int, name string, secret map[string]string) string {
	s.t.Helper()
	var meta struct {
		ID     string   `json:"id"`
		Fields []string `json:"fields"`
	}
	r := s.api(api).mustDo(s.t, http.MethodPost, "/api/v1/clients/"+s.clientID+"/credentials",
		map[string]any{"name": name, "environment_id": s.envID, "secret": secret}, &meta)
	for _, v := range secret {
		if bytes.Contains(r.body, []byte(v)) {
			s.t.Fatalf("credential creation answered with a secret value: HTTP %d", r.status)
		}
	}
	if meta.ID == "" {
		s.t.Fatalf("credential creation answered without an id: %s", r.body)
	}
	return meta.ID
}

// assertCacheRedacted checks the agent's cache file: collectors present, redacted, "[REDACTED]" in
// place of injected values, and the secret nowhere in the file.
func (s *stack) assertCacheRedacted(a *agent, secret string) {
	s.t.Helper()
	e := s.mustCacheEntry(a, "collectors")
	_, raw, _ := readCache(a)
	if bytes.Contains(raw, []byte(secret)) {
		s.t.Errorf("%s: the cache file %s contains the credential secret", a.hostname, a.cachePath())
	}
	cs, err := decodeCollectors(e.ConfigData)
	if err != nil || len(cs) != 1 {
		s.t.Errorf("%s: cached collectors %s: %v", a.hostname, e.ConfigData, err)
		return
	}
	if !e.Redacted || cs[0].Password != "[REDACTED]" || len(e.SecretFields) == 0 {
		s.t.Errorf("%s: cached collectors entry redacted=%v password=%q secret_fields=%v; want redacted, \"[REDACTED]\", pointers listed",
			a.hostname, e.Redacted, cs[0].Password, e.SecretFields)
	}
}

// tamperCache edits one entry of a stopped agent's cache file by hand: new data and a version far
// ahead of the backend's, its signed statement kept as it was. It returns the config_hash the edited
// cache would report if the agent used it.
func (s *stack) tamperCache(a *agent, configType string) string {
	s.t.Helper()
	if a.proc.running() {
		s.t.Fatalf("tamperCache: %s is running", a.hostname)
	}
	raw, err := os.ReadFile(a.cachePath())
	if err != nil {
		s.t.Fatal(err)
	}
	var entries []struct {
		agentconfig.CacheEntry
		Statement json.RawMessage `json:"statement,omitempty"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		s.t.Fatal(err)
	}
	found := false
	hashed := make([]agentconfig.CacheEntry, 0, len(entries))
	for i, e := range entries {
		if e.ConfigType == configType {
			found = true
			if len(e.Statement) == 0 {
				s.t.Fatalf("tamperCache: %s's cached %s carries no signed statement", a.hostname, configType)
			}
			var data map[string]any
			if err := json.Unmarshal(e.ConfigData, &data); err != nil {
				s.t.Fatalf("cached %s: %v", configType, err)
			}
			static, _ := data["static"].(map[string]any)
			if static == nil {
				static = map[string]any{}
			}
			static["edited_by_hand"] = "yes"
			data["static"] = static
			entries[i].ConfigData, _ = json.Marshal(data)
			entries[i].Version += 1000
		}
		hashed = append(hashed, entries[i].CacheEntry)
	}
	if !found {
		s.t.Fatalf("tamperCache: %s has no cached %s", a.hostname, configType)
	}
	out, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(a.cachePath(), out, 0o600); err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("edited %s's cache by hand: %s", a.hostname, strings.TrimSpace(string(out)))
	return agentconfig.ConfigHash(hashed)
}
