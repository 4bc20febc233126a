package deliver

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

func TestFetch(t *testing.T) {
	r := newFleet(2)
	r.envCfg["healthcheck"] = cfg("healthcheck", 3, `{"interval_seconds":60}`)
	r.envCfg["labels"] = cfg("labels", 7, `null`) // deleted: versions only
	r.envCfg["collectors"] = cfg("collectors", 4, `[{"type":"mysql","name":"db","credential_id":"c1"},{"type":"http","name":"web","url":"http://x"}]`)
	r.hosts[1].overrides["collectors"] = cfg("collectors", 9, `[{"type":"mysql","name":"db","credential_id":"broken"}]`)
	inj := &fakeInjector{bad: map[string]bool{"broken": true}}
	f := NewFetcher(r, inj, zap.NewNop())

	reply, err := f.Fetch(context.Background(), "agent-00000")
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Configs) != 2 || !testinfra.JSONEqual(reply.Configs["healthcheck"], []byte(`{"interval_seconds":60}`)) {
		t.Fatalf("configs = %s", reply.Configs)
	}
	if !testinfra.JSONEqual(reply.Configs["collectors"], []byte(`[{"type":"mysql","name":"db","password":"pw-c1"},{"type":"http","name":"web","url":"http://x"}]`)) {
		t.Fatalf("collectors = %s", reply.Configs["collectors"])
	}
	if want := map[string]int64{"healthcheck": 3, "labels": 7, "collectors": 4}; !mapsEqual(reply.Versions, want) {
		t.Fatalf("versions = %v, want %v", reply.Versions, want)
	}
	if !slices.Equal(reply.SecretFields["collectors"], []string{"/0/password"}) || reply.TypeErrors != nil {
		t.Fatalf("secret fields %v, type errors %v", reply.SecretFields, reply.TypeErrors)
	}
	if inj.requests[0].Items[0].ClientID != "client-1" || inj.requests[0].Items[0].EnvironmentID != "env-1" {
		t.Fatalf("inject scope = %+v", inj.requests[0].Items[0])
	}

	// The second host's credential fails: no collectors at all, the rest delivered.
	reply, err = f.Fetch(context.Background(), "agent-00001")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := reply.Configs["collectors"]; ok {
		t.Fatalf("collectors delivered despite a failed credential: %s", reply.Configs["collectors"])
	}
	if _, ok := reply.Versions["collectors"]; ok {
		t.Fatal("collectors version sent: the agent would take it for a deletion")
	}
	if reply.TypeErrors["collectors"].Code != protocol.CodeCredentialFailed || reply.Configs["healthcheck"] == nil {
		t.Fatalf("reply = %+v", reply)
	}
}

func TestFetchWithoutCredentialsSkipsInjection(t *testing.T) {
	r := newFleet(1)
	r.envCfg["collectors"] = cfg("collectors", 2, `[{"type":"http","name":"web","url":"http://x"}]`)
	inj := &fakeInjector{}
	reply, err := NewFetcher(r, inj, zap.NewNop()).Fetch(context.Background(), "agent-00000")
	if err != nil {
		t.Fatal(err)
	}
	if len(inj.requests) != 0 || reply.Versions["collectors"] != 2 {
		t.Fatalf("requests %d, reply %+v", len(inj.requests), reply)
	}
}

func TestFetchErrors(t *testing.T) {
	r := newFleet(1)
	f := NewFetcher(r, &fakeInjector{}, zap.NewNop())
	if _, err := f.Fetch(context.Background(), "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown agent: %v", err)
	}
	r.fail = errors.New("nats: no responders available for request")
	if _, err := f.Fetch(context.Background(), "agent-00000"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("resolver down: %v", err)
	}
	// Credential service down: collectors withheld with a type error, the fetch still answers.
	r.fail = nil
	r.envCfg["collectors"] = cfg("collectors", 2, `[{"type":"mysql","name":"db","credential_id":"c1"}]`)
	r.envCfg["tracing"] = cfg("tracing", 1, `{"enabled":true}`)
	reply, err := NewFetcher(r, &fakeInjector{fail: errors.New("timeout")}, zap.NewNop()).Fetch(context.Background(), "agent-00000")
	if err != nil || reply.TypeErrors["collectors"].Code != protocol.CodeUnavailable || reply.Versions["tracing"] != 1 {
		t.Fatalf("reply %+v, err %v", reply, err)
	}
}

