package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
)

// rolloutView is the rollout object of the API (ROLLOUT_API.md), the fields these tests read.
type rolloutView struct {
	ID           string `json:"id"`
	State        string `json:"state"`
	Reason       string `json:"reason"`
	Version      int64  `json:"version"`
	FinalVersion int64  `json:"final_version"`
	CurrentStage int    `json:"current_stage"`
	Stages       []struct {
		State    string `json:"state"`
		Version  int64  `json:"version"`
		Targeted int    `json:"targeted"`
		Applied  int    `json:"applied"`
		Failed   int    `json:"failed"`
	} `json:"stages"`
}

func (s *stack) rolloutPath(configType string) string {
	return "/api/v1/environments/" + s.envID + "/agent-configs/" + configType + "/rollouts"
}

// startRollout starts a rollout of data with plan through the API.
func (s *stack) startRollout(configType string, data, plan any) rolloutView {
	s.t.Helper()
	var ro rolloutView
	s.api(1).mustDo(s.t, http.MethodPost, s.rolloutPath(configType), map[string]any{"config_data": data, "plan": plan}, &ro)
	return ro
}

// waitRollout waits until the rollout satisfies ok and returns it.
func (s *stack) waitRollout(configType, id, what string, ok func(rolloutView) bool) rolloutView {
	s.t.Helper()
	var ro rolloutView
	s.eventually(convergeTimeout, what, func() error {
		r := s.api(1).do(http.MethodGet, s.rolloutPath(configType)+"/"+id, nil)
		if r.err != nil || r.status != http.StatusOK || r.data(&ro) != nil {
			return errors.New(r.String())
		}
		if !ok(ro) {
			return errors.New(string(r.body))
		}
		return nil
	})
	return ro
}

// rolloutAgents splits the stack's agents into those the rollout reached and the others.
func (s *stack) rolloutAgents(id string) (reached, others []*agent) {
	s.t.Helper()
	rows, err := s.db.Query(context.Background(), `SELECT host_id::text FROM rollout_hosts WHERE rollout_id = $1`, id)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	in := map[string]bool{}
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			s.t.Fatal(err)
		}
		in[h] = true
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	for _, a := range s.agentList() {
		if in[a.hostID] {
			reached = append(reached, a)
		} else {
			others = append(others, a)
		}
	}
	return reached, others
}

// assertNeverGot fails if any of agents received a command of configType at a version above floor.
func (s *stack) assertNeverGot(agents []*agent, configType string, floor int64) {
	s.t.Helper()
	for _, a := range agents {
		for _, c := range s.obs.commandsTo(a.agentID) {
			if c.cmd.ConfigType == configType && c.cmd.Version > floor {
				s.t.Errorf("%s (outside the started stages) received %s v%d", a.hostname, configType, c.cmd.Version)
			}
		}
	}
}

func teamLabels(team string) map[string]any {
	return map[string]any{"static": map[string]any{"team": team}}
}

