package delivery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

func TestEnvironmentChangeReachesEveryOnlineAgentOnly(t *testing.T) {
	s := newRunningStack(t, 30)

	// One host overrides the type: it gets its merged config, everyone else the environment's.
	s.putEnv(t, "labels", `{"static":{"env":"prod","team":"core"}}`)
	override := s.hosts[3]
	s.putHost(t, override, "labels", `{"static":{"team":"edge"}}`)
	v := s.putEnv(t, "labels", `{"static":{"env":"prod","team":"platform"}}`)
	s.changed(t, protocol.ConfigChanged{Scope: protocol.ScopeEnvironment, ConfigType: "labels", Version: v})
	s.eventsSettled(t)

	s.pushedToOnline(t, "labels", v, teamPlatformExcept(override))

	// A deletion is pushed as a null payload with the tombstone's version.
	s.fleet.reset()
	dv := s.deleteEnv(t, "labels")
	s.changed(t, protocol.ConfigChanged{Scope: protocol.ScopeEnvironment, ConfigType: "labels", Version: dv, Deleted: true})
	s.eventsSettled(t)
	for _, h := range s.hosts {
		cmds := s.fleet.commands(h.agent, "labels")
		if !h.online || h == override {
			if h == override && (len(cmds) != 1 || !testinfra.JSONEqual(cmds[0].Payload, []byte(`{"static":{"team":"edge"}}`))) {
				t.Fatalf("override host after env delete: %+v", cmds)
			}
			continue
		}
		if len(cmds) != 1 || string(cmds[0].Payload) != "null" || cmds[0].Version != dv {
			t.Fatalf("%s deletion push = %+v", h.agent, cmds)
		}
	}
}

// An environment event is pushed only to the hosts whose environment layer resolves to its version:
// an event a later write has overtaken changes nobody (the later event covers them), the later one
// reaches every online host, overrides merged on top.
func TestEnvironmentChangePushedOnlyAtItsVersion(t *testing.T) {
	s := newRunningStack(t, 12)

	override := s.hosts[4]
	s.putHost(t, override, "labels", `{"static":{"team":"edge"}}`)
	old := s.putEnv(t, "labels", `{"static":{"env":"prod","team":"core"}}`)
	current := s.putEnv(t, "labels", `{"static":{"env":"prod","team":"platform"}}`)
	s.changed(t, protocol.ConfigChanged{Scope: protocol.ScopeEnvironment, ConfigType: "labels", Version: old})
	s.eventsSettled(t)
	if agents := s.fleet.agents(); len(agents) != 0 {
		t.Fatalf("an overtaken event (version %d, environment at %d) was pushed to %v", old, current, agents)
	}

	s.changed(t, protocol.ConfigChanged{Scope: protocol.ScopeEnvironment, ConfigType: "labels", Version: current})
	s.eventsSettled(t)
	s.pushedToOnline(t, "labels", current, teamPlatformExcept(override))
}

// teamPlatformExcept is the labels every host resolves to once the environment's team is platform and
// override's own is edge.
func teamPlatformExcept(override testHost) func(testHost) string {
	return func(h testHost) string {
		if h == override {
			return `{"static":{"env":"prod","team":"edge"}}`
		}
		return `{"static":{"env":"prod","team":"platform"}}`
	}
}

// pushedToOnline checks that every online host received exactly one config_update of typ at version,
// with the payload want gives it, and every offline host none; and that every command decoded.
func (s *stack) pushedToOnline(t *testing.T, typ string, version int64, want func(testHost) string) {
	t.Helper()
	for _, h := range s.hosts {
		cmds := s.fleet.commands(h.agent, typ)
		if !h.online {
			if len(cmds) != 0 {
				t.Fatalf("offline %s received %d commands", h.agent, len(cmds))
			}
			continue
		}
		if len(cmds) != 1 {
			t.Fatalf("online %s received %d commands, want 1 (undecodable: %v; agents with commands: %v)", h.agent, len(cmds), s.fleet.bad, s.fleet.agents())
		}
		c, w := cmds[0], want(h)
		if c.Type != protocol.CommandConfigUpdate || c.Version != version || c.CommandID == "" || !testinfra.JSONEqual(c.Payload, []byte(w)) {
			t.Fatalf("%s received %+v (payload %s), want version %d payload %s", h.agent, c, c.Payload, version, w)
		}
	}
	if len(s.fleet.bad) != 0 {
		t.Fatalf("undecodable commands for %v", s.fleet.bad)
	}
}

