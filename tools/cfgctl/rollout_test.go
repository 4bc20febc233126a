package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

const rolloutsBase = "/api/v1/environments/e1/agent-configs/labels/rollouts"

// rolloutJSON is a rollout object as ROLLOUT_API.md describes it, with three stages (a 1-host canary,
// 5%, 100%) whose states and counts the caller gives.
func rolloutJSON(state string, current int, reason string, stages [3]string) string {
	return fmt.Sprintf(`{"id":"r1","environment_id":"e1","config_type":"labels","state":%q,"reason":%q,
"previous_version":41,"version":42,"current_stage":%d,
"plan":{"stages":[{"hosts":1},{"percent":5},{"percent":100,"selector":""}],"bake_seconds":0,
"gate":{"max_failed":0,"max_failed_ratio":0,"max_unhealthy":0,"min_applied_ratio":0.95},"auto_revert":false},
"stages":[%s,%s,%s],"created_at":"2026-12-02T02:00:00Z","updated_at":"2026-12-02T02:01:00Z","created_by":"ops"}`,
		state, reason, current, stages[0], stages[1], stages[2])
}

// stageJSON is one stage: its plan fields, state and counts.
func stageJSON(index, hosts int, percent float64, state string, targeted, applied, failed, pending, offline, unhealthy int, topErrors string) string {
	if topErrors == "" {
		topErrors = "[]"
	}
	return fmt.Sprintf(`{"index":%d,"hosts":%d,"percent":%g,"selector":"","bake_seconds":0,"state":%q,"started_at":null,"passed_at":null,
"targeted":%d,"applied":%d,"failed":%d,"pending":%d,"offline":%d,"unhealthy":%d,"top_errors":%s}`,
		index, hosts, percent, state, targeted, applied, failed, pending, offline, unhealthy, topErrors)
}

// TestRolloutStatusWatchDrawsStagesUntilCompleted: -watch prints every stage's line per poll, stops at
// the first answer that is no longer running, and exits 0 because the rollout completed.
func TestRolloutStatusWatchDrawsStagesUntilCompleted(t *testing.T) {
	answers := []string{
		rolloutJSON("running", 0, "", [3]string{
			stageJSON(0, 1, 0, "baking", 1, 0, 0, 1, 0, 0, ""),
			stageJSON(1, 0, 5, "pending", 0, 0, 0, 0, 0, 0, ""),
			stageJSON(2, 0, 100, "pending", 0, 0, 0, 0, 0, 0, "")}),
		rolloutJSON("running", 1, "", [3]string{
			stageJSON(0, 1, 0, "passed", 1, 1, 0, 0, 0, 0, ""),
			stageJSON(1, 0, 5, "baking", 10, 4, 0, 5, 1, 0, ""),
			stageJSON(2, 0, 100, "pending", 0, 0, 0, 0, 0, 0, "")}),
		rolloutJSON("completed", 2, "", [3]string{
			stageJSON(0, 1, 0, "passed", 1, 1, 0, 0, 0, 0, ""),
			stageJSON(1, 0, 5, "passed", 10, 9, 0, 0, 1, 0, ""),
			stageJSON(2, 0, 100, "passed", 200, 198, 0, 0, 2, 0, "")}),
	}
	var polls atomic.Int32
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"GET " + rolloutsBase + "/r1": func(w http.ResponseWriter) {
			i := min(int(polls.Add(1))-1, len(answers)-1)
			io.WriteString(w, `{"data":`+answers[i]+`}`)
		},
	})
	out, err := runCLI(t, srv, "rollout", "status", "e1", "labels", "r1", "-watch", "-interval", "1ms")
	if err != nil {
		t.Fatalf("watch: %v\n%s", err, out)
	}
	want := "" +
		"stage 0 (1 host) baking  0/1 applied, 0 failed, 1 pending, 0 offline, 0 unhealthy\n" +
		"stage 1 (5%)     pending 0/0 applied, 0 failed, 0 pending, 0 offline, 0 unhealthy\n" +
		"stage 2 (100%)   pending 0/0 applied, 0 failed, 0 pending, 0 offline, 0 unhealthy\n" +
		"stage 0 (1 host) passed  1/1 applied, 0 failed, 0 pending, 0 offline, 0 unhealthy\n" +
		"stage 1 (5%)     baking  4/10 applied, 0 failed, 5 pending, 1 offline, 0 unhealthy\n" +
		"stage 2 (100%)   pending 0/0 applied, 0 failed, 0 pending, 0 offline, 0 unhealthy\n" +
		"stage 0 (1 host) passed  1/1 applied, 0 failed, 0 pending, 0 offline, 0 unhealthy\n" +
		"stage 1 (5%)     passed  9/10 applied, 0 failed, 0 pending, 1 offline, 0 unhealthy\n" +
		"stage 2 (100%)   passed  198/200 applied, 0 failed, 0 pending, 2 offline, 0 unhealthy\n" +
		"rollout r1 completed (version 42, previous 41)\n"
	if out != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out, want)
	}
	if len(*got) != 3 {
		t.Fatalf("%d requests, want 3 polls: %+v", len(*got), *got)
	}
	for _, r := range *got {
		if r.Method != http.MethodGet || r.Path != rolloutsBase+"/r1" || r.Auth != "Bearer tok" {
			t.Errorf("request %+v", r)
		}
	}
}

