package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/tools/loadgen/internal/configapi"
	"github.com/configsync/configsync/tools/loadgen/internal/fleet"
	"github.com/configsync/configsync/tools/loadgen/internal/observe"
)

func TestFailingAgentsSpreadEvenlyAndSpareTheCanary(t *testing.T) {
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = fmt.Sprintf("a-%05d", i)
	}
	got := failingAgents(ids, 0.05)
	if len(got) != 500 || got[ids[0]] {
		t.Fatalf("%d failing agents (canary among them: %t), want 500 of 9,999 without the canary", len(got), got[ids[0]])
	}
	// Spread: every tenth of the fleet holds about a tenth of them.
	for part := range 10 {
		n := 0
		for _, id := range ids[part*1000 : (part+1)*1000] {
			if got[id] {
				n++
			}
		}
		if n < 49 || n > 51 {
			t.Errorf("agents %d-%d: %d failing, want about 50", part*1000, part*1000+999, n)
		}
	}
	if n := len(failingAgents(ids, 0)); n != 0 {
		t.Errorf("ratio 0: %d failing", n)
	}
	if all := failingAgents(ids, 1); len(all) != len(ids)-1 || all[ids[0]] {
		t.Errorf("ratio 1: %d failing, want every agent but the canary", len(all))
	}
}

func TestRefusalPlaysTheAgentPolicy(t *testing.T) {
	r := New(Options{RunID: "t"}, Backend{}, nil)
	r.failing = map[string]bool{"bad": true}
	failing, _ := json.Marshal(r.rolloutConfig(true))
	clean, _ := json.Marshal(r.rolloutConfig(false))
	if got := r.refusal("bad", RolloutConfigType, failing); got != "labels: dynamic[0].command: policy: commands: uname: command labels are off (policy.commands is empty)" {
		t.Errorf("refusing agent, command label: %q", got)
	}
	for _, c := range []struct {
		agent, typ string
		payload    []byte
	}{{"good", RolloutConfigType, failing}, {"bad", RolloutConfigType, clean}, {"bad", "collectors", failing}, {"bad", RolloutConfigType, []byte(`{not json`)}} {
		if got := r.refusal(c.agent, c.typ, c.payload); got != "" {
			t.Errorf("%s %s %s: refused with %q", c.agent, c.typ, c.payload, got)
		}
	}
}

