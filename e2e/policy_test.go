package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/protocol"
)

// TestPolicyRefusesCommandLabel: the real binaries, the agent under its default local policy (no
// commands). An operator PUT of a command label reaches the agent, which refuses it: the ack is failed
// and names the config path and the policy rule, the API's apply_status and drift list show it, the
// shell never runs, and the previous labels keep running (metrics published after the refusal still
// carry them; the cache and the reported versions still hold the previous version).
func TestPolicyRefusesCommandLabel(t *testing.T) {
	s := startStack(t, stackOptions{replicas: 1, agents: []string{"host-a"}})
	a := s.agents["host-a"]
	s.waitOnline(1)

	var mu sync.Mutex
	var reports []struct {
		Time   time.Time         `json:"time"`
		Labels map[string]string `json:"labels"`
	}
	sub, err := s.obs.nc.Subscribe(protocol.ObservationSubject(a.agentID, "metrics"), func(m *nats.Msg) {
		var r struct {
			Time   time.Time         `json:"time"`
			Labels map[string]string `json:"labels"`
		}
		if json.Unmarshal(m.Data, &r) == nil {
			mu.Lock()
			reports = append(reports, r)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	intervalsV := s.putEnvConfig(1, "intervals", map[string]any{"heartbeat": "5s", "metrics": "5s"})
	s.waitApplied(1, convergeTimeout, "intervals", intervalsV, a)
	labelsV := s.putEnvConfig(1, "labels", map[string]any{"static": map[string]any{"team": "core"}})
	s.waitApplied(1, convergeTimeout, "labels", labelsV, a)

	probe := filepath.Join(t.TempDir(), "shell-ran")
	refusedV := s.putEnvConfig(1, "labels", map[string]any{
		"static":  map[string]any{"team": "evil"},
		"dynamic": []map[string]any{{"name": "x", "source": "command", "command": []string{"sh", "-c", "touch " + probe}}},
	})
	const rule = "labels: dynamic[0].command: policy: commands: sh"
	var refusedAt time.Time
	s.eventually(convergeTimeout, fmt.Sprintf("labels v%d acknowledged failed naming the policy rule", refusedV), why(func() (string, bool) {
		h, r, ok := s.host(1, a)
		if !ok {
			return r.String(), false
		}
		st := h.ApplyStatus["labels"]
		refusedAt = st.AppliedAt
		return jsonString(st), st.Version == refusedV && st.Status == protocol.AckFailed && strings.Contains(st.Error, rule)
	}))
	if n := s.obs.commandsFor(a.agentID, "labels", refusedV); len(n) != 1 {
		t.Errorf("host-a received %d labels v%d commands, want 1", len(n), refusedV)
	}
	s.eventually(convergeTimeout, "host-a in the drift list with the refusal as a reason", why(func() (string, bool) {
		d, r, ok := s.drift(1)
		if !ok {
			return r.String(), false
		}
		want := fmt.Sprintf("labels: version %d failed to apply: %s", refusedV, rule)
		for _, h := range d.Hosts {
			if h.HostID != a.hostID {
				continue
			}
			for _, reason := range h.Reasons {
				if strings.HasPrefix(reason, want) {
					return string(r.body), h.ReportedVersions["labels"] == labelsV
				}
			}
		}
		return string(r.body), false
	}))

	// The previous labels keep running.
	if e := s.mustCacheEntry(a, "labels"); e.Version != labelsV {
		t.Errorf("host-a caches labels v%d, want the previous v%d", e.Version, labelsV)
	}
	s.eventually(convergeTimeout, "a metrics report after the refusal still labelled team=core", why(func() (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range reports {
			if r.Time.After(refusedAt) {
				return fmt.Sprintf("labels %v", r.Labels), r.Labels["team"] == "core" && r.Labels["x"] == ""
			}
		}
		return fmt.Sprintf("%d metrics reports, none after %s", len(reports), refusedAt), false
	}))
	if _, err := os.Stat(probe); err == nil {
		t.Errorf("the refused command label ran: %s exists", probe)
	}
	if len(a.proc.logLines("config update refused by the local policy")) == 0 {
		t.Errorf("host-a did not log the refusal; log tail:\n%s", a.proc.logTail(10))
	}
	if err := s.alive(); err != nil {
		t.Fatal(err)
	}
}