// TestRolloutStatusWatchStopsWhenPaused: a rollout its gate paused ends the watch with exit 1, the
// reason and the failed hosts' errors; a timeout while it runs is exit 1 too.
func TestRolloutStatusWatchStopsWhenPaused(t *testing.T) {
	paused := rolloutJSON("paused", 1, "gate failed at stage 1: 2 failed acks > max_failed 0", [3]string{
		stageJSON(0, 1, 0, "passed", 1, 1, 0, 0, 0, 0, ""),
		stageJSON(1, 0, 5, "failed", 10, 8, 2, 0, 0, 0, `[{"error":"policy: commands: uname: command labels are off","hosts":2}]`),
		stageJSON(2, 0, 100, "pending", 0, 0, 0, 0, 0, 0, "")})
	running := rolloutJSON("running", 0, "", [3]string{
		stageJSON(0, 1, 0, "baking", 1, 0, 0, 1, 0, 0, ""),
		stageJSON(1, 0, 5, "pending", 0, 0, 0, 0, 0, 0, ""),
		stageJSON(2, 0, 100, "pending", 0, 0, 0, 0, 0, 0, "")})
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		// No id: the newest rollout comes from the list (limit 1).
		"GET " + rolloutsBase:         data(`[` + paused + `]`),
		"GET " + rolloutsBase + "/r1": data(paused),
		"GET " + rolloutsBase + "/r2": data(strings.Replace(running, `"id":"r1"`, `"id":"r2"`, 1)),
	})
	out, err := runCLI(t, srv, "rollout", "status", "e1", "labels", "-watch", "-interval", "1ms")
	if !errors.Is(err, errRolloutNotCompleted) || exitCode(err) != exitFailure || !strings.Contains(err.Error(), "paused at stage 1: gate failed") {
		t.Fatalf("err %v (exit %d)\n%s", err, exitCode(err), out)
	}
	if len(*got) != 2 || (*got)[0].Path != rolloutsBase || (*got)[0].Query != "limit=1" || (*got)[1].Path != rolloutsBase+"/r1" {
		t.Fatalf("requests %+v, want the list (limit=1) then the newest rollout", *got)
	}
	for _, line := range []string{
		"stage 1 (5%)     failed  8/10 applied, 2 failed, 0 pending, 0 offline, 0 unhealthy\n",
		"rollout r1 paused at stage 1: gate failed at stage 1: 2 failed acks > max_failed 0 (version 42, previous 41)\n",
		"  stage 1: 2 host(s) failed: policy: commands: uname: command labels are off\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("output lacks %q:\n%s", line, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 5 {
		t.Errorf("%d lines, want 3 stages, the outcome and one error:\n%s", n, out)
	}

	out, err = runCLI(t, srv, "rollout", "status", "e1", "labels", "r2", "-watch", "-interval", "1ms", "-timeout", "20ms")
	if !errors.Is(err, errWatchTimeout) || exitCode(err) != exitFailure || !strings.Contains(err.Error(), "still running at stage 0") {
		t.Fatalf("timeout: err %v (exit %d)", err, exitCode(err))
	}
	if polls := strings.Count(out, "stage 0 "); polls < 2 || strings.Count(out, "\n") != 3*polls {
		t.Fatalf("want 3 lines per poll, at least 2 polls:\n%s", out)
	}
}

