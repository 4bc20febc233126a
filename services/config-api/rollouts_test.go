package configapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/libs/platform/metrics/metricstest"
	configapi "github.com/configsync/configsync/services/config-api"
	"github.com/configsync/configsync/services/config-api/internal/postgres"
	"github.com/configsync/configsync/services/config-api/internal/rollouts"
)

// rolloutObj is the rollout object of the API (ROLLOUT_API.md).
type rolloutObj struct {
	ID              string `json:"id"`
	State           string `json:"state"`
	Reason          string `json:"reason"`
	PreviousVersion int64  `json:"previous_version"`
	Version         int64  `json:"version"`
	FinalVersion    int64  `json:"final_version"`
	CurrentStage    int    `json:"current_stage"`
	CreatedBy       string `json:"created_by"`
	Plan            struct {
		BakeSeconds int `json:"bake_seconds"`
		Gate        struct {
			MinAppliedRatio float64 `json:"min_applied_ratio"`
		} `json:"gate"`
	} `json:"plan"`
	Stages []struct {
		Index     int        `json:"index"`
		State     string     `json:"state"`
		Version   int64      `json:"version"`
		StartedAt *time.Time `json:"started_at"`
		Targeted  int        `json:"targeted"`
		Applied   int        `json:"applied"`
		Failed    int        `json:"failed"`
		Pending   int        `json:"pending"`
		Offline   int        `json:"offline"`
		TopErrors []struct {
			Error string `json:"error"`
			Hosts int    `json:"hosts"`
		} `json:"top_errors"`
	} `json:"stages"`
}

// rolloutTenant is a tenant with n hosts in its environment.
type rolloutTenant struct {
	tenant
	hosts []uuid.UUID
}

func (h *harness) newRolloutTenant(name string, n int) rolloutTenant {
	h.t.Helper()
	tn := rolloutTenant{tenant: h.newTenant(name), hosts: nil}
	tn.hosts = append(tn.hosts, tn.host)
	for i := 1; i < n; i++ {
		var hst idObj
		h.must(201, "POST", "/api/v1/environments/"+tn.env.String()+"/hosts", h.admin,
			map[string]any{"hostname": fmt.Sprintf("%s-web-%d", name, i+1)}).data(h.t, &hst)
		tn.hosts = append(tn.hosts, hst.ID)
	}
	return tn
}

// effective is a host's effective config of a type as the resolver computes it now.
func (h *harness) effective(tn rolloutTenant, host uuid.UUID, configType string) (version int64, data string) {
	h.t.Helper()
	var ec struct {
		Version    int64           `json:"version"`
		ConfigData json.RawMessage `json:"config_data"`
	}
	h.must(200, "GET", "/api/v1/hosts/"+host.String()+"/agent-configs/"+configType, tn.token, nil).data(h.t, &ec)
	return ec.Version, string(ec.ConfigData)
}

func labelsOf(team string) map[string]any {
	return map[string]any{"static": map[string]any{"team": team}}
}

// writeLabels writes labelsOf(team) as tn's environment labels config (the type the rollout tests roll
// out) and returns its version.
func (h *harness) writeLabels(tn rolloutTenant, team string) int64 {
	h.t.Helper()
	var cfg configRow
	h.must(200, "PUT", envConfigPath(tn.env, "labels"), tn.token, map[string]any{"config_data": labelsOf(team)}).data(h.t, &cfg)
	return cfg.Version
}

// startRollout starts a rollout of labelsOf(team) to tn's environment with plan.
func (h *harness) startRollout(tn rolloutTenant, team string, plan map[string]any) rolloutObj {
	h.t.Helper()
	var ro rolloutObj
	h.must(201, "POST", envConfigPath(tn.env, "labels")+"/rollouts", tn.token, map[string]any{"config_data": labelsOf(team), "plan": plan}).data(h.t, &ro)
	return ro
}

// getRollout reads rollout id of tn's labels config.
func (h *harness) getRollout(tn rolloutTenant, id string) rolloutObj {
	h.t.Helper()
	var ro rolloutObj
	h.must(200, "GET", envConfigPath(tn.env, "labels")+"/rollouts/"+id, tn.token, nil).data(h.t, &ro)
	return ro
}