// TestRolloutTwoStages: six real agents, a rollout of two stages (2 hosts, then the rest) with a long
// bake on the first. The first stage's hosts get the new labels (applied, in their caches), the four
// others receive nothing and keep the previous labels, and drift sees no host drifted. config-api (and
// its controller) is then killed mid-stage and started again; a promote makes the gate pass and the
// second stage starts: every host has the labels, at the version it joined at, the rollout completes,
// and each stage started exactly once.
func TestRolloutTwoStages(t *testing.T) {
	s := startStack(t, stackOptions{replicas: 1, agents: []string{"host-a", "host-b", "host-c", "host-d", "host-e", "host-f"},
		configAPIEnv: []string{"CONFIGAPI_ROLLOUT_TICK=200ms"}})
	s.waitOnline(1)
	all := s.agentList()
	v1 := s.putEnvConfig(1, "labels", teamLabels("v1"))
	s.waitApplied(1, convergeTimeout, "labels", v1, all...)

	ro := s.startRollout("labels", teamLabels("v2"), map[string]any{
		"stages": []map[string]any{{"hosts": 2, "bake_seconds": 3600}, {"percent": 100, "bake_seconds": 0}},
	})
	first, rest := s.rolloutAgents(ro.ID)
	if len(first) != 2 || len(rest) != 4 {
		t.Fatalf("the first stage holds %d hosts, %d others, want 2 and 4", len(first), len(rest))
	}
	s.waitApplied(1, convergeTimeout, "labels", ro.Stages[0].Version, first...)
	for _, a := range first {
		if e := s.mustCacheEntry(a, "labels"); e.Version != ro.Stages[0].Version || !strings.Contains(string(e.ConfigData), `"v2"`) {
			t.Errorf("%s caches labels v%d %s", a.hostname, e.Version, e.ConfigData)
		}
	}
	s.waitRollout("labels", ro.ID, "stage 0 counted applied", func(r rolloutView) bool {
		return r.Stages[0].Applied == 2 && r.State == "running" && r.CurrentStage == 0
	})
	// Drift follows the stages: no host is drifted, inside or outside the started stage.
	s.waitConverged(1, convergeTimeout)
	for _, a := range rest {
		if e := s.mustCacheEntry(a, "labels"); e.Version != v1 {
			t.Errorf("%s (not in a started stage) caches labels v%d, want v%d", a.hostname, e.Version, v1)
		}
		h, r, ok := s.host(1, a)
		if !ok {
			t.Fatal(r.String())
		}
		if st := h.ApplyStatus["labels"]; st.Version != v1 {
			t.Errorf("%s apply status %s, want v%d", a.hostname, jsonString(st), v1)
		}
	}
	s.assertNeverGot(rest, "labels", v1)
	// Pushes went to the stage's hosts only: the others got no command at all since the PUT's.
	for _, a := range rest {
		if n := len(s.obs.commandsFor(a.agentID, "labels", v1)); n != 1 {
			t.Errorf("%s received labels v%d %d times, want once (the PUT's push)", a.hostname, v1, n)
		}
	}

	// The controller dies mid-stage with its process (SIGKILL); a new process's controller takes over
	// from the rollout's row.
	api := s.replica("config-api", 1)
	api.proc.kill(t)
	api.proc.start(t)
	s.waitReady(api)

	s.api(1).mustDo(t, http.MethodPost, s.rolloutPath("labels")+"/"+ro.ID+"/promote", nil, nil)
	ro = s.waitRollout("labels", ro.ID, "rollout completed", func(r rolloutView) bool { return r.State == "completed" })
	s.waitApplied(1, convergeTimeout, "labels", ro.Stages[1].Version, rest...)
	for _, a := range rest {
		if e := s.mustCacheEntry(a, "labels"); e.Version != ro.Stages[1].Version || !strings.Contains(string(e.ConfigData), `"v2"`) {
			t.Errorf("%s caches labels v%d %s after the second stage", a.hostname, e.Version, e.ConfigData)
		}
	}
	// The second stage's start pushed its own hosts only: the first stage's got their version once.
	for _, a := range first {
		if n := len(s.obs.commandsFor(a.agentID, "labels", ro.Stages[0].Version)); n != 1 {
			t.Errorf("%s received its stage's labels v%d %d times, want once", a.hostname, ro.Stages[0].Version, n)
		}
	}
	s.waitConverged(1, convergeTimeout)
	for i := range ro.Stages {
		var n int
		if err := s.db.QueryRow(context.Background(), `SELECT count(*) FROM audit_events WHERE object = $1
			AND action = 'rollout_stage_started' AND (detail->>'stage')::int = $2`, "rollout:"+ro.ID, i).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("stage %d started %d times", i, n)
		}
	}
	if err := s.alive(); err != nil {
		t.Fatal(err)
	}
}