func TestHostChangeReachesOnlyThatHost(t *testing.T) {
	s := newRunningStack(t, 12)

	s.putEnv(t, "intervals", `{"metrics":"30s","heartbeat":"30s"}`)
	target, offline := s.hosts[4], s.hosts[5]
	v := s.putHost(t, target, "intervals", `{"metrics":"10s"}`)
	s.changed(t, protocol.ConfigChanged{Scope: protocol.ScopeHost, HostID: target.id.String(), AgentID: target.agent, ConfigType: "intervals", Version: v})
	vOff := s.putHost(t, offline, "intervals", `{"metrics":"5s"}`)
	s.changed(t, protocol.ConfigChanged{Scope: protocol.ScopeHost, HostID: offline.id.String(), AgentID: offline.agent, ConfigType: "intervals", Version: vOff})
	s.eventsSettled(t)

	for _, h := range s.hosts {
		cmds := s.fleet.commands(h.agent, "intervals")
		if h != target {
			if len(cmds) != 0 {
				t.Fatalf("%s received a push meant for %s", h.agent, target.agent)
			}
			continue
		}
		if len(cmds) != 1 || cmds[0].Version != v || !testinfra.JSONEqual(cmds[0].Payload, []byte(`{"metrics":"10s","heartbeat":"30s"}`)) {
			t.Fatalf("%s received %+v", h.agent, cmds)
		}
	}
}

func TestFetchIsWhatResolverAndCredentialsGive(t *testing.T) {
	s := newRunningStack(t, 3)
	const secret = "s3cret-planted-password"
	credID := s.createCredential(t, s.clientID, "mysql-primary", map[string]string{"password": secret, "username": "monitor"})

	h := s.hosts[0]
	s.putEnv(t, "collectors", fmt.Sprintf(`[{"type":"mysql","name":"primary","host":"db","port":3306,"credential_id":%q},{"type":"http","name":"web","url":"http://localhost/health"}]`, credID))
	s.putHost(t, h, "collectors", `[{"type":"http","name":"web","url":"http://localhost/health","interval":"10s"},{"type":"tcp","name":"ssh","address":"localhost:22"}]`)
	s.putEnv(t, "healthcheck", `{"interval_seconds":60,"timeout_seconds":5}`)
	s.putEnv(t, "tracing", `{"enabled":true,"sample_ratio":0.5}`)
	deleted := s.deleteEnv(t, "tracing")

	reply := s.fetch(t, h.agent, h.agent)
	if reply.Error != nil || len(reply.TypeErrors) != 0 {
		t.Fatalf("fetch failed: %+v", reply)
	}

	// The same answer, computed from the resolver and the credential service directly.
	var resolved protocol.ResolveReply
	request(t, s, protocol.ResolveSubject, protocol.ResolveRequest{AgentID: h.agent}, &resolved)
	var injected protocol.InjectReply
	request(t, s, protocol.CredentialInjectSubject, protocol.InjectRequest{Items: []protocol.InjectItem{{Key: "k",
		ClientID: s.clientID.String(), EnvironmentID: s.envID.String(), Collectors: resolved.Configs["collectors"].ConfigData}}}, &injected)
	wantConfigs := map[string]json.RawMessage{}
	wantVersions := map[string]int64{}
	for typ, ec := range resolved.Configs {
		wantVersions[typ] = ec.Version
		if string(ec.ConfigData) != "null" {
			wantConfigs[typ] = ec.ConfigData
		}
	}
	wantConfigs["collectors"] = injected.Results[0].Collectors
	if len(reply.Configs) != len(wantConfigs) || len(reply.Versions) != len(wantVersions) {
		t.Fatalf("fetch configs %v versions %v, want %v %v", keys(reply.Configs), reply.Versions, keys(wantConfigs), wantVersions)
	}
	for typ, want := range wantConfigs {
		if !testinfra.JSONEqual(reply.Configs[typ], want) || reply.Versions[typ] != wantVersions[typ] {
			t.Errorf("%s: fetch %s v%d, want %s v%d", typ, reply.Configs[typ], reply.Versions[typ], want, wantVersions[typ])
		}
	}
	if _, ok := reply.Configs["tracing"]; ok || reply.Versions["tracing"] != deleted {
		t.Errorf("deleted type: config present=%v, version %d want %d", ok, reply.Versions["tracing"], deleted)
	}
	if !slices.Equal(reply.SecretFields["collectors"], injected.Results[0].SecretFields) || len(reply.SecretFields["collectors"]) == 0 {
		t.Errorf("secret fields %v, want %v", reply.SecretFields, injected.Results[0].SecretFields)
	}
	// Spot checks of the rules themselves: the secret is inlined, the reference gone, the merge applied.
	col := string(reply.Configs["collectors"])
	if !strings.Contains(col, secret) || strings.Contains(col, "credential_id") || !strings.Contains(col, `"ssh"`) || !strings.Contains(col, `"10s"`) {
		t.Errorf("collectors = %s", col)
	}
	assertNoSecretLogged(t, s, secret)
}