// TestRolloutAPIRules: a rollout's config is validated exactly as a PUT (same code and message), a
// bad plan names its field, one rollout per (environment, type) (409 rollout_active, also for PUT,
// DELETE and rollback of the type, naming the rollout), If-Match as on a PUT, another client's
// rollout is 404, actions answer 409 rollout_not_running out of turn, the canary resolves the new
// revision while the rest resolve the previous one, and abort puts the canary back on the previous
// data at a newer version, every transition audited.
func TestRolloutAPIRules(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newRolloutTenant("acme", 4)
	b := h.newRolloutTenant("globex", 1)
	path := envConfigPath(a.env, "labels")

	v1 := h.writeLabels(a, "v1")

	// The same validation as a PUT: same status, code and message.
	bad := map[string]any{"static": map[string]any{"team": 7}}
	put := h.do("PUT", path, a.token, map[string]any{"config_data": bad})
	start := h.do("POST", path+"/rollouts", a.token, map[string]any{"config_data": bad})
	if put.status != 400 || start.status != 400 || put.errCode(t) != start.errCode(t) || put.message(t) != start.message(t) {
		t.Fatalf("invalid config: PUT %d %s, rollout %d %s", put.status, put.body, start.status, start.body)
	}
	r := h.must(400, "POST", path+"/rollouts", a.token, map[string]any{"config_data": labelsOf("v2"),
		"plan": map[string]any{"stages": []map[string]any{{"percent": 5}, {"percent": 150}}}})
	if !strings.Contains(r.message(t), "plan.stages[1].percent") {
		t.Errorf("bad plan message %q does not name plan.stages[1].percent", r.message(t))
	}
	h.must(412, "POST", path+"/rollouts", a.token, map[string]any{"config_data": labelsOf("v2")}, "If-Match", `"999999"`)

	plan := map[string]any{"stages": []map[string]any{{"hosts": 1}, {"percent": 100}}, "bake_seconds": 3600}
	var ro rolloutObj
	h.must(201, "POST", path+"/rollouts", a.token, map[string]any{"config_data": labelsOf("v2"), "plan": plan},
		"If-Match", fmt.Sprintf(`"%d"`, v1)).data(t, &ro)
	if ro.State != rollouts.StateRunning || ro.PreviousVersion != v1 || ro.Version <= v1 ||
		len(ro.Stages) != 2 || ro.Stages[0].State != rollouts.StageBaking || ro.Stages[0].Targeted != 1 ||
		ro.Stages[1].State != rollouts.StagePending || ro.Plan.Gate.MinAppliedRatio != rollouts.DefaultMinAppliedRatio {
		t.Fatalf("started rollout: %+v", ro)
	}
	one := path + "/rollouts/" + ro.ID

	// One active rollout per (environment, type); writes of the type are refused naming it.
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", path + "/rollouts", map[string]any{"config_data": labelsOf("v3")}},
		{"PUT", path, map[string]any{"config_data": labelsOf("v3")}},
		{"DELETE", path, nil},
		{"POST", path + "/rollback", map[string]any{"revision": v1}},
	} {
		r := h.must(409, c.method, c.path, a.token, c.body)
		if r.errCode(t) != "rollout_active" || !strings.Contains(r.message(t), ro.ID) {
			t.Errorf("%s %s during the rollout: %s", c.method, c.path, r.body)
		}
	}
	// Another type of the same environment is not held.
	h.must(200, "PUT", envConfigPath(a.env, "tracing"), a.token, map[string]any{"config_data": map[string]any{"enabled": true, "sample_ratio": 0.5}})

	// Resolution by stage: exactly one host (the canary) resolves the new revision.
	var canary uuid.UUID
	for _, host := range a.hosts {
		v, data := h.effective(a, host, "labels")
		switch {
		case strings.Contains(data, `"v2"`):
			if canary != uuid.Nil || v != ro.Stages[0].Version {
				t.Fatalf("host %s resolves v2 at version %d (canary %s, stage version %d)", host, v, canary, ro.Stages[0].Version)
			}
			canary = host
		case strings.Contains(data, `"v1"`) && v == v1:
		default:
			t.Fatalf("host %s resolves %s at version %d", host, data, v)
		}
	}
	if canary == uuid.Nil {
		t.Fatal("no host resolves the rollout's revision")
	}

	// Tenant isolation: another client's rollout does not exist for it.
	h.must(404, "GET", one, b.token, nil)
	h.must(404, "POST", one+"/abort", b.token, nil)
	h.must(404, "GET", envConfigPath(b.env, "labels")+"/rollouts/"+ro.ID, b.token, nil)
	h.must(404, "GET", path+"/rollouts/"+uuid.NewString(), a.token, nil)

	// Actions in and out of turn.
	h.must(200, "POST", one+"/pause", a.token, nil).data(t, &ro)
	if ro.State != rollouts.StatePaused {
		t.Fatalf("paused: %+v", ro)
	}
	if r := h.must(409, "POST", one+"/pause", a.token, nil); r.errCode(t) != "rollout_not_running" {
		t.Errorf("pause of a paused rollout: %s", r.body)
	}
	h.must(409, "POST", one+"/promote", a.token, nil)
	h.must(200, "POST", one+"/resume", a.token, nil).data(t, &ro)
	if ro.State != rollouts.StateRunning {
		t.Fatalf("resumed: %+v", ro)
	}
	h.must(200, "POST", one+"/promote", a.token, nil)
	var list []rolloutObj
	h.must(200, "GET", path+"/rollouts", a.token, nil).data(t, &list)
	if len(list) != 1 || list[0].ID != ro.ID {
		t.Fatalf("list: %+v", list)
	}

	// Abort: the canary goes back to the previous data at a newer version; the type is writable again.
	h.must(200, "POST", one+"/abort", a.token, nil).data(t, &ro)
	if ro.State != rollouts.StateReverted || ro.FinalVersion <= ro.Stages[0].Version {
		t.Fatalf("aborted: %+v", ro)
	}
	for _, host := range a.hosts {
		if v, data := h.effective(a, host, "labels"); v != ro.FinalVersion || !strings.Contains(data, `"v1"`) {
			t.Errorf("host %s after the abort resolves %s at version %d, want v1 at %d", host, data, v, ro.FinalVersion)
		}
	}
	h.must(409, "POST", one+"/abort", a.token, nil)
	h.writeLabels(a, "v4")

	for _, action := range []string{rollouts.ActionStarted, rollouts.ActionStageStarted, rollouts.ActionPaused,
		rollouts.ActionResumed, rollouts.ActionPromoted, rollouts.ActionReverted} {
		if n := h.count(`SELECT count(*) FROM audit_events WHERE object = $1 AND action = $2 AND client_id = $3`,
			"rollout:"+ro.ID, action, a.client); n != 1 {
			t.Errorf("%d %s audit events, want 1", n, action)
		}
	}
}