// TestRolloutCanaryFailure: a labels config the agents' local policy refuses (a command label). Its
// rollout reaches the canary only; the canary acks it failed, the gate pauses the rollout naming the
// failed ack, and no host outside the first stage ever receives it. An abort puts the canary back on
// the previous labels at a newer version; a second rollout with auto_revert does the same by itself.
// Asserted on apply status, the commands the agents received and the agents' caches.
func TestRolloutCanaryFailure(t *testing.T) {
	s := startStack(t, stackOptions{replicas: 1, agents: []string{"host-a", "host-b", "host-c", "host-d"},
		configAPIEnv: []string{"CONFIGAPI_ROLLOUT_TICK=200ms"}})
	s.waitOnline(1)
	all := s.agentList()
	v1 := s.putEnvConfig(1, "labels", teamLabels("v1"))
	s.waitApplied(1, convergeTimeout, "labels", v1, all...)
	refused := map[string]any{
		"static":  map[string]any{"team": "evil"},
		"dynamic": []map[string]any{{"name": "x", "source": "command", "command": []string{"sh", "-c", "true"}}},
	}
	plan := func(autoRevert bool) map[string]any {
		return map[string]any{"stages": []map[string]any{{"hosts": 1}, {"percent": 100}}, "bake_seconds": 0, "auto_revert": autoRevert}
	}

	floor := v1
	for _, autoRevert := range []bool{false, true} {
		ro := s.startRollout("labels", refused, plan(autoRevert))
		canary, rest := s.rolloutAgents(ro.ID)
		if len(canary) != 1 {
			t.Fatalf("the canary stage holds %d hosts", len(canary))
		}
		c := canary[0]
		want := "paused"
		if autoRevert {
			want = "reverted"
		}
		ro = s.waitRollout("labels", ro.ID, "rollout "+want+" by its gate", func(r rolloutView) bool { return r.State == want })
		if !strings.Contains(ro.Reason, "gate failed at stage 0: 1 failed acks > max_failed 0") || ro.Stages[0].Failed != 1 ||
			ro.Stages[1].State != "pending" {
			t.Fatalf("auto_revert %v: %+v", autoRevert, ro)
		}
		h, r, ok := s.host(1, c)
		if !ok {
			t.Fatal(r.String())
		}
		if st := h.ApplyStatus["labels"]; !autoRevert && (st.Version != ro.Stages[0].Version || st.Status != protocol.AckFailed) {
			t.Errorf("canary apply status %s, want v%d failed", jsonString(st), ro.Stages[0].Version)
		}
		for _, a := range rest {
			if n := len(s.obs.commandsFor(a.agentID, "labels", ro.Stages[0].Version)); n != 0 {
				t.Errorf("%s (outside stage 0) received the refused labels %d times", a.hostname, n)
			}
			// The previous labels, or already the revert's version (auto_revert pushes it at once).
			if e := s.mustCacheEntry(a, "labels"); (e.Version != floor && (e.Version != ro.FinalVersion || ro.FinalVersion == 0)) ||
				strings.Contains(string(e.ConfigData), "evil") {
				t.Errorf("%s caches labels v%d %s, want v%d (or the revert's v%d)", a.hostname, e.Version, e.ConfigData, floor, ro.FinalVersion)
			}
		}
		if !autoRevert {
			var aborted rolloutView
			s.api(1).mustDo(t, http.MethodPost, s.rolloutPath("labels")+"/"+ro.ID+"/abort", nil, &aborted)
			ro = aborted
		}
		if ro.State != "reverted" || ro.FinalVersion <= ro.Stages[0].Version {
			t.Fatalf("reverted rollout: %+v", ro)
		}
		// Every host runs the previous labels at the revert's version (a new version, pushed).
		s.waitApplied(1, convergeTimeout, "labels", ro.FinalVersion, all...)
		for _, a := range all {
			if e := s.mustCacheEntry(a, "labels"); e.Version != ro.FinalVersion || !strings.Contains(string(e.ConfigData), `"v1"`) {
				t.Errorf("%s after the revert caches labels v%d %s", a.hostname, e.Version, e.ConfigData)
			}
		}
		if n := len(s.obs.commandsFor(c.agentID, "labels", ro.Stages[0].Version)); n == 0 {
			t.Errorf("the canary %s never received the refused labels", c.hostname)
		}
		floor = ro.FinalVersion
		t.Logf("auto_revert %v: canary %s refused v%d, reverted at v%d", autoRevert, c.hostname, ro.Stages[0].Version, ro.FinalVersion)
	}
	s.waitConverged(1, convergeTimeout)
	if err := s.alive(); err != nil {
		t.Fatal(err)
	}
}