// TestRolloutStatusWithoutRollouts: no rollout at all is "not found" (exit 3); one-shot status prints
// the header and a stage table with the error texts.
func TestRolloutStatusWithoutRollouts(t *testing.T) {
	paused := rolloutJSON("paused", 1, "gate failed at stage 1: 2 failed acks > max_failed 0", [3]string{
		stageJSON(0, 1, 0, "passed", 1, 1, 0, 0, 0, 0, ""),
		stageJSON(1, 0, 5, "failed", 10, 8, 2, 0, 0, 0, `[{"error":"boom","hosts":2}]`),
		stageJSON(2, 0, 100, "pending", 0, 0, 0, 0, 0, 0, "")})
	srv, _ := fakeAPI(t, map[string]func(http.ResponseWriter){
		"GET /api/v1/environments/e2/agent-configs/labels/rollouts": data(`[]`),
		"GET " + rolloutsBase + "/r1":                               data(paused),
	})
	if _, err := runCLI(t, srv, "rollout", "status", "e2", "labels"); exitCode(err) != exitNotFound || !strings.Contains(err.Error(), "no rollout of labels") {
		t.Fatalf("no rollout: err %v (exit %d)", err, exitCode(err))
	}
	out, err := runCLI(t, srv, "rollout", "status", "e1", "labels", "r1")
	if err != nil {
		t.Fatalf("one-shot status of a paused rollout must succeed: %v", err)
	}
	for _, s := range []string{"state:    paused, stage 1 (of 0-2)", "reason:   gate failed at stage 1", "config:   labels, version 42 (previous 41)",
		"STAGE", "1      5%      0s    failed   10        8        2", "  stage 1: 2 host(s) failed: boom"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	out, err = runCLI(t, srv, "-o", "json", "rollout", "status", "e1", "labels", "r1")
	if err != nil || !strings.Contains(out, `"reason": "gate failed at stage 1: 2 failed acks > max_failed 0"`) {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
}

// TestRolloutStartSendsConfigAndPlan: start posts config_data and the plan built from the plan file
// and the flags; without plan flags no plan is sent (the API's default plan).
func TestRolloutStartSendsConfigAndPlan(t *testing.T) {
	started := rolloutJSON("running", 0, "", [3]string{
		stageJSON(0, 1, 0, "baking", 1, 0, 0, 1, 0, 0, ""),
		stageJSON(1, 0, 5, "pending", 0, 0, 0, 0, 0, 0, ""),
		stageJSON(2, 0, 100, "pending", 0, 0, 0, 0, 0, 0, "")})
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"POST " + rolloutsBase: func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"data":`+started+`}`)
		},
	})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "labels.yaml")
	plan := filepath.Join(dir, "plan.json")
	os.WriteFile(cfg, []byte("static:\n  team: core\n"), 0o600)
	os.WriteFile(plan, []byte(`{"stages":[{"hosts":2,"selector":"ring=canary"},{"percent":100}],"bake_seconds":60,
		"gate":{"max_failed":1,"min_applied_ratio":0.9}}`), 0o600)

	out, err := runCLI(t, srv, "rollout", "start", "e1", "labels", "-f", cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	first := (*got)[0]
	if first.Method != http.MethodPost || first.Path != rolloutsBase || first.IfMatch != "" {
		t.Errorf("request %+v", first)
	}
	if !reflect.DeepEqual(first.Body, map[string]any{"config_data": map[string]any{"static": map[string]any{"team": "core"}}}) {
		t.Errorf("body without plan flags = %#v, want config_data only", first.Body)
	}
	if !strings.Contains(out, "rollout:  r1") || !strings.Contains(out, "state:    running, stage 0 (of 0-2)") {
		t.Errorf("output:\n%s", out)
	}

	// The plan file as given.
	if _, err := runCLI(t, srv, "rollout", "start", "e1", "labels", "-f", cfg, "-plan", plan, "-if-match", "41"); err != nil {
		t.Fatal(err)
	}
	second := (*got)[1]
	wantPlan := map[string]any{
		"stages":       []any{map[string]any{"hosts": float64(2), "selector": "ring=canary"}, map[string]any{"percent": float64(100)}},
		"bake_seconds": float64(60),
		"gate":         map[string]any{"max_failed": float64(1), "min_applied_ratio": 0.9},
	}
	if !reflect.DeepEqual(second.Body["plan"], wantPlan) || second.IfMatch != `"41"` {
		t.Errorf("plan %#v (If-Match %q), want %#v", second.Body["plan"], second.IfMatch, wantPlan)
	}

	// Flags replace the plan file's fields and keep the others.
	if _, err := runCLI(t, srv, "rollout", "start", "e1", "labels", "-plan", plan, "-f", cfg, "-stages", "1, 5%,0.5%,100%", "-bake", "0s", "-auto-revert"); err != nil {
		t.Fatal(err)
	}
	third := (*got)[2]
	wantPlan = map[string]any{
		"stages": []any{map[string]any{"hosts": float64(1)}, map[string]any{"percent": float64(5)},
			map[string]any{"percent": 0.5}, map[string]any{"percent": float64(100)}},
		"bake_seconds": float64(0),
		"gate":         map[string]any{"max_failed": float64(1), "min_applied_ratio": 0.9},
		"auto_revert":  true,
	}
	if !reflect.DeepEqual(third.Body["plan"], wantPlan) {
		t.Errorf("plan %#v, want %#v", third.Body["plan"], wantPlan)
	}

	// Flags alone make a plan of their own.
	if _, err := runCLI(t, srv, "rollout", "start", "e1", "labels", "-f", cfg, "-bake", "5m"); err != nil {
		t.Fatal(err)
	}
	if p := (*got)[3].Body["plan"]; !reflect.DeepEqual(p, map[string]any{"bake_seconds": float64(300)}) {
		t.Errorf("plan %#v, want bake_seconds 300 only", p)
	}

	// Bad command lines send nothing.
	before := len(*got)
	for _, args := range [][]string{
		{"rollout", "start", "e1", "labels"},
		{"rollout", "start", "e1", "-f", cfg},
		{"rollout", "start", "e1", "labels", "-f", cfg, "-stages", "0,100%"},
		{"rollout", "start", "e1", "labels", "-f", cfg, "-stages", "1,150%"},
		{"rollout", "start", "e1", "labels", "-f", cfg, "-stages", "1,,100%"},
		{"rollout", "start", "e1", "labels", "-f", cfg, "-bake", "1.5s"},
		{"rollout", "start", "e1", "labels", "-f", cfg, "-if-match", "x"},
		{"rollout", "start", "e1", "labels", "-f", "-", "-plan", "-"},
		{"rollout", "frobnicate", "e1", "labels"},
		{"rollout"},
		{"rollout", "pause", "e1", "labels"},
		{"rollout", "status", "e1"},
		{"rollout", "status", "e1", "labels", "r1", "-watch", "-interval", "0s"},
	} {
		if _, err := runCLI(t, srv, args...); exitCode(err) != exitUsage {
			t.Errorf("%v: %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
	if len(*got) != before {
		t.Errorf("bad command lines sent %d request(s)", len(*got)-before)
	}
}

// TestRolloutStartRefused: the API's refusals map to cfgctl's exit codes with their message.
func TestRolloutStartRefused(t *testing.T) {
	answer := func(status int, code, msg string) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"code":%q,"message":%q}}`, code, msg)
		}
	}
	srv, _ := fakeAPI(t, map[string]func(http.ResponseWriter){
		"POST /api/v1/environments/busy/agent-configs/labels/rollouts":  answer(http.StatusConflict, "rollout_active", "rollout r0 of labels is running"),
		"POST /api/v1/environments/bad/agent-configs/labels/rollouts":   answer(http.StatusBadRequest, "invalid_plan", "plan.stages[2].percent: the last stage must be 100"),
		"POST /api/v1/environments/moved/agent-configs/labels/rollouts": answer(http.StatusPreconditionFailed, "precondition_failed", "version changed"),
	})
	cfg := filepath.Join(t.TempDir(), "l.json")
	os.WriteFile(cfg, []byte(`{"static":{"a":"b"}}`), 0o600)
	for env, want := range map[string]int{"busy": exitConflict, "bad": exitInvalid, "moved": exitConflict, "missing": exitNotFound} {
		_, err := runCLI(t, srv, "rollout", "start", env, "labels", "-f", cfg, "-stages", "1,100%")
		if exitCode(err) != want {
			t.Errorf("%s: %v (exit %d), want exit %d", env, err, exitCode(err), want)
		}
	}
	_, err := runCLI(t, srv, "rollout", "start", "bad", "labels", "-f", cfg)
	if err == nil || !strings.Contains(err.Error(), "plan.stages[2].percent") {
		t.Errorf("the API's message naming the field is lost: %v", err)
	}
}