// TestRolloutControllerLeadsAndResumes: two controller instances over one database. A rollout row an
// operator (or another replica) holds is left alone; a controller that stops mid-rollout leaves it at
// its last committed stage and the other instance resumes from there; run side by side they never
// start a stage twice nor skip one, and the rollout completes with the environment row at a newer
// version than every stage's while the hosts keep the versions they joined at.
func TestRolloutControllerLeadsAndResumes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newRolloutTenant("initech", 6)
	h.writeLabels(a, "v1")

	plan := map[string]any{"stages": []map[string]any{{"hosts": 1}, {"percent": 50}, {"percent": 100}}, "bake_seconds": 0}
	ro := h.startRollout(a, "v2", plan)
	id := uuid.MustParse(ro.ID)

	mA, mB := metrics.New(), metrics.New()
	ctlA := configapi.NewRolloutController(h.apiCfg, h.pool, mA, h.log)
	ctlB := configapi.NewRolloutController(h.apiCfg, h.pool, mB, h.log)
	transitions := func(m *metrics.Metrics, result string) float64 {
		t.Helper()
		fams, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		sc := metricstest.Scrape{}
		for _, f := range fams {
			sc[f.GetName()] = f
		}
		return sc.Value("configsync_rollout_transitions_total", map[string]string{"result": result})
	}
	ctx := context.Background()

	// The row is held elsewhere: no step.
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM rollouts WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	ctlA.Tick(ctx)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	stage := func() (int, string) {
		var cur int
		var state string
		if err := h.pool.QueryRow(ctx, `SELECT current_stage, state FROM rollouts WHERE id = $1`, id).Scan(&cur, &state); err != nil {
			t.Fatal(err)
		}
		return cur, state
	}
	if cur, state := stage(); cur != 0 || state != rollouts.StateRunning {
		t.Fatalf("a held rollout moved to stage %d (%s)", cur, state)
	}

	// A leads one step (no host heartbeats, so no online target holds a gate) and "dies"; B resumes.
	ctlA.Tick(ctx)
	if cur, _ := stage(); cur != 1 {
		t.Fatalf("after A's tick the rollout is at stage %d, want 1", cur)
	}
	ctlB.Tick(ctx)
	if cur, _ := stage(); cur != 2 {
		t.Fatalf("after B's tick the rollout is at stage %d, want 2", cur)
	}
	ctlB.Tick(ctx)
	ro = h.getRollout(a, ro.ID)
	if ro.State != rollouts.StateCompleted {
		t.Fatalf("rollout after the last stage: %+v", ro)
	}
	for i := 1; i < len(ro.Stages); i++ {
		if ro.Stages[i].Version <= ro.Stages[i-1].Version || ro.Stages[i].State != rollouts.StagePassed {
			t.Fatalf("stages: %+v", ro.Stages)
		}
	}
	if ro.FinalVersion <= ro.Stages[2].Version {
		t.Fatalf("final version %d not above the last stage's %d", ro.FinalVersion, ro.Stages[2].Version)
	}
	// Completion moves no host: each keeps the version it joined at, with the new data.
	joined := map[int64]bool{}
	for _, st := range ro.Stages {
		joined[st.Version] = true
	}
	for _, host := range a.hosts {
		v, data := h.effective(a, host, "labels")
		if !joined[v] || !strings.Contains(data, `"v2"`) {
			t.Errorf("host %s after completion resolves %s at version %d (stage versions %v)", host, data, v, joined)
		}
	}
	if startedA, startedB, completedB := transitions(mA, rollouts.ResultStageStarted), transitions(mB, rollouts.ResultStageStarted),
		transitions(mB, rollouts.ResultCompleted); startedA != 1 || startedB != 1 || completedB != 1 {
		t.Errorf("transitions counted: A started %v stages, B %v, B completed %v; want 1, 1, 1", startedA, startedB, completedB)
	}
	h.writeLabels(a, "v3")

	// Side by side, ticking concurrently: every stage starts exactly once.
	ro = h.startRollout(a, "v4", plan)
	var wg sync.WaitGroup
	for _, c := range []*rollouts.Controller{ctlA, ctlB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				c.Tick(ctx)
			}
		}()
	}
	wg.Wait()
	ro = h.getRollout(a, ro.ID)
	if ro.State != rollouts.StateCompleted {
		t.Fatalf("rollout ticked by two controllers: %+v", ro)
	}
	for i := range ro.Stages {
		n := h.count(`SELECT count(*) FROM audit_events WHERE object = $1 AND action = $2 AND (detail->>'stage')::int = $3`,
			"rollout:"+ro.ID, rollouts.ActionStageStarted, i)
		if n != 1 {
			t.Errorf("stage %d started %d times", i, n)
		}
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE object = $1 AND action = $2`, "rollout:"+ro.ID, rollouts.ActionCompleted); n != 1 {
		t.Errorf("completed %d times", n)
	}
}

// TestRolloutGate: a failed ack on the canary (online) fails the gate: without auto_revert the rollout
// pauses with the reason and the error in the stage's top errors, no other host resolves the new
// revision, and resuming fails the gate again; with auto_revert the canary resolves the previous data
// at a version newer than the one it failed.
func TestRolloutGate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newRolloutTenant("umbrella", 4)
	path := envConfigPath(a.env, "labels")
	h.writeLabels(a, "v1")
	ctl := configapi.NewRolloutController(h.apiCfg, h.pool, nil, h.log)
	ctx := context.Background()
	// Every host heartbeats (online): the gate waits for their answers.
	h.exec(`UPDATE hosts SET last_heartbeat_at = now() WHERE environment_id = $1`, a.env)

	for _, autoRevert := range []bool{false, true} {
		plan := map[string]any{"stages": []map[string]any{{"hosts": 1}, {"percent": 100}}, "bake_seconds": 0, "auto_revert": autoRevert}
		ro := h.startRollout(a, "bad", plan)
		ctl.Tick(ctx)
		ro = h.getRollout(a, ro.ID)
		if ro.State != rollouts.StateRunning || ro.CurrentStage != 0 || ro.Stages[0].Pending != 1 {
			t.Fatalf("rollout waiting on its canary's ack: %+v", ro)
		}
		var canary uuid.UUID
		if err := h.pool.QueryRow(ctx, `SELECT host_id FROM rollout_hosts WHERE rollout_id = $1`, ro.ID).Scan(&canary); err != nil {
			t.Fatal(err)
		}
		h.exec(`INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at)
		        VALUES ($1, 'labels', $2, 'failed', 'labels: refused', now())
		        ON CONFLICT (host_id, config_type) DO UPDATE SET version = excluded.version, status = 'failed', error = excluded.error`,
			canary, ro.Stages[0].Version)
		ctl.Tick(ctx)
		ro = h.getRollout(a, ro.ID)
		want := rollouts.StatePaused
		if autoRevert {
			want = rollouts.StateReverted
		}
		if ro.State != want || !strings.Contains(ro.Reason, "gate failed at stage 0: 1 failed acks > max_failed 0") ||
			ro.Stages[0].State != rollouts.StageFailed || ro.Stages[0].Failed != 1 || len(ro.Stages[0].TopErrors) != 1 ||
			ro.Stages[0].TopErrors[0].Error != "labels: refused" || ro.Stages[1].StartedAt != nil {
			t.Fatalf("auto_revert %v: rollout after the failed ack: %+v", autoRevert, ro)
		}
		if !autoRevert {
			for _, host := range a.hosts {
				if _, data := h.effective(a, host, "labels"); (host == canary) != strings.Contains(data, `"bad"`) {
					t.Errorf("paused: host %s (canary %v) resolves %s", host, host == canary, data)
				}
			}
			h.must(200, "POST", path+"/rollouts/"+ro.ID+"/resume", a.token, nil)
			ctl.Tick(ctx)
			ro = h.getRollout(a, ro.ID)
			if ro.State != rollouts.StatePaused || ro.Stages[1].StartedAt != nil {
				t.Fatalf("resumed with the canary still failed: %+v", ro)
			}
			h.must(200, "POST", path+"/rollouts/"+ro.ID+"/abort", a.token, nil).data(t, &ro)
		}
		if ro.State != rollouts.StateReverted || ro.FinalVersion <= ro.Stages[0].Version {
			t.Fatalf("reverted: %+v", ro)
		}
		if v, data := h.effective(a, canary, "labels"); v != ro.FinalVersion || !strings.Contains(data, `"v1"`) {
			t.Errorf("canary after the revert resolves %s at version %d, want v1 at %d", data, v, ro.FinalVersion)
		}
	}
}

// TestRolloutPlacesLateHosts: hosts registered mid-rollout resolve the previous revision until the
// controller places them; one whose labels put it in a started stage joins at a new version (above an
// override written meanwhile, so its effective version only grows, with the new data merged under the
// override), one whose labels match no started stage keeps the previous revision.
func TestRolloutPlacesLateHosts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newRolloutTenant("hooli", 2)
	h.writeLabels(a, "v1")
	plan := map[string]any{"stages": []map[string]any{{"selector": "role=canary", "percent": 100}, {"percent": 100}}, "bake_seconds": 3600}
	ro := h.startRollout(a, "v2", plan)
	if ro.Stages[0].Targeted != 0 {
		t.Fatalf("no host is labelled role=canary yet: %+v", ro.Stages[0])
	}
	var canary, other idObj
	h.must(201, "POST", "/api/v1/environments/"+a.env.String()+"/hosts", h.admin,
		map[string]any{"hostname": "late-canary", "labels": map[string]string{"role": "canary"}}).data(t, &canary)
	h.must(201, "POST", "/api/v1/environments/"+a.env.String()+"/hosts", h.admin,
		map[string]any{"hostname": "late-web", "labels": map[string]string{"role": "web"}}).data(t, &other)
	var over struct {
		Version int64 `json:"version"`
	}
	h.must(200, "PUT", hostConfigPath(canary.ID, "labels"), a.token,
		map[string]any{"config_data": map[string]any{"static": map[string]any{"site": "x"}}}).data(t, &over)
	before, data := h.effective(a, canary.ID, "labels")
	if before != over.Version || !strings.Contains(data, `"v1"`) {
		t.Fatalf("late canary before placement resolves %s at version %d", data, before)
	}

	configapi.NewRolloutController(h.apiCfg, h.pool, nil, h.log).Tick(context.Background())
	after, data := h.effective(a, canary.ID, "labels")
	if after <= before || !strings.Contains(data, `"v2"`) || !strings.Contains(data, `"site"`) {
		t.Errorf("late canary after placement resolves %s at version %d (before: %d)", data, after, before)
	}
	if v, data := h.effective(a, other.ID, "labels"); !strings.Contains(data, `"v1"`) || v >= ro.Version {
		t.Errorf("late host outside the started stage resolves %s at version %d", data, v)
	}
	ro = h.getRollout(a, ro.ID)
	if ro.Stages[0].Targeted != 1 || ro.CurrentStage != 0 {
		t.Errorf("after placement: %+v", ro)
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE object = $1 AND action = $2`, "rollout:"+ro.ID, rollouts.ActionHostsPlaced); n != 1 {
		t.Errorf("%d placement audit events, want 1", n)
	}
}