func newTestPusher(r *fakeResolver, inj *fakeInjector, pub *fakePublisher, pageSize int) *Pusher {
	return NewPusher(r, inj, pub, PushOptions{PageSize: pageSize, Now: func() time.Time { return fixedNow }}, zap.NewNop())
}

func TestPushEnvironmentReachesEveryOnlineHostOnce(t *testing.T) {
	r := newFleet(2500)
	r.envCfg["collectors"] = cfg("collectors", 10, `[{"type":"mysql","name":"db","credential_id":"c1"}]`)
	// Two hosts share one override (one set); one has its own; one override has no credentials.
	shared := cfg("collectors", 11, `[{"type":"redis","name":"cache","credential_id":"c2"}]`)
	r.hosts[0].overrides["collectors"] = shared
	r.hosts[1].overrides["collectors"] = shared
	r.hosts[3].overrides["collectors"] = cfg("collectors", 12, `[{"type":"postgres","name":"pg","credential_id":"c3"}]`)
	r.hosts[4].overrides["collectors"] = cfg("collectors", 13, `[]`)
	inj := &fakeInjector{}
	pub := &fakePublisher{}
	res, err := newTestPusher(r, inj, pub, 1000).Push(context.Background(), protocol.ConfigChanged{
		EventID: "ev-1", Scope: protocol.ScopeEnvironment, EnvironmentID: "env-1", ConfigType: "collectors", Version: 10})
	if err != nil {
		t.Fatal(err)
	}
	got := pub.byAgent()
	online := 0
	for i, h := range r.hosts {
		cmds := got[h.agent]
		if !h.online {
			if len(cmds) != 0 {
				t.Fatalf("offline %s got %d commands", h.agent, len(cmds))
			}
			continue
		}
		online++
		if len(cmds) != 1 {
			t.Fatalf("online %s got %d commands, want 1", h.agent, len(cmds))
		}
		c := cmds[0]
		if c.Type != protocol.CommandConfigUpdate || c.ConfigType != "collectors" || c.CommandID == "" || !c.IssuedAt.Equal(fixedNow) {
			t.Fatalf("command %+v", c)
		}
		want := map[int]int64{0: 11, 1: 11, 3: 12, 4: 13}[i]
		if want == 0 {
			want = 10
		}
		if c.Version != want {
			t.Fatalf("%s got version %d, want %d", h.agent, c.Version, want)
		}
		if i == 4 {
			if len(c.SecretFields) != 0 || containsSecret(c.Payload) {
				t.Fatalf("no-credential override got %+v", c)
			}
		} else if !slices.Equal(c.SecretFields, []string{"/0/password"}) || !containsSecret(c.Payload) {
			t.Fatalf("%s command not injected: %+v", h.agent, c)
		}
	}
	if res.Published != online || res.Hosts != online || res.Pages != 2 || res.SkippedCredentials != 0 {
		t.Fatalf("result %+v, online %d", res, online)
	}
	// The env list once for the whole event (it is on both pages), each set's credentialed override
	// once (the shared one is one set).
	if n := inj.items(); n != 3 {
		t.Fatalf("%d inject items, want 3: the env list and each distinct override once", n)
	}
	if pub.flushes != res.Pages {
		t.Fatalf("%d flushes for %d pages", pub.flushes, res.Pages)
	}
	for _, req := range r.pushReqs {
		if req.OnlineSince == nil || !req.OnlineSince.Equal(fixedNow.Add(-90*time.Second)) {
			t.Fatalf("online_since = %v", req.OnlineSince)
		}
		if req.Contract != protocol.ResolveSetsContract || req.EnvironmentVersion != 10 || req.HostIDs != nil {
			t.Fatalf("push request %+v: want this contract, the event's version, no host list", req)
		}
	}
	ids := map[string]bool{}
	for _, s := range pub.sent {
		if ids[s.cmd.CommandID] {
			t.Fatalf("command id %s reused", s.cmd.CommandID)
		}
		ids[s.cmd.CommandID] = true
	}
}

