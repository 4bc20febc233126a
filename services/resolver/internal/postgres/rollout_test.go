package postgres_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// TestStoreStagedLayers: a host a running rollout reached reads the rollout's data at the version it
// joined at as its environment layer, through every read (single resolve, fetch rows plus
// StagedLayers, host pages); the host it did not reach reads the environment's row.
func TestStoreStagedLayers(t *testing.T) {
	ctx := context.Background()
	pool, db, store := newDB(t)
	env := db.Environment("prod")
	in := db.Host(env, "web-1", "agent-1")
	out := db.Host(env, "web-2", "agent-2")
	envV := db.PutEnv(env, "healthcheck", `{"interval_seconds":60}`)
	const staged = `{"interval_seconds":30}`
	var rolloutID string
	if err := pool.QueryRow(ctx, `INSERT INTO rollouts (client_id, environment_id, config_type, state, plan, stages, config_data, previous_version, version)
		VALUES ($1, $2, 'healthcheck', 'running', '{}', '[]', $3, $4, nextval('config_version_seq')) RETURNING id`,
		db.ClientOf(env), env, staged, envV).Scan(&rolloutID); err != nil {
		t.Fatal(err)
	}
	var stagedV int64
	if err := pool.QueryRow(ctx, `INSERT INTO rollout_hosts (rollout_id, host_id, stage, version)
		VALUES ($1, $2, 0, nextval('config_version_seq')) RETURNING version`, rolloutID, in).Scan(&stagedV); err != nil {
		t.Fatal(err)
	}
	types := []string{"healthcheck"}
	same := func(a json.RawMessage, b string) bool {
		var x, y any
		return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && jsonEqual(x, y)
	}

	for _, c := range []struct {
		host    string
		version int64
		data    string
	}{{in, stagedV, staged}, {out, envV, `{"interval_seconds":60}`}} {
		hl, err := store.LayersByHostID(ctx, c.host, types)
		if err != nil {
			t.Fatal(err)
		}
		if l := hl.Layers.Environment["healthcheck"]; l.Version != c.version || !same(l.Data, c.data) {
			t.Errorf("LayersByHostID(%s) environment layer v%d %s, want v%d %s", c.host, l.Version, l.Data, c.version, c.data)
		}
	}
	rows, err := store.FetchRows(ctx, []string{"agent-1", "agent-2"}, types)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range rows.Hosts {
		v, ok := h.Staged["healthcheck"]
		if (h.Host.ID == in) != ok || (ok && v != stagedV) {
			t.Errorf("FetchRows: host %s staged %v", h.Host.ID, h.Staged)
		}
	}
	if got := rows.EnvironmentVersions[env]["healthcheck"]; got != envV {
		t.Errorf("FetchRows: environment row version %d, want %d", got, envV)
	}
	key := resolve.StagedKey{EnvironmentID: env, ConfigType: "healthcheck", Version: stagedV}
	data, err := store.StagedLayers(ctx, []resolve.StagedKey{key})
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := data[key]; !ok || l.Version != stagedV || !same(l.Data, staged) {
		t.Errorf("StagedLayers = %+v", data)
	}
	page, err := store.HostPage(ctx, resolve.HostPageQuery{EnvironmentID: env, ConfigType: "healthcheck", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range page {
		if (h.HostID == in) != (h.Staged != nil) || (h.Staged != nil && (h.Staged.Version != stagedV || !same(h.Staged.Data, staged))) {
			t.Errorf("HostPage: host %s staged %+v", h.HostID, h.Staged)
		}
	}
	if len(page) != 2 {
		t.Fatalf("HostPage returned %d hosts", len(page))
	}

	// The fetch contract: the reached host gets its own set with the staged config (twice, to go
	// through the environment cache too); the other shares the environment's.
	r := resolve.New(store, resolve.Options{})
	for range 2 {
		reply, err := r.ResolveSets(ctx, protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract,
			AgentIDs: []string{"agent-1", "agent-2"}, Types: types})
		if err != nil {
			t.Fatal(err)
		}
		if len(reply.Sets) != 2 {
			t.Fatalf("ResolveSets: %d sets, want 2: %+v", len(reply.Sets), reply.Sets)
		}
		for _, set := range reply.Sets {
			ec := reply.Configs[set.Configs["healthcheck"]]
			want, data := envV, `{"interval_seconds":60}`
			if set.Hosts[0].HostID == in {
				want, data = stagedV, staged
			}
			if len(set.Hosts) != 1 || ec.Version != want || ec.EnvironmentVersion != want || !same(ec.ConfigData, data) {
				t.Errorf("ResolveSets: set of %s: %+v", set.Hosts[0].HostID, ec)
			}
		}
	}

	// The push contract: an environment event at a version reaches the hosts whose environment layer
	// is that version, with the config they resolve.
	for _, c := range []struct {
		version int64
		host    string
		data    string
	}{{stagedV, in, staged}, {envV, out, `{"interval_seconds":60}`}} {
		reply, err := r.ResolvePush(ctx, protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract, EnvironmentID: env,
			ConfigType: "healthcheck", EnvironmentVersion: c.version})
		if err != nil {
			t.Fatal(err)
		}
		if len(reply.Sets) != 1 || len(reply.Sets[0].Hosts) != 1 || reply.Sets[0].Hosts[0].HostID != c.host {
			t.Fatalf("ResolvePush at v%d: sets %+v", c.version, reply.Sets)
		}
		if ec := reply.Configs[reply.Sets[0].Configs["healthcheck"]]; ec.Version != c.version || !same(ec.ConfigData, c.data) {
			t.Errorf("ResolvePush at v%d: %+v", c.version, ec)
		}
	}

	// Reverted (the environment row rewritten): the rule no longer applies.
	if _, err := pool.Exec(ctx, `UPDATE rollouts SET state = 'reverted' WHERE id = $1`, rolloutID); err != nil {
		t.Fatal(err)
	}
	hl, err := store.LayersByHostID(ctx, in, types)
	if err != nil {
		t.Fatal(err)
	}
	if l := hl.Layers.Environment["healthcheck"]; l.Version != envV {
		t.Errorf("after the revert the reached host reads v%d, want the row's v%d", l.Version, envV)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