// TestRolloutScenariosAgainstAFakeAPI runs both rollout scenarios over 40 simulated agents against a
// fake of the rollout routes that plays the contract: it pushes the version to a stage's agents over
// NATS when the stage starts, counts their acks and, once all its agents answered, pauses on a failed
// ack or passes the stage; on abort it pushes the previous config as a newer version to the agents
// reached. The scenario must report what the fake did.
func TestRolloutScenariosAgainstAFakeAPI(t *testing.T) {
	natsURL := startNATS(t)
	const agents = 40
	ids := make([]string, agents)
	for i := range ids {
		ids[i] = fmt.Sprintf("lg-t-%06d", i)
	}
	fake := newFakeRollouts(t, natsURL, ids)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	var log bytes.Buffer
	r := New(Options{Agents: agents, Conns: 2, Subscriptions: fleet.Wildcard, Timeout: 20 * time.Second, PollInterval: 5 * time.Millisecond,
		FailRatio: 0.3, RunID: "t", Scenarios: map[string]bool{Rollout: true, RolloutFail: true}},
		Backend{API: configapi.New(srv.URL, "tok", 2), Observer: fake, NATSURL: natsURL}, &log)
	r.res = &Result{}
	r.envID = "env-1"
	r.failing = failingAgents(ids, r.opts.FailRatio)
	f, err := r.newFleet(ids)
	if err != nil {
		t.Fatal(err)
	}
	r.fleet = f
	defer f.Close()

	clean, err := r.rollout(context.Background(), false)
	if err != nil {
		t.Fatalf("rollout: %v\n%s", err, log.String())
	}
	if clean.State != configapi.RolloutCompleted || clean.CurrentStage != 2 || len(clean.Stages) != 3 || clean.Version != 42 || clean.PreviousVersion != 41 {
		t.Fatalf("clean rollout = %+v", clean)
	}
	if clean.Received != agents || clean.Reached != agents || clean.AllAcked <= 0 || clean.Abort != nil {
		t.Fatalf("clean rollout: received %d, reached %d, all acked after %s, abort %+v", clean.Received, clean.Reached, clean.AllAcked, clean.Abort)
	}
	for i, want := range []int{1, 3, 36} {
		s := clean.Stages[i]
		if s.State != "passed" || s.Targeted != want || s.Applied != want || s.Failed != 0 || s.Started < 0 || s.Passed < s.Started || s.SeenPassed <= 0 {
			t.Errorf("clean stage %d = %+v", i, s)
		}
	}
	if clean.Commands != agents || clean.Repeated != 0 {
		t.Errorf("clean rollout: %d commands (%d repeated), want one per agent", clean.Commands, clean.Repeated)
	}
	if !strings.Contains(clean.Plan, "1 host → 5% → 100%; bake 0 s") {
		t.Errorf("plan %q", clean.Plan)
	}

	failing, err := r.rollout(context.Background(), true)
	if err != nil {
		t.Fatalf("rollout-fail: %v\n%s", err, log.String())
	}
	if failing.State != configapi.RolloutPaused || failing.CurrentStage != 1 || !strings.HasPrefix(failing.Reason, "gate failed at stage 1") {
		t.Fatalf("failing rollout = %+v", failing)
	}
	if failing.FailingAgents != len(r.failing) || failing.FailingAgents != 12 {
		t.Errorf("failing agents %d (%d picked), want 12 of 39", failing.FailingAgents, len(r.failing))
	}
	s1 := failing.Stages[1]
	if s1.Failed == 0 || s1.Failed+s1.Applied != s1.Targeted || len(s1.TopErrors) != 1 || !strings.HasPrefix(s1.TopErrors[0].Error, "labels: dynamic[0].command: policy: commands: uname") {
		t.Errorf("stage 1 = %+v", s1)
	}
	if failing.Stages[2].State != "pending" || failing.Received != failing.Reached || failing.Reached != 1+s1.Targeted {
		t.Errorf("received %d, reached %d, stages %+v", failing.Received, failing.Reached, failing.Stages)
	}
	ab := failing.Abort
	if ab == nil || ab.State != configapi.RolloutReverted || ab.Reached != failing.Reached || ab.Reverted != ab.Reached || ab.Version != 44 {
		t.Fatalf("abort = %+v", ab)
	}
	if failing.Commands != 4 || ab.Commands != 4 {
		t.Errorf("failing rollout: %d commands, abort %d; want 4 and 4 (the canary and stage 1)", failing.Commands, ab.Commands)
	}
	if got := f.Stats().Refused; got != int64(s1.Failed) {
		t.Errorf("the fleet refused %d configs, the rollout counts %d failed", got, s1.Failed)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.bad) > 0 {
		t.Fatalf("requests off the contract: %v", fake.bad)
	}
	if fake.starts != 2 || fake.aborts != 1 {
		t.Fatalf("%d starts, %d aborts; want 2 and 1", fake.starts, fake.aborts)
	}
}

func TestRolloutWatchGivesUp(t *testing.T) {
	running := `{"data":{"id":"r1","state":"running","current_stage":0,"stages":[{"index":0,"hosts":1,"state":"baking","targeted":1,"pending":1}]}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/api/v1/environments/env-1/agent-configs/labels/rollouts/r1":
			io.WriteString(w, running)
		default:
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":{"code":"internal","message":"boom"}}`)
		}
	}))
	t.Cleanup(srv.Close)
	r := New(Options{Timeout: 30 * time.Millisecond, PollInterval: time.Millisecond}, Backend{API: configapi.New(srv.URL, "tok", 1)}, nil)
	r.envID = "env-1"
	polls := 0
	_, err := r.watchRollout(context.Background(), "r1", time.Millisecond, func(configapi.Rollout) bool { polls++; return false })
	if err == nil || !strings.Contains(err.Error(), "gave up") || !strings.Contains(err.Error(), "running, stage 0 baking: 0/1 applied") || polls < 2 {
		t.Fatalf("still running at the timeout: %v after %d polls", err, polls)
	}
	r.opts.Timeout = 10 * time.Second
	if _, err := r.watchRollout(context.Background(), "r2", time.Millisecond, func(configapi.Rollout) bool { return true }); err == nil || !strings.Contains(err.Error(), "HTTP 500") {
		t.Fatalf("an error answer: %v", err)
	}
}