func TestPushCredentialFailureSkipsOnlyThoseHosts(t *testing.T) {
	r := newFleet(30)
	r.envCfg["collectors"] = cfg("collectors", 5, `[{"type":"mysql","name":"db","credential_id":"c1"}]`)
	r.hosts[0].overrides["collectors"] = cfg("collectors", 6, `[{"type":"mysql","name":"db","credential_id":"gone"}]`)
	pub := &fakePublisher{}
	res, err := newTestPusher(r, &fakeInjector{bad: map[string]bool{"gone": true}}, pub, 7).Push(context.Background(),
		protocol.ConfigChanged{EventID: "ev", Scope: protocol.ScopeEnvironment, EnvironmentID: "env-1", ConfigType: "collectors", Version: 5})
	if err != nil {
		t.Fatal(err)
	}
	got := pub.byAgent()
	if len(got["agent-00000"]) != 0 {
		t.Fatal("host with a failed credential was pushed")
	}
	if res.SkippedCredentials != 1 || res.Published != res.Hosts-1 || len(got["agent-00001"]) != 1 {
		t.Fatalf("result %+v", res)
	}

	// The environment's list failing skips every host using it, still none of the others.
	pub = &fakePublisher{}
	res, err = newTestPusher(r, &fakeInjector{bad: map[string]bool{"c1": true}}, pub, 7).Push(context.Background(),
		protocol.ConfigChanged{EventID: "ev", Scope: protocol.ScopeEnvironment, EnvironmentID: "env-1", ConfigType: "collectors", Version: 5})
	if err != nil {
		t.Fatal(err)
	}
	if res.Published != 1 || len(pub.byAgent()["agent-00000"]) != 1 || res.SkippedCredentials != res.Hosts-1 {
		t.Fatalf("result %+v", res)
	}
}

func TestPushHostScopeAndDeletion(t *testing.T) {
	r := newFleet(6)
	r.envCfg["labels"] = cfg("labels", 3, `{"static":{"env":"prod"}}`)
	r.hosts[1].overrides["labels"] = cfg("labels", 8, `null`) // override deleted and no env row? here: tombstone result
	pub := &fakePublisher{}
	p := newTestPusher(r, &fakeInjector{}, pub, 100)
	res, err := p.Push(context.Background(), protocol.ConfigChanged{EventID: "e", Scope: protocol.ScopeHost, EnvironmentID: "env-1",
		HostID: "host-00001", AgentID: "agent-00001", ConfigType: "labels", Version: 8, Deleted: true})
	if err != nil {
		t.Fatal(err)
	}
	got := pub.byAgent()
	if len(got) != 1 || len(got["agent-00001"]) != 1 {
		t.Fatalf("pushed to %v", got)
	}
	if c := got["agent-00001"][0]; string(c.Payload) != "null" || c.Version != 8 {
		t.Fatalf("deletion pushed as %+v", c)
	}
	// An offline host gets nothing.
	pub.sent = nil
	res, err = p.Push(context.Background(), protocol.ConfigChanged{EventID: "e2", Scope: protocol.ScopeHost, EnvironmentID: "env-1",
		HostID: "host-00002", ConfigType: "labels", Version: 9})
	if err != nil || res.Published != 0 || len(pub.sent) != 0 {
		t.Fatalf("offline host: %+v %v", res, err)
	}
}