// TestRolloutActions: pause, resume, promote and abort post to their routes without a body and print
// the rollout answered; an action the state refuses is a conflict (exit 4).
func TestRolloutActions(t *testing.T) {
	stages := [3]string{
		stageJSON(0, 1, 0, "passed", 1, 1, 0, 0, 0, 0, ""),
		stageJSON(1, 0, 5, "baking", 10, 10, 0, 0, 0, 0, ""),
		stageJSON(2, 0, 100, "pending", 0, 0, 0, 0, 0, 0, "")}
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"POST " + rolloutsBase + "/r1/pause":   data(rolloutJSON("paused", 1, "paused by ops", stages)),
		"POST " + rolloutsBase + "/r1/resume":  data(rolloutJSON("running", 1, "", stages)),
		"POST " + rolloutsBase + "/r1/promote": data(rolloutJSON("running", 2, "", stages)),
		"POST " + rolloutsBase + "/r1/abort":   data(strings.Replace(rolloutJSON("reverted", 1, "aborted by ops", stages), `"current_stage"`, `"final_version":44,"current_stage"`, 1)),
		"POST " + rolloutsBase + "/r2/resume": func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"code":"rollout_not_running","message":"rollout r2 is completed"}}`)
		},
	})
	for verb, state := range map[string]string{"pause": "paused", "resume": "running", "promote": "running", "abort": "reverted"} {
		out, err := runCLI(t, srv, "rollout", verb, "e1", "labels", "r1")
		if err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		last := (*got)[len(*got)-1]
		if last.Method != http.MethodPost || last.Path != rolloutsBase+"/r1/"+verb || last.Body != nil {
			t.Errorf("%s sent %+v", verb, last)
		}
		if !strings.Contains(out, "state:    "+state) {
			t.Errorf("%s output:\n%s", verb, out)
		}
	}
	if out, err := runCLI(t, srv, "rollout", "abort", "e1", "labels", "r1"); err != nil || !strings.Contains(out, "config:   labels, version 42 (previous 41, final version 44)") {
		t.Errorf("abort answer without its final version: %v\n%s", err, out)
	}
	if _, err := runCLI(t, srv, "rollout", "resume", "e1", "labels", "r2"); exitCode(err) != exitConflict || !strings.Contains(err.Error(), "rollout_not_running") {
		t.Errorf("resume of a finished rollout: %v (exit %d)", err, exitCode(err))
	}
}

// TestRolloutList: the list asks for -limit rollouts and prints one row each.
func TestRolloutList(t *testing.T) {
	stages := [3]string{
		stageJSON(0, 1, 0, "passed", 1, 1, 0, 0, 0, 0, ""),
		stageJSON(1, 0, 5, "passed", 10, 10, 0, 0, 0, 0, ""),
		stageJSON(2, 0, 100, "passed", 200, 200, 0, 0, 0, 0, "")}
	srv, got := fakeAPI(t, map[string]func(http.ResponseWriter){
		"GET " + rolloutsBase: data(`[` + rolloutJSON("completed", 2, "", stages) + `,` +
			strings.Replace(rolloutJSON("reverted", 1, "aborted by ops", stages), `"id":"r1"`, `"id":"r0"`, 1) + `]`),
	})
	out, err := runCLI(t, srv, "rollout", "list", "e1", "labels", "-limit", "5")
	if err != nil {
		t.Fatal(err)
	}
	if (*got)[0].Query != "limit=5" {
		t.Errorf("query %q", (*got)[0].Query)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "r1  completed") || !strings.HasPrefix(lines[2], "r0  reverted") || !strings.Contains(lines[2], "aborted by ops") {
		t.Fatalf("list:\n%s", out)
	}
}