func TestFetchRefusals(t *testing.T) {
	s := newRunningStack(t, 2)
	if r := s.fetch(t, s.hosts[0].agent, s.hosts[1].agent); r.Error == nil || r.Error.Code != protocol.CodeForbidden {
		t.Errorf("fetch for another agent: %+v", r)
	}
	if r := s.fetch(t, "agent-nobody", "agent-nobody"); r.Error == nil || r.Error.Code != protocol.CodeNotFound {
		t.Errorf("unknown agent: %+v", r)
	}
	msg, err := testinfra.RequestAsAgent(s.nc, s.hosts[0].agent, protocol.FetchSubject(s.hosts[0].agent), []byte(`{"agent_id":`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r protocol.FetchReply
	if err := json.Unmarshal(msg.Data, &r); err != nil || r.Error == nil || r.Error.Code != protocol.CodeInvalidRequest {
		t.Errorf("malformed request: %s", msg.Data)
	}
}

// A fetch whose reply subject is not the asking agent's own inbox is dropped unanswered (and counted):
// an agent cannot make delivery write a config reply into a stream, another agent's inbox or any other
// subject of its choosing.
func TestFetchAnsweredOnlyOnTheAgentsInbox(t *testing.T) {
	s := newRunningStack(t, 2)
	agent := s.hosts[0].agent
	targets := []string{
		protocol.ConfigChangedSubject,
		protocol.CommandSubject(s.hosts[1].agent),
		protocol.InboxPrefix(s.hosts[1].agent) + ".stolen",
		"_INBOX.unrelated",
		protocol.InboxPrefix(agent) + "x.lookalike", // a prefix of the agent's id is not its inbox
	}
	spy, err := s.nc.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = spy.Unsubscribe() }()
	data, _ := json.Marshal(protocol.FetchRequest{AgentID: agent})
	for _, reply := range targets {
		if err := s.nc.PublishRequest(protocol.FetchSubject(agent), reply, data); err != nil {
			t.Fatal(err)
		}
	}
	// A fetch on the agent's own inbox, sent after them, is answered: by then the others were handled.
	if r := s.fetch(t, agent, agent); r.Error != nil {
		t.Fatalf("fetch on the agent's own inbox: %+v", r.Error)
	}
	if n := s.logs.FilterMessage("request dropped: reply subject not allowed").Len(); n != len(targets) {
		t.Errorf("%d fetches dropped for their reply subject, want %d", n, len(targets))
	}
	for {
		msg, err := spy.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		for _, target := range targets {
			if msg.Subject == target {
				t.Errorf("delivery answered a fetch on %s", target)
			}
		}
	}
}

func TestCredentialFailureSkipsOnlyThatHost(t *testing.T) {
	s := newRunningStack(t, 9)
	good := s.createCredential(t, s.clientID, "redis", map[string]string{"password": "redis-pw-planted"})
	foreign := s.createCredential(t, s.otherClient(t), "theirs", map[string]string{"password": "foreign-pw-planted"})

	broken := s.hosts[1]
	s.putHost(t, broken, "collectors", fmt.Sprintf(`[{"type":"mysql","name":"stolen","host":"db","port":3306,"credential_id":%q}]`, foreign))
	v := s.putEnv(t, "collectors", fmt.Sprintf(`[{"type":"redis","name":"cache","host":"r","port":6379,"credential_id":%q}]`, good))
	s.putEnv(t, "healthcheck", `{"interval_seconds":30,"timeout_seconds":3}`)
	s.changed(t, protocol.ConfigChanged{Scope: protocol.ScopeEnvironment, ConfigType: "collectors", Version: v})
	s.eventsSettled(t)

	for _, h := range s.hosts {
		cmds := s.fleet.commands(h.agent, "collectors")
		switch {
		case h == broken || !h.online:
			if len(cmds) != 0 {
				t.Fatalf("%s (online %v) received %d collector pushes", h.agent, h.online, len(cmds))
			}
		case len(cmds) != 1 || !strings.Contains(string(cmds[0].Payload), "redis-pw-planted") || len(cmds[0].SecretFields) == 0:
			t.Fatalf("%s received %+v", h.agent, cmds)
		}
	}
	if s.logs.FilterMessage("push: hosts skipped, their config cannot be delivered").Len() == 0 {
		t.Error("the skipped host was not logged")
	}

	// The broken host's fetch leaves collectors out entirely and says why; the rest is delivered.
	r := s.fetch(t, broken.agent, broken.agent)
	if _, ok := r.Configs["collectors"]; ok || r.TypeErrors["collectors"].Code != protocol.CodeCredentialFailed || r.Configs["healthcheck"] == nil {
		t.Fatalf("broken host fetch: %+v", r)
	}
	if _, ok := r.Versions["collectors"]; ok {
		t.Fatal("collectors version sent without collectors: the agent would drop its collectors")
	}
	assertNoSecretLogged(t, s, "redis-pw-planted")
	assertNoSecretLogged(t, s, "foreign-pw-planted")
}

func TestEventRedoneUntilFanOutRuns(t *testing.T) {
	s := newStack(t, 6)
	s.startCredential(t)
	s.startDelivery(t, testDeliveryConfig(t))
	// Garbage on the events subject is terminated and does not hold up the next event.
	s.publishEvent(t, []byte(`{"scope":"everywhere"`))
	v := s.putEnv(t, "log_shipping", `{"enabled":true,"level":"warn"}`)
	// No resolver yet: the fan-out fails and the event stays unacknowledged.
	s.changed(t, protocol.ConfigChanged{Scope: protocol.ScopeEnvironment, ConfigType: "log_shipping", Version: v})
	testinfra.Eventually(t, 30*time.Second, func() bool {
		return s.logs.FilterMessage("push failed, will redo").Len() > 0
	}, "fan-out failure")
	if s.logs.FilterMessage("malformed config-change event terminated").Len() != 1 {
		t.Fatal("malformed event not terminated")
	}
	s.startResolver(t)
	s.eventsSettled(t)
	for _, h := range s.hosts {
		if n := len(s.fleet.commands(h.agent, "log_shipping")); (n == 1) != h.online {
			t.Fatalf("%s (online %v) received %d pushes", h.agent, h.online, n)
		}
	}
}

func TestFetchBurst(t *testing.T) {
	const agents = 300
	s := newRunningStack(t, agents)
	s.putEnv(t, "watch_files", `{"paths":["/etc"],"exclude_patterns":["*.swp"]}`)
	var wg sync.WaitGroup
	errs := make(chan string, agents)
	for _, h := range s.hosts {
		wg.Go(func() {
			data, _ := json.Marshal(protocol.FetchRequest{AgentID: h.agent})
			msg, err := testinfra.RequestAsAgent(s.nc, h.agent, protocol.FetchSubject(h.agent), data, 30*time.Second)
			if err != nil {
				errs <- h.agent + ": " + err.Error()
				return
			}
			var r protocol.FetchReply
			if err := json.Unmarshal(msg.Data, &r); err != nil || r.Error != nil || r.Versions["watch_files"] == 0 {
				errs <- h.agent + ": " + string(msg.Data)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func request(t *testing.T, s *stack, subject string, req, reply any) {
	t.Helper()
	data, _ := json.Marshal(req)
	msg, err := s.nc.RequestWithContext(context.Background(), subject, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(msg.Data, reply); err != nil {
		t.Fatalf("%s: %s", subject, msg.Data)
	}
}

func assertNoSecretLogged(t *testing.T, s *stack, secret string) {
	t.Helper()
	assertSecretsNotLogged(t, s.logs, secret)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