// An environment-scope event at version V is pushed only to the hosts whose environment layer is at V
// (a staged rollout's hosts outside started stages, or hosts a later write already moved on, are
// not changed by it); a host-scope event goes to its host whatever the environment's version.
func TestPushOnlyWhereTheEventsVersionIs(t *testing.T) {
	r := newFleet(9)
	r.envCfg["labels"] = cfg("labels", 7, `{"static":{"env":"prod"}}`)
	pub := &fakePublisher{}
	p := newTestPusher(r, &fakeInjector{}, pub, 4)
	res, err := p.Push(context.Background(), protocol.ConfigChanged{EventID: "old", Scope: protocol.ScopeEnvironment, EnvironmentID: "env-1",
		ConfigType: "labels", Version: 6})
	if err != nil || res.Published != 0 || res.Hosts != 0 || len(pub.sent) != 0 {
		t.Fatalf("event at a replaced version: %+v %v, %d sent", res, err, len(pub.sent))
	}
	res, err = p.Push(context.Background(), protocol.ConfigChanged{EventID: "new", Scope: protocol.ScopeEnvironment, EnvironmentID: "env-1",
		ConfigType: "labels", Version: 7})
	if err != nil || res.Published != 6 || len(pub.byAgent()) != 6 {
		t.Fatalf("event at the current version: %+v %v, sent to %d agents", res, err, len(pub.byAgent()))
	}
	for _, req := range r.pushReqs {
		if req.Contract != protocol.ResolveSetsContract || (req.EnvironmentVersion != 6 && req.EnvironmentVersion != 7) {
			t.Fatalf("environment push request %+v", req)
		}
	}
	pub.sent, r.pushReqs = nil, nil
	r.hosts[0].overrides["labels"] = cfg("labels", 9, `{"static":{"team":"edge"}}`)
	res, err = p.Push(context.Background(), protocol.ConfigChanged{EventID: "host", Scope: protocol.ScopeHost, EnvironmentID: "env-1",
		HostID: "host-00000", AgentID: "agent-00000", ConfigType: "labels", Version: 9})
	if err != nil || res.Published != 1 || len(pub.byAgent()["agent-00000"]) != 1 || pub.byAgent()["agent-00000"][0].Version != 9 {
		t.Fatalf("host event: %+v %v, sent %v", res, err, pub.byAgent())
	}
	if req := r.pushReqs[0]; req.EnvironmentVersion != 0 || !slices.Equal(req.HostIDs, []string{"host-00000"}) {
		t.Fatalf("host push request %+v", req)
	}
}

