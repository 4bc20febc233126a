package fleet

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// TestRefusedConfigIsAckedFailedAndNotApplied: agents whose simulated policy refuses a config ack its
// version failed with the reason and keep what they held; the others apply it; a later config the
// policy allows (a revert) and a deletion are applied by all.
func TestRefusedConfigIsAckedFailedAndNotApplied(t *testing.T) {
	url := startNATS(t)
	backend := newFakeBackend(t, url)
	ids := agentIDs(10, "rf")
	refusing := map[string]bool{}
	for i, id := range ids {
		if i%2 == 0 {
			refusing[id] = true
		}
	}
	const reason = "policy: commands: uname: command labels are off (policy.commands is empty)"
	f, err := New(Config{URL: url, Conns: 2, Refuse: func(agentID, configType string, payload json.RawMessage) string {
		if refusing[agentID] && configType == "labels" && strings.Contains(string(payload), `"command"`) {
			return reason
		}
		return ""
	}}, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Subscribe(); err != nil {
		t.Fatal(err)
	}
	push := func(version int64, payload string) {
		for _, id := range ids {
			sendCommand(t, backend.nc, id, protocol.Command{CommandID: "c", Type: protocol.CommandConfigUpdate,
				ConfigType: "labels", Version: version, Payload: json.RawMessage(payload)})
		}
		testinfra.Eventually(t, waitTimeout, backend.count(func() int {
			for _, id := range ids {
				acks := backend.acks[id]
				if len(acks) == 0 || acks[len(acks)-1].Version != version {
					return 0
				}
			}
			return 1
		}), "every agent acked the push")
	}

	push(5, `{"static":{"ring":"all"}}`)
	push(6, `{"static":{"ring":"all"},"dynamic":[{"name":"kernel","source":"command","command":["uname","-r"]}]}`)
	backend.mu.Lock()
	for i, id := range ids {
		a := backend.acks[id][1]
		if refusing[id] {
			if a.Status != protocol.AckFailed || a.Error != reason || a.Version != 6 || a.AppliedAt.IsZero() {
				t.Errorf("%s (refusing) acked %+v, want version 6 failed with the reason", id, a)
			}
			if v := f.AgentState(i).ConfigVersions["labels"]; v != 5 {
				t.Errorf("%s (refusing) holds labels version %d, want 5 kept", id, v)
			}
		} else {
			if a.Status != protocol.AckApplied || a.Error != "" || a.Version != 6 {
				t.Errorf("%s acked %+v, want version 6 applied", id, a)
			}
			if v := f.AgentState(i).ConfigVersions["labels"]; v != 6 {
				t.Errorf("%s holds labels version %d, want 6", id, v)
			}
		}
	}
	backend.mu.Unlock()
	if got := f.ReceivedVersions("labels"); len(got) != len(ids) || got[ids[0]] != 6 || got[ids[1]] != 6 {
		t.Fatalf("received versions %v: every agent received version 6, refused or not", got)
	}
	if s := f.Stats(); s.Refused != 5 || s.Applied != 15 {
		t.Fatalf("stats: %d refused, %d applied; want 5 and 15", s.Refused, s.Applied)
	}

	// The previous config again, as a newer version (what a revert pushes), and then a deletion.
	push(7, `{"static":{"ring":"all"}}`)
	push(7, `{"static":{"ring":"all"}}`) // the same version again: applied and acked again, counted as repeated
	testinfra.Eventually(t, waitTimeout, func() bool { return f.Stats().Repeated == int64(len(ids)) }, "every agent counted the repeated version")
	push(8, `null`)
	for i, id := range ids {
		if v := f.AgentState(i).ConfigVersions["labels"]; v != 0 {
			t.Errorf("%s still holds labels version %d after the deletion", id, v)
		}
		backend.mu.Lock()
		for _, a := range backend.acks[id][2:] {
			if a.Status != protocol.AckApplied {
				t.Errorf("%s acked %+v, want applied", id, a)
			}
		}
		backend.mu.Unlock()
	}
	if s := f.Stats(); s.Refused != 5 || s.Repeated != int64(len(ids)) {
		t.Fatalf("%d refused and %d repeated after the revert and the deletion, want still 5 and %d", s.Refused, s.Repeated, len(ids))
	}
}