// crashingRollouts is the rollout repository of a controller that dies in the middle of a step: its
// transaction's announce of a stage fails after the stage's hosts were written.
type crashingRollouts struct{ rollouts.Repository }

type crashingTx struct{ rollouts.Tx }

func (c crashingRollouts) Lead(ctx context.Context, id uuid.UUID, fn func(rollouts.Tx, *rollouts.Rollout) error) (bool, error) {
	return c.Repository.Lead(ctx, id, func(tx rollouts.Tx, r *rollouts.Rollout) error { return fn(crashingTx{tx}, r) })
}

func (crashingTx) Announce(context.Context, *rollouts.Rollout, int64, string) error {
	return errors.New("controller killed")
}

// TestRolloutControllerCrashMidStep: a controller dying in the middle of a stage start (hosts placed,
// the announcement not yet written) leaves no trace of it — its transaction is rolled back whole — and
// the next controller starts that stage exactly once.
func TestRolloutControllerCrashMidStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.newRolloutTenant("wayne", 4)
	h.writeLabels(a, "v1")
	plan := map[string]any{"stages": []map[string]any{{"hosts": 1}, {"percent": 100}}, "bake_seconds": 0}
	ro := h.startRollout(a, "v2", plan)
	ctx := context.Background()
	members := func() int {
		return h.count(`SELECT count(*) FROM rollout_hosts WHERE rollout_id = $1`, ro.ID)
	}
	before := h.count(`SELECT count(*) FROM outbox`)

	var results []string
	crashing := rollouts.NewController(crashingRollouts{postgres.NewRollouts(postgres.NewStore(h.pool))},
		rollouts.ControllerOptions{OnlineWindow: h.apiCfg.OnlineWindow, Transitions: func(r string) { results = append(results, r) }}, h.log)
	crashing.Tick(ctx)
	if len(results) != 1 || results[0] != rollouts.ResultError {
		t.Fatalf("the crashing controller's step: %v, want one error", results)
	}
	ro = h.getRollout(a, ro.ID)
	if ro.CurrentStage != 0 || ro.Stages[1].StartedAt != nil || ro.Stages[0].State != rollouts.StageBaking || members() != 1 ||
		h.count(`SELECT count(*) FROM outbox`) != before {
		t.Fatalf("a crashed step left a trace: %+v, %d members, outbox %d -> %d", ro, members(), before, h.count(`SELECT count(*) FROM outbox`))
	}

	configapi.NewRolloutController(h.apiCfg, h.pool, nil, h.log).Tick(ctx)
	ro = h.getRollout(a, ro.ID)
	if ro.CurrentStage != 1 || ro.Stages[1].StartedAt == nil || members() != 4 || h.count(`SELECT count(*) FROM outbox`) != before+1 {
		t.Fatalf("after the next controller's step: %+v, %d members", ro, members())
	}
	if n := h.count(`SELECT count(*) FROM audit_events WHERE object = $1 AND action = $2 AND (detail->>'stage')::int = 1`,
		"rollout:"+ro.ID, rollouts.ActionStageStarted); n != 1 {
		t.Errorf("stage 1 started %d times", n)
	}
}