func TestPushErrors(t *testing.T) {
	r := newFleet(3)
	p := newTestPusher(r, &fakeInjector{}, &fakePublisher{}, 10)
	// Events are checked where they are decoded (protocol.ConfigChanged.Validate, tested with the
	// decoder); Push still refuses a scope it cannot page through rather than pushing environment-wide.
	for _, ev := range []protocol.ConfigChanged{
		{EventID: "e", Scope: "galaxy", EnvironmentID: "env-1", ConfigType: "labels"},
	} {
		if _, err := p.Push(context.Background(), ev); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%+v: err = %v, want invalid", ev, err)
		}
	}
	// A vanished environment is nothing to do.
	if _, err := p.Push(context.Background(), protocol.ConfigChanged{EventID: "e", Scope: protocol.ScopeEnvironment, EnvironmentID: "gone", ConfigType: "labels"}); err != nil {
		t.Fatalf("vanished environment: %v", err)
	}
	r.fail = errors.New("timeout")
	if _, err := p.Push(context.Background(), protocol.ConfigChanged{EventID: "e", Scope: protocol.ScopeEnvironment, EnvironmentID: "env-1", ConfigType: "labels"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("resolver down: %v", err)
	}
	// A resolver of another contract (a rolling upgrade), refusing the request or answering in its
	// own: the fan-out is redone, never misread.
	r.fail = protocol.Errorf(protocol.CodeContractMismatch, "contract 1, this resolver speaks 2")
	if _, err := p.Push(context.Background(), protocol.ConfigChanged{EventID: "e", Scope: protocol.ScopeEnvironment, EnvironmentID: "env-1", ConfigType: "labels"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("resolver of another contract: %v", err)
	}
	r.fail, r.contract = nil, protocol.ResolveSetsContract+1
	pub := &fakePublisher{}
	p = newTestPusher(r, &fakeInjector{}, pub, 10)
	if _, err := p.Push(context.Background(), protocol.ConfigChanged{EventID: "e", Scope: protocol.ScopeEnvironment, EnvironmentID: "env-1", ConfigType: "labels"}); !errors.Is(err, ErrUnavailable) || len(pub.sent) != 0 {
		t.Fatalf("reply of another contract: %v, %d sent", err, len(pub.sent))
	}
	r.contract = 0
	// Credential service down: the fan-out must be redone, not silently skipped.
	r.fail = nil
	r.envCfg["collectors"] = cfg("collectors", 2, `[{"type":"mysql","name":"db","credential_id":"c1"}]`)
	p = newTestPusher(r, &fakeInjector{fail: errors.New("timeout")}, &fakePublisher{}, 10)
	if _, err := p.Push(context.Background(), protocol.ConfigChanged{EventID: "e", Scope: protocol.ScopeEnvironment, EnvironmentID: "env-1", ConfigType: "collectors"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("credential service down: %v", err)
	}
}

func TestCommandTemplate(t *testing.T) {
	tmpl, err := newCommandTemplate("labels", 4, []byte(`{"static":{"a":"b"}}`), []string{"/x"}, nil, fixedNow)
	if err != nil {
		t.Fatal(err)
	}
	id := commandID("agent", "labels", 4)
	if id != commandID("agent", "labels", 4) || id == commandID("agent2", "labels", 4) || id == commandID("agent", "labels", 5) {
		t.Fatal("command ids must be deterministic per (agent, type, version)")
	}
	var c protocol.Command
	if err := json.Unmarshal(tmpl.appendCommand(nil, id), &c); err != nil {
		t.Fatal(err)
	}
	want := protocol.Command{CommandID: id, Type: protocol.CommandConfigUpdate, ConfigType: "labels", Version: 4,
		Payload: json.RawMessage(`{"static":{"a":"b"}}`), SecretFields: []string{"/x"}, IssuedAt: fixedNow}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("command %+v\nwant %+v", c, want)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Collectors stored with secrets inline (before the API refused them) are never delivered: fetches get
// a type error naming the fields (not their values) and the migration command, pushes skip the hosts,
// and the credential service is not asked. The other types and hosts are unaffected.
func TestInlineSecretsAreNotDelivered(t *testing.T) {
	r := newFleet(3)
	r.hosts[2].online = true // newFleet leaves every third host offline
	r.envCfg["collectors"] = cfg("collectors", 4, `[{"type":"http","name":"web","url":"http://x"}]`)
	r.envCfg["tracing"] = cfg("tracing", 1, `{"enabled":true}`)
	r.hosts[1].overrides["collectors"] = cfg("collectors", 9, `[{"type":"tcp","name":"t"},{"type":"mysql","name":"db","username":"mon","password":"hunter2-inline"}]`)
	r.hosts[2].overrides["collectors"] = cfg("collectors", 10, `[{"type":"postgres","name":"db","password":"hunter2-inline","credential_id":"c1"}]`)
	inj := &fakeInjector{}
	f := NewFetcher(r, inj, zap.NewNop())
	for _, tt := range []struct {
		agent, fields string
	}{
		{"agent-00001", "collectors[1].username, collectors[1].password"},
		{"agent-00002", "collectors[0].password"},
	} {
		reply, err := f.Fetch(context.Background(), tt.agent)
		if err != nil {
			t.Fatal(err)
		}
		e, ok := reply.TypeErrors["collectors"]
		if !ok || e.Code != protocol.CodeCredentialFailed || !strings.Contains(e.Message, tt.fields) ||
			!strings.Contains(e.Message, "config-api migrate-inline-secrets") || strings.Contains(e.Message, "hunter2") {
			t.Fatalf("%s: type errors %+v", tt.agent, reply.TypeErrors)
		}
		if _, ok := reply.Configs["collectors"]; ok || reply.Versions["tracing"] != 1 {
			t.Fatalf("%s: reply %+v", tt.agent, reply)
		}
	}
	if len(inj.requests) != 0 {
		t.Fatalf("credential service asked %d times for inline secrets", len(inj.requests))
	}
	reply, err := f.Fetch(context.Background(), "agent-00000")
	if err != nil || reply.TypeErrors != nil || reply.Versions["collectors"] != 4 {
		t.Fatalf("host without inline secrets: %+v, %v", reply, err)
	}

	pub := &fakePublisher{}
	res, err := newTestPusher(r, inj, pub, 2).Push(context.Background(),
		protocol.ConfigChanged{EventID: "ev", Scope: protocol.ScopeEnvironment, EnvironmentID: "env-1", ConfigType: "collectors", Version: 4})
	if err != nil {
		t.Fatal(err)
	}
	got := pub.byAgent()
	if res.SkippedCredentials != 2 || len(got["agent-00000"]) != 1 || len(got["agent-00001"])+len(got["agent-00002"]) != 0 {
		t.Fatalf("push result %+v, published to %v", res, got)
	}
}

// gatedPublisher holds the first command of a fan-out until the resolver has been asked for the next
// page (or a deadline passes), and records how many page requests the resolver had by then.
type gatedPublisher struct {
	*fakePublisher
	r      *fakeResolver
	gated  bool
	asked  int
	failAt int // when > 0, the resolver fails from this page request on
}

func (g *gatedPublisher) Publish(ctx context.Context, agentID string, command []byte) error {
	if !g.gated {
		g.gated = true
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			g.r.mu.Lock()
			g.asked = len(g.r.pushReqs)
			g.r.mu.Unlock()
			if g.asked >= 2 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	return g.fakePublisher.Publish(ctx, agentID, command)
}

// TestPushResolvesTheNextPageWhilePublishing: the resolver is asked for page 2 while page 1's commands
// are still being published, and every online host still gets its command once.
func TestPushResolvesTheNextPageWhilePublishing(t *testing.T) {
	r := newFleet(2500)
	r.envCfg["labels"] = cfg("labels", 4, `{"static":{"team":"a"}}`)
	pub := &gatedPublisher{fakePublisher: &fakePublisher{}, r: r}
	res, err := NewPusher(r, &fakeInjector{}, pub, PushOptions{PageSize: 700, Now: func() time.Time { return fixedNow }}, zap.NewNop()).
		Push(context.Background(), protocol.ConfigChanged{EventID: "ev-1", Scope: protocol.ScopeEnvironment, EnvironmentID: "env-1", ConfigType: "labels", Version: 4})
	if err != nil {
		t.Fatal(err)
	}
	if pub.asked < 2 {
		t.Fatalf("the resolver had %d page requests while page 1 was published, want the next page asked for too", pub.asked)
	}
	online := 0
	got := pub.byAgent()
	for _, h := range r.hosts {
		if h.online {
			online++
			if len(got[h.agent]) != 1 {
				t.Fatalf("online %s got %d commands, want 1", h.agent, len(got[h.agent]))
			}
		}
	}
	if res.Pages != 3 || res.Published != online {
		t.Fatalf("result %+v, want 3 pages and %d published", res, online)
	}
	// Each page asked once, each after the one before.
	if len(r.pushReqs) != 3 || r.pushReqs[0].After != "" || r.pushReqs[1].After == "" || r.pushReqs[2].After <= r.pushReqs[1].After {
		t.Fatalf("page requests %+v", r.pushReqs)
	}
}

// TestPushFailsOnAPageResolvedAhead: a page that fails while the one before it is published fails the
// fan-out after that page went out (the event is redone), naming the page.
func TestPushFailsOnAPageResolvedAhead(t *testing.T) {
	r := newFleet(2500)
	r.envCfg["labels"] = cfg("labels", 4, `{"static":{"team":"a"}}`)
	r.failFrom = 2
	pub := &fakePublisher{}
	res, err := newTestPusher(r, &fakeInjector{}, pub, 1000).Push(context.Background(),
		protocol.ConfigChanged{EventID: "ev-1", Scope: protocol.ScopeEnvironment, EnvironmentID: "env-1", ConfigType: "labels", Version: 4})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "resolve page 2") {
		t.Fatalf("err %v, want page 2's resolver failure as unavailable", err)
	}
	if res.Pages != 1 || res.Published == 0 || len(pub.sent) != res.Published {
		t.Fatalf("result %+v, %d sent: want page 1 published", res, len(pub.sent))
	}
}