func startNATS(t *testing.T) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

// fakeRollouts plays config-api's rollout routes for one environment's labels config, delivery's pushes
// (over NATS, to the agents of a stage when it starts) and ack-ingest (it counts the agents' acks). It
// is also the scenario's Observer.
type fakeRollouts struct {
	t      *testing.T
	nc     *nats.Conn
	stages [][]string // agent ids per stage: the canary (agent 0), three more, the rest

	mu             sync.Mutex
	bad            []string
	starts, aborts int
	version        int64
	previous       json.RawMessage
	current        json.RawMessage
	ro             configapi.Rollout
	acks           map[string]protocol.Ack // newest per agent
}

func newFakeRollouts(t *testing.T, url string, ids []string) *fakeRollouts {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// Stage 1 takes agents 1-3 (agent 2 refuses at a fail ratio of 0.3), stage 2 the rest.
	f := &fakeRollouts{t: t, nc: nc, stages: [][]string{ids[:1], ids[1:4], ids[4:]}, version: 41,
		previous: json.RawMessage(`{"static":{"bench":"loadgen"}}`), acks: map[string]protocol.Ack{}}
	if _, err := nc.Subscribe(protocol.AckSubjectAll, func(m *nats.Msg) {
		var a protocol.Ack
		if err := json.Unmarshal(m.Data, &a); err != nil || protocol.AckSubject(a.AgentID) != m.Subject {
			f.fail("ack %s on %s", m.Data, m.Subject)
			return
		}
		f.mu.Lock()
		f.acks[a.AgentID] = a
		f.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeRollouts) fail(format string, args ...any) {
	f.mu.Lock()
	f.bad = append(f.bad, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

const fakeBase = "/api/v1/environments/env-1/agent-configs/labels/rollouts"

func (f *fakeRollouts) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Header.Get("Authorization") != "Bearer tok" {
		f.fail("%s %s without the token", req.Method, req.URL.Path)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case req.Method == http.MethodPost && req.URL.Path == fakeBase:
		var body struct {
			ConfigData json.RawMessage       `json:"config_data"`
			Plan       configapi.RolloutPlan `json:"plan"`
		}
		dec := json.NewDecoder(req.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil || len(body.ConfigData) == 0 || len(body.Plan.Stages) != 3 || body.Plan.BakeSeconds != 0 ||
			body.Plan.Stages[2].Percent != 100 || body.Plan.Gate.MinAppliedRatio != 0.95 {
			f.bad = append(f.bad, fmt.Sprintf("start body %+v (%v)", body, err))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if f.ro.Active() {
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"code":"rollout_active","message":"a rollout is active"}}`)
			return
		}
		f.starts++
		f.previous, f.current = f.current, body.ConfigData
		if f.previous == nil {
			f.previous = json.RawMessage(`{"static":{"bench":"loadgen"}}`)
		}
		prev := f.version
		f.version++
		now := time.Now().UTC()
		f.ro = configapi.Rollout{ID: fmt.Sprintf("r%d", f.starts), EnvironmentID: "env-1", ConfigType: "labels", State: configapi.RolloutRunning,
			PreviousVersion: &prev, Version: f.version, CreatedAt: now, UpdatedAt: now}
		for i, p := range body.Plan.Stages {
			f.ro.Stages = append(f.ro.Stages, configapi.RolloutStage{Index: i, Hosts: p.Hosts, Percent: p.Percent, Selector: p.Selector, State: "pending"})
		}
		f.startStage(0)
		f.answer(w, http.StatusCreated)
	case req.Method == http.MethodGet && req.URL.Path == fakeBase+"/"+f.ro.ID:
		f.advance()
		f.answer(w, http.StatusOK)
	case req.Method == http.MethodPost && req.URL.Path == fakeBase+"/"+f.ro.ID+"/abort":
		if n, _ := io.Copy(io.Discard, req.Body); n > 0 {
			f.bad = append(f.bad, "abort with a body")
		}
		f.aborts++
		f.version++
		for _, s := range f.ro.Stages {
			if s.State != "pending" {
				f.push(f.stages[s.Index], f.version, f.previous)
			}
		}
		f.current = f.previous
		f.ro.State, f.ro.Reason, f.ro.FinalVersion, f.ro.UpdatedAt = configapi.RolloutReverted, "aborted", f.version, time.Now().UTC()
		f.answer(w, http.StatusOK)
	default:
		f.bad = append(f.bad, req.Method+" "+req.URL.Path)
		w.WriteHeader(http.StatusNotFound)
	}
}

func (f *fakeRollouts) answer(w http.ResponseWriter, status int) {
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"data": f.ro})
}

func (f *fakeRollouts) startStage(i int) {
	now := time.Now().UTC()
	f.ro.CurrentStage = i
	f.ro.Stages[i].State, f.ro.Stages[i].StartedAt = "baking", &now
	f.push(f.stages[i], f.ro.Version, f.current)
}

func (f *fakeRollouts) push(ids []string, version int64, payload json.RawMessage) {
	for _, id := range ids {
		data, _ := json.Marshal(protocol.Command{CommandID: fmt.Sprintf("c-%d-%s", version, id), Type: protocol.CommandConfigUpdate,
			ConfigType: "labels", Version: version, Payload: payload})
		if err := f.nc.Publish(protocol.CommandSubject(id), data); err != nil {
			f.bad = append(f.bad, err.Error())
		}
	}
}

// advance recounts the current stage from the acks and, once every agent of the stage answered, moves
// the rollout on as a gate with max_failed 0 would: pause on a failure, else pass.
func (f *fakeRollouts) advance() {
	if f.ro.State != configapi.RolloutRunning {
		return
	}
	i := f.ro.CurrentStage
	s := &f.ro.Stages[i]
	s.Targeted, s.Applied, s.Failed, s.Pending, s.TopErrors = len(f.stages[i]), 0, 0, 0, nil
	errs := map[string]int{}
	for _, id := range f.stages[i] {
		a, ok := f.acks[id]
		switch {
		case !ok || a.Version < f.ro.Version:
			s.Pending++
		case a.Status == protocol.AckApplied:
			s.Applied++
		default:
			s.Failed++
			errs[a.Error]++
		}
	}
	for e, n := range errs {
		s.TopErrors = append(s.TopErrors, configapi.TopError{Error: e, Hosts: n})
	}
	now := time.Now().UTC()
	f.ro.UpdatedAt = now
	switch {
	case s.Pending > 0:
	case s.Failed > 0:
		s.State = "failed"
		f.ro.State, f.ro.Reason = configapi.RolloutPaused, fmt.Sprintf("gate failed at stage %d: %d failed acks > max_failed 0", i, s.Failed)
	case s.Pending == 0:
		s.State, s.PassedAt = "passed", &now
		if i == len(f.ro.Stages)-1 {
			f.ro.State = configapi.RolloutCompleted
			return
		}
		f.startStage(i + 1)
	}
}

// The Observer of the scenario: acks as the fake counted them.

func (f *fakeRollouts) Name() string { return "fake" }
func (f *fakeRollouts) Close()       {}
func (f *fakeRollouts) Online(context.Context, string, time.Time) (int, error) {
	return 0, nil
}
func (f *fakeRollouts) Acks(_ context.Context, _, configType string, version int64) (observe.AckProgress, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var p observe.AckProgress
	for _, a := range f.acks {
		if a.ConfigType == configType && a.Version >= version {
			if a.Status == protocol.AckApplied {
				p.Applied++
			} else {
				p.Failed++
			}
		}
	}
	return p, nil
}
func (f *fakeRollouts) AckTimes(context.Context, string, string, int64) ([]time.Time, error) {
	return nil, nil
}
func (f *fakeRollouts) HeartbeatSeqSum(context.Context, string) (int64, error) { return 0, nil }
