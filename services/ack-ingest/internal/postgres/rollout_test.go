package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
)

// TestStagedRolloutLayers: anti-entropy reads each host's environment layer through rollout_layers. A
// host a running rollout reached has the version it joined at as its labels environment layer, the
// other keeps the environment row's (so neither is repaired to the other's); once the rollout is
// reverted (the environment row rewritten) both follow the row; a completed rollout whose data is the
// row keeps its members on the versions they joined at, and any later write ends that.
func TestStagedRolloutLayers(t *testing.T) {
	pool, hosts, s := newStore(t, 2)
	ctx := context.Background()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var clientID, envID uuid.UUID
	if err := pool.QueryRow(ctx, `SELECT client_id, environment_id FROM hosts WHERE id = $1`, hosts["agent-0"]).Scan(&clientID, &envID); err != nil {
		t.Fatal(err)
	}
	exec(`INSERT INTO environment_configs (environment_id, config_type, config_data, version) VALUES ($1, 'labels', '{"static":{}}', 10)`, envID)
	rolloutID := uuid.New()
	exec(`INSERT INTO rollouts (id, client_id, environment_id, config_type, state, plan, stages, config_data, previous_version, version)
	      VALUES ($1, $2, $3, 'labels', 'running', '{}', '[]', '{"static":{"a":"b"}}', 10, 20)`, rolloutID, clientID, envID)
	exec(`INSERT INTO rollout_hosts (rollout_id, host_id, stage, version) VALUES ($1, $2, 0, 20)`, rolloutID, hosts["agent-0"])

	at := time.Now()
	check := func(what string, want0, want1 int64) {
		t.Helper()
		at = at.Add(time.Second)
		var beats []ingest.HostHeartbeat
		for _, agent := range []string{"agent-0", "agent-1"} {
			beats = append(beats, ingest.HostHeartbeat{HostID: hosts[agent], EnvironmentID: envID,
				Heartbeat: ingest.Heartbeat{AgentID: agent, ReceivedAt: at, ConfigVersions: map[string]int64{}}})
		}
		sortHeartbeats(beats)
		w, err := s.UpdateHeartbeats(ctx, beats)
		if err != nil {
			t.Fatal(err)
		}
		reports, err := s.HostReports(ctx, []uuid.UUID{hosts["agent-0"], hosts["agent-1"]})
		if err != nil {
			t.Fatal(err)
		}
		for agent, want := range map[string]int64{"agent-0": want0, "agent-1": want1} {
			id := hosts[agent]
			if got := w.Layers[id].Environment["labels"]; got.Version != want || !got.Present {
				t.Errorf("%s: heartbeat layers: %s labels environment layer %+v, want version %d", what, agent, got, want)
			}
			if got := reports[id].Layers.Environment["labels"]; got.Version != want {
				t.Errorf("%s: host reports: %s labels environment layer %+v, want version %d", what, agent, got, want)
			}
		}
	}
	check("running", 20, 10)
	exec(`UPDATE rollouts SET state = 'paused' WHERE id = $1`, rolloutID)
	check("paused", 20, 10)
	exec(`UPDATE rollouts SET state = 'completed', final_version = 30 WHERE id = $1`, rolloutID)
	exec(`UPDATE environment_configs SET version = 30, config_data = '{"static":{"a":"b"}}' WHERE environment_id = $1`, envID)
	check("completed", 20, 30)
	exec(`UPDATE environment_configs SET version = 40 WHERE environment_id = $1`, envID)
	check("written after completion", 40, 40)
	exec(`UPDATE rollouts SET state = 'reverted', final_version = 40 WHERE id = $1`, rolloutID)
	check("reverted", 40, 40)
}
