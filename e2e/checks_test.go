package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// waitOnline waits until the API lists every agent's host as online (a heartbeat went agent -> NATS ->
// ack-ingest -> PostgreSQL -> config-api).
func (s *stack) waitOnline(api int) {
	s.t.Helper()
	s.eventually(convergeTimeout, "every host online in the API", func() error {
		r := s.api(api).do(http.MethodGet, "/api/v1/environments/"+s.envID+"/hosts", nil)
		var hosts []hostView
		if r.err != nil || r.status != http.StatusOK || r.data(&hosts) != nil {
			return errors.New(r.String())
		}
		online := map[string]bool{}
		var state []string
		for _, h := range hosts {
			online[h.ID] = h.Online
			state = append(state, fmt.Sprintf("%s online=%v last_heartbeat_at=%v", h.Hostname, h.Online, h.LastHeartbeatAt))
		}
		for _, a := range s.agents {
			if !online[a.hostID] {
				return errors.New(strings.Join(state, "; "))
			}
		}
		return nil
	})
}

// waitApplied waits until the API shows, for every given agent, the type applied at version (the ack
// went agent -> NATS -> ack-ingest -> host_config_apply_status -> config-api).
func (s *stack) waitApplied(api int, timeout time.Duration, configType string, version int64, agents ...*agent) {
	s.t.Helper()
	names := make([]string, len(agents))
	for i, a := range agents {
		names[i] = a.hostname
	}
	what := fmt.Sprintf("%s v%d applied by %s (apply_status in the API)", configType, version, strings.Join(names, ", "))
	s.eventually(timeout, what, func() error {
		var state []string
		ok := true
		for _, a := range agents {
			h, r, good := s.host(api, a)
			if !good {
				state = append(state, a.hostname+": "+r.String())
				ok = false
				continue
			}
			st, has := h.ApplyStatus[configType]
			state = append(state, fmt.Sprintf("%s: apply_status[%s]=%s", a.hostname, configType, jsonString(st)))
			if !has || st.Version != version || st.Status != protocol.AckApplied {
				ok = false
			}
		}
		if ok {
			return nil
		}
		return errors.New(strings.Join(state, "; "))
	})
}

// readCache reads an agent's cache file as the agent wrote it.
func readCache(a *agent) ([]agentconfig.CacheEntry, []byte, error) {
	raw, err := os.ReadFile(a.cachePath())
	if err != nil {
		return nil, nil, err
	}
	var entries []agentconfig.CacheEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, raw, fmt.Errorf("cache file %s: %w", a.cachePath(), err)
	}
	return entries, raw, nil
}

// mustCacheEntry returns an agent's cached entry of one type.
func (s *stack) mustCacheEntry(a *agent, configType string) agentconfig.CacheEntry {
	s.t.Helper()
	entries, raw, err := readCache(a)
	if err != nil {
		s.t.Fatalf("%s: %v", a.hostname, err)
	}
	for _, e := range entries {
		if e.ConfigType == configType {
			return e
		}
	}
	s.t.Fatalf("%s: cache file has no %s entry:\n%s", a.hostname, configType, raw)
	return agentconfig.CacheEntry{}
}

// waitConverged waits until the drift report is empty and every host's reported config_hash is the
// hash of its agent's cache file as written on disk.
func (s *stack) waitConverged(api int, timeout time.Duration) {
	s.t.Helper()
	s.eventually(timeout, "drift list empty and reported hashes equal to the cache files' hashes", func() error {
		d, r, ok := s.drift(api)
		if !ok {
			return errors.New(r.String())
		}
		if len(d.Hosts) > 0 || d.CheckedHosts != len(s.agents) {
			return errors.New("drift: " + string(r.body))
		}
		for _, a := range s.agentList() {
			entries, _, err := readCache(a)
			if err != nil {
				return err
			}
			want := agentconfig.ConfigHash(entries)
			h, r, ok := s.host(api, a)
			if !ok {
				return errors.New(r.String())
			}
			if h.ConfigHash == nil || *h.ConfigHash != want {
				return fmt.Errorf("%s reports config_hash %v, its cache file hashes to %s", a.hostname, deref(h.ConfigHash), want)
			}
		}
		return nil
	})
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// assertNoSecretInLogs fails when any process log holds secret.
func (s *stack) assertNoSecretInLogs(secret string) {
	s.t.Helper()
	for _, p := range s.procs {
		if strings.Contains(p.logText(), secret) {
			s.t.Errorf("the log of %s (%s) contains the credential secret", p.name, p.logPath)
		}
	}
}

// fetchAs asks delivery for an agent's configs as that agent would (its own NATS user, its own inbox
// prefix), on a fresh connection.
func (s *stack) fetchAs(nc *nats.Conn, a *agent) (protocol.FetchReply, error) {
	var reply protocol.FetchReply
	req, _ := json.Marshal(protocol.FetchRequest{AgentID: a.agentID})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, protocol.FetchSubject(a.agentID), req)
	if err != nil {
		return reply, fmt.Errorf("fetch as %s: %w", a.hostname, err)
	}
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return reply, fmt.Errorf("fetch as %s: reply %q: %w", a.hostname, msg.Data, err)
	}
	if reply.Error != nil {
		return reply, fmt.Errorf("fetch as %s: backend error %s", a.hostname, jsonString(reply.Error))
	}
	return reply, nil
}

// agentConn connects to NATS as a second session of agent a's identity (a user the test issues for the
// same agent id), with the agent's inbox prefix.
func (s *stack) agentConn(a *agent) *nats.Conn {
	s.t.Helper()
	creds, err := s.auth.Issuer().IssueAgent(a.agentID)
	if err != nil {
		s.t.Fatal(err)
	}
	path := a.dataDir + ".e2e-fetch.creds"
	if err := os.WriteFile(path, creds.File, 0o600); err != nil {
		s.t.Fatal(err)
	}
	nc, err := nats.Connect(s.nats.URL(), nats.UserCredentials(path), nats.Name("e2e-fetch/"+a.agentID),
		nats.CustomInboxPrefix(protocol.InboxPrefix(a.agentID)), nats.RootCAs(s.nats.CAFile()))
	if err != nil {
		s.t.Fatalf("e2e: connect as agent %s: %v", a.hostname, err)
	}
	s.t.Cleanup(nc.Close)
	return nc
}

// collector is the shape the tests read back out of collectors payloads.
type collector struct {
	Type         string `json:"type"`
	Name         string `json:"name"`
	Username     string `json:"username"`
	Password     string `json:"password"`
	CredentialID string `json:"credential_id"`
	Interval     string `json:"interval"`
}

func decodeCollectors(raw json.RawMessage) ([]collector, error) {
	var cs []collector
	err := json.Unmarshal(raw, &cs)
	return cs, err
}

// sortedKeys returns a map's keys in order (stable failure messages).
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// appliedCount is how many times the agent logged a pushed config as applied ("config applied", one
// line per config_update command it handled).
func (a *agent) appliedCount(configType string, version int64) int {
	n := 0
	for _, l := range a.proc.logLines("config applied") {
		if l["config_type"] == configType && l["version"] == float64(version) {
			n++
		}
	}
	return n
}
