package resolver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/resolver"
	"github.com/configsync/configsync/services/resolver/internal/seed"
)

// requestTimeout only bounds a broken test; nothing asserts on timing.
const requestTimeout = 10 * time.Second

type stack struct {
	db     *seed.DB
	server *testinfra.NATSServer
	client *nats.Conn
}

// newStack starts instances resolver instances (each on its own connection) over a fresh database.
func newStack(t testing.TB, instances int, cfg resolver.Config) stack {
	t.Helper()
	pool := testinfra.Postgres(t)
	srv := testinfra.NATS(t)
	for range instances {
		log, _ := testinfra.Logger(t)
		svc, err := resolver.New(cfg, pool, log)
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Start(srv.Connect(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := svc.Stop(context.Background()); err != nil {
				t.Errorf("stop: %v", err)
			}
		})
	}
	return stack{db: seed.New(t, pool), server: srv, client: srv.Connect(t)}
}

// call sends a request and decodes the reply, or returns the micro error code.
func call[R any](t testing.TB, nc *nats.Conn, subject string, req any) (R, string) {
	t.Helper()
	var reply R
	msg := testinfra.RequestJSON(t, nc, subject, req, requestTimeout)
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return reply, code
	}
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		t.Fatalf("decode %s reply %s: %v", subject, msg.Data, err)
	}
	return reply, ""
}

func resolve(t *testing.T, nc *nats.Conn, req protocol.ResolveRequest) protocol.ResolveReply {
	t.Helper()
	reply, code := call[protocol.ResolveReply](t, nc, protocol.ResolveSubject, req)
	if code != "" {
		t.Fatalf("resolve %+v: error %s", req, code)
	}
	return reply
}

func jsonEqual(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	if want == "" {
		if len(got) != 0 && string(got) != "null" {
			t.Fatalf("%s: data = %s, want null", what, got)
		}
		return
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: data %q: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: data = %s, want %s", what, got, want)
	}
}

func expect(t *testing.T, what string, got protocol.EffectiveConfig, data, source string, version, envV, hostV int64) {
	t.Helper()
	jsonEqual(t, what, got.ConfigData, data)
	if got.Source != source || got.Version != version || got.EnvironmentVersion != envV || got.HostVersion != hostV {
		t.Fatalf("%s = {source %q version %d env %d host %d}, want {%q %d %d %d}", what,
			got.Source, got.Version, got.EnvironmentVersion, got.HostVersion, source, version, envV, hostV)
	}
}

// The spec's four resolution cases, end to end over NATS.
func TestResolveCases(t *testing.T) {
	s := newStack(t, 1, resolver.Config{})
	env := s.db.Environment("prod")
	host := s.db.Host(env, "web-1", "agent-web-1")

	envOnly := s.db.PutEnv(env, "watch_files", `{"paths":["/etc","/opt"],"exclude_patterns":["*.log"]}`)
	hostOnly := s.db.PutHost(host, "tracing", `{"enabled":true,"sample_ratio":0.25}`)
	bothEnv := s.db.PutEnv(env, "labels", `{"static":{"env":"prod","team":"core"},"dynamic":[{"name":"kernel","source":"command","command":["uname","-r"]}]}`)
	bothHost := s.db.PutHost(host, "labels", `{"static":{"team":"web"},"dynamic":[{"name":"role","source":"env","env":"ROLE"}]}`)

	byID := resolve(t, s.client, protocol.ResolveRequest{HostID: host})
	byAgent := resolve(t, s.client, protocol.ResolveRequest{AgentID: "agent-web-1"})
	if !reflect.DeepEqual(byID, byAgent) {
		t.Fatalf("by host id and by agent id differ:\n%+v\n%+v", byID, byAgent)
	}
	want := protocol.HostRef{HostID: host, AgentID: "agent-web-1", ClientID: s.db.ClientOf(env), EnvironmentID: env}
	if byID.Host != want {
		t.Fatalf("host = %+v, want %+v", byID.Host, want)
	}
	c := byID.Configs
	expect(t, "environment only", c["watch_files"], `{"paths":["/etc","/opt"],"exclude_patterns":["*.log"]}`, "environment", envOnly, envOnly, 0)
	expect(t, "host only", c["tracing"], `{"enabled":true,"sample_ratio":0.25}`, "host_override", hostOnly, 0, hostOnly)
	expect(t, "both", c["labels"], `{"static":{"env":"prod","team":"web"},"dynamic":[{"name":"kernel","source":"command","command":["uname","-r"]},{"name":"role","source":"env","env":"ROLE"}]}`,
		"merged", bothHost, bothEnv, bothHost)
	if _, ok := c["healthcheck"]; ok || len(c) != 3 {
		t.Fatalf("neither level: type must be absent; configs = %v", c)
	}

	// Selected types, with provenance.
	sel := resolve(t, s.client, protocol.ResolveRequest{AgentID: "agent-web-1", Types: []string{"labels", "healthcheck"}, Explain: true})
	if len(sel.Configs) != 1 {
		t.Fatalf("selected types: configs = %v", sel.Configs)
	}
	var prov struct {
		Entries []struct{ Path, Layer string } `json:"entries"`
	}
	if err := json.Unmarshal(sel.Configs["labels"].Provenance, &prov); err != nil || len(prov.Entries) == 0 {
		t.Fatalf("provenance %s: %v", sel.Configs["labels"].Provenance, err)
	}
}

// Deletes are tombstones: versions keep growing and deleted types are still reported.
func TestResolveTombstones(t *testing.T) {
	s := newStack(t, 1, resolver.Config{})
	env := s.db.Environment("prod")
	host := s.db.Host(env, "web-1", "agent-web-1")
	envV := s.db.PutEnv(env, "healthcheck", `{"interval_seconds":60,"timeout_seconds":5}`)
	s.db.PutHost(host, "healthcheck", `{"timeout_seconds":10}`)
	tomb := s.db.DeleteHost(host, "healthcheck")

	got := resolve(t, s.client, protocol.ResolveRequest{HostID: host}).Configs["healthcheck"]
	expect(t, "override deleted", got, `{"interval_seconds":60,"timeout_seconds":5}`, "environment", tomb, envV, tomb)

	envTomb := s.db.DeleteEnv(env, "healthcheck")
	got = resolve(t, s.client, protocol.ResolveRequest{HostID: host}).Configs["healthcheck"]
	expect(t, "both deleted", got, "", "", envTomb, envTomb, tomb)

	again := s.db.PutHost(host, "healthcheck", `{"interval_seconds":30}`)
	got = resolve(t, s.client, protocol.ResolveRequest{HostID: host}).Configs["healthcheck"]
	expect(t, "override over deleted default", got, `{"interval_seconds":30}`, "host_override", again, envTomb, again)
}

// pushedHost is a host of a resolve_push page with the config its set gives it (nil: none).
type pushedHost struct {
	HostID, AgentID string
	Config          *protocol.EffectiveConfig
}

// pushPage calls resolve_push and flattens the page into its hosts, checking the contract.
func pushPage(t *testing.T, nc *nats.Conn, req protocol.ResolvePushRequest) ([]pushedHost, protocol.ResolveSetsReply) {
	t.Helper()
	req.Contract = protocol.ResolveSetsContract
	reply, code := call[protocol.ResolveSetsReply](t, nc, protocol.ResolvePushSubject, req)
	if code != "" {
		t.Fatalf("push page: %s", code)
	}
	if err := reply.Check(); err != nil {
		t.Fatal(err)
	}
	var hosts []pushedHost
	for _, set := range reply.Sets {
		for _, h := range set.Hosts {
			ph := pushedHost{HostID: h.HostID, AgentID: h.AgentID}
			if n, ok := set.Configs[req.ConfigType]; ok {
				ph.Config = &reply.Configs[n]
			}
			hosts = append(hosts, ph)
		}
	}
	slices.SortFunc(hosts, func(a, b pushedHost) int { return strings.Compare(a.HostID, b.HostID) })
	return hosts, reply
}

func TestResolvePush(t *testing.T) {
	s := newStack(t, 1, resolver.Config{})
	env := s.db.Environment("prod")
	other := s.db.Environment("staging")
	s.db.Host(other, "stray", "agent-stray")
	envV := s.db.PutEnv(env, "healthcheck", `{"interval_seconds":60,"timeout_seconds":5}`)
	base := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

	var ids []string
	agents := map[string]string{}
	for i := range 12 {
		id := s.db.Host(env, fmt.Sprintf("web-%d", i), fmt.Sprintf("agent-%d", i))
		s.db.Heartbeat(id, base.Add(time.Duration(i)*time.Minute))
		ids = append(ids, id)
		agents[id] = fmt.Sprintf("agent-%d", i)
	}
	overrides := map[string]int64{}
	for _, i := range []int{1, 4, 7} {
		overrides[ids[i]] = s.db.PutHost(ids[i], "healthcheck", fmt.Sprintf(`{"timeout_seconds":%d}`, i))
	}
	s.db.PutHost(ids[10], "healthcheck", `{"timeout_seconds":1}`)
	tomb := s.db.DeleteHost(ids[10], "healthcheck")
	s.db.Revoke(ids[11])

	// All hosts, five per page.
	req := protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck", Limit: 5}
	var got []pushedHost
	pages := 0
	for {
		hosts, reply := pushPage(t, s.client, req)
		pages++
		for _, set := range reply.Sets {
			if set.EnvironmentID != env || set.ClientID != s.db.ClientOf(env) {
				t.Fatalf("set scope %s/%s", set.ClientID, set.EnvironmentID)
			}
		}
		got = append(got, hosts...)
		if reply.NextAfter == "" {
			break
		}
		req.After = reply.NextAfter
	}
	if pages != 3 || len(got) != 11 {
		t.Fatalf("%d hosts in %d pages, want 11 (one revoked) in 3", len(got), pages)
	}
	for i, h := range got {
		if i > 0 && h.HostID <= got[i-1].HostID {
			t.Fatalf("hosts not in id order: %s after %s", h.HostID, got[i-1].HostID)
		}
		if agents[h.HostID] != h.AgentID || h.Config == nil {
			t.Fatalf("host %+v is not one of the environment's", h)
		}
		switch v, ok := overrides[h.HostID]; {
		case ok:
			expect(t, "override", *h.Config, fmt.Sprintf(`{"interval_seconds":60,"timeout_seconds":%s}`, h.AgentID[len("agent-"):]), "merged", v, envV, v)
		case h.HostID == ids[10]:
			// A tombstoned override is sent: its version is newer.
			expect(t, "tombstone", *h.Config, `{"interval_seconds":60,"timeout_seconds":5}`, "environment", tomb, envV, tomb)
		default:
			expect(t, "environment", *h.Config, `{"interval_seconds":60,"timeout_seconds":5}`, "environment", envV, envV, 0)
		}
	}

	// Online filter: heartbeats at base+i minutes; since base+8m keeps 8, 9, 10 (11 is revoked).
	since := base.Add(8 * time.Minute)
	hosts, _ := pushPage(t, s.client, protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck", OnlineSince: &since})
	if names := agentIDs(hosts); !sameSet(names, "agent-8", "agent-9", "agent-10") {
		t.Fatalf("online since: %v", names)
	}

	// Host list (another environment's host and a revoked host are ignored), with the online filter.
	hosts, _ = pushPage(t, s.client, protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck", HostIDs: []string{ids[2], ids[7], ids[9], ids[11]}})
	if names := agentIDs(hosts); !sameSet(names, "agent-2", "agent-7", "agent-9") {
		t.Fatalf("host list: %v", names)
	}
	hosts, _ = pushPage(t, s.client, protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck", HostIDs: []string{ids[2], ids[9]}, OnlineSince: &since})
	if names := agentIDs(hosts); !sameSet(names, "agent-9") {
		t.Fatalf("host list online: %v", names)
	}

	// A type without an environment row: no config for hosts without a row of their own.
	hosts, reply := pushPage(t, s.client, protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "tracing"})
	if len(hosts) != 11 || len(reply.Configs) != 0 || hosts[0].Config != nil {
		t.Fatalf("type without rows: %+v", reply)
	}

	// The version rule: an environment event at a replaced version reaches no host; at the current
	// version every host of the environment (overrides merged on top).
	hosts, _ = pushPage(t, s.client, protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck", EnvironmentVersion: envV})
	if len(hosts) != 11 {
		t.Fatalf("event at the current version reached %d hosts, want 11", len(hosts))
	}
	newV := s.db.PutEnv(env, "healthcheck", `{"interval_seconds":30}`)
	if hosts, _ = pushPage(t, s.client, protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck", EnvironmentVersion: envV}); len(hosts) != 0 {
		t.Fatalf("event at a replaced version reached %v", agentIDs(hosts))
	}
	hosts, _ = pushPage(t, s.client, protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck", EnvironmentVersion: newV})
	if len(hosts) != 11 || hosts[0].Config.EnvironmentVersion != newV {
		t.Fatalf("event at the new version: %d hosts, first %+v", len(hosts), hosts[0].Config)
	}

	// Another contract is refused as such (the caller retries), never misread.
	if _, code := call[protocol.ResolveSetsReply](t, s.client, protocol.ResolvePushSubject,
		protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract + 1, EnvironmentID: env, ConfigType: "healthcheck"}); code != protocol.CodeContractMismatch {
		t.Fatalf("another contract: code %q", code)
	}
}

func agentIDs(hosts []pushedHost) []string {
	var out []string
	for _, h := range hosts {
		out = append(out, h.AgentID)
	}
	return out
}

func sameSet(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	seen := map[string]bool{}
	for _, g := range got {
		seen[g] = true
	}
	for _, w := range want {
		if !seen[w] {
			return false
		}
	}
	return true
}

func TestErrorCodes(t *testing.T) {
	s := newStack(t, 1, resolver.Config{})
	env := s.db.Environment("prod")
	host := s.db.Host(env, "web-1", "agent-web-1")
	revoked := s.db.Host(env, "web-2", "agent-web-2")
	s.db.PutEnv(env, "healthcheck", `{"interval_seconds":60}`)
	s.db.Revoke(revoked)

	cases := []struct {
		name    string
		subject string
		req     any
		code    string
	}{
		{"revoked by id", protocol.ResolveSubject, protocol.ResolveRequest{HostID: revoked}, protocol.CodeNotFound},
		{"revoked by agent", protocol.ResolveSubject, protocol.ResolveRequest{AgentID: "agent-web-2"}, protocol.CodeNotFound},
		{"unknown host", protocol.ResolveSubject, protocol.ResolveRequest{HostID: "5f0c1c1e-0000-4000-8000-000000000000"}, protocol.CodeNotFound},
		{"unknown agent", protocol.ResolveSubject, protocol.ResolveRequest{AgentID: "agent-nope"}, protocol.CodeNotFound},
		{"unknown type", protocol.ResolveSubject, protocol.ResolveRequest{HostID: host, Types: []string{"colectors"}}, protocol.CodeInvalidRequest},
		{"bad host id", protocol.ResolveSubject, protocol.ResolveRequest{HostID: "web-1"}, protocol.CodeInvalidRequest},
		{"no host", protocol.ResolveSubject, protocol.ResolveRequest{}, protocol.CodeInvalidRequest},
		{"malformed", protocol.ResolveSubject, json.RawMessage(`{"host_id":[1,2]}`), protocol.CodeInvalidRequest},
		{"unknown environment", protocol.ResolvePushSubject, protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract, EnvironmentID: "5f0c1c1e-0000-4000-8000-000000000000", ConfigType: "healthcheck"}, protocol.CodeNotFound},
		{"push unknown type", protocol.ResolvePushSubject, protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract, EnvironmentID: env, ConfigType: "nope"}, protocol.CodeInvalidRequest},
		{"push bad cursor", protocol.ResolvePushSubject, protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract, EnvironmentID: env, ConfigType: "healthcheck", After: "web-1"}, protocol.CodeInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, code := call[json.RawMessage](t, s.client, c.subject, c.req); code != c.code {
				t.Fatalf("code %q, want %q", code, c.code)
			}
		})
	}
	// The service is still serving after the bad requests.
	if got := resolve(t, s.client, protocol.ResolveRequest{HostID: host}); got.Configs["healthcheck"].Version == 0 {
		t.Fatalf("resolve after errors: %+v", got)
	}
}

// Two instances in the service's queue group share requests; each request is answered once.
func TestQueueGroupSharesRequests(t *testing.T) {
	s := newStack(t, 2, resolver.Config{})
	env := s.db.Environment("prod")
	host := s.db.Host(env, "web-1", "agent-web-1")
	s.db.PutEnv(env, "healthcheck", `{"interval_seconds":60}`)

	const requests = 60
	for range requests {
		resolve(t, s.client, protocol.ResolveRequest{HostID: host})
	}

	// $SRV.STATS.resolver is answered by every instance. An instance counts a request once its handler
	// has returned, which may be after the caller has the reply, so the counts are read until they add
	// up (an instance that answered a request twice would make them exceed it).
	subject, err := micro.ControlSubject(micro.StatsVerb, protocol.ResolverServiceName, "")
	if err != nil {
		t.Fatal(err)
	}
	stats := func() (total int, perInstance map[string]int) {
		t.Helper()
		inbox := nats.NewInbox()
		replies := make(chan *nats.Msg, 8)
		sub, err := s.client.ChanSubscribe(inbox, replies)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := s.client.PublishRequest(subject, inbox, nil); err != nil {
			t.Fatal(err)
		}
		perInstance = map[string]int{}
		for len(perInstance) < 2 {
			var m *nats.Msg
			select {
			case m = <-replies:
			case <-time.After(requestTimeout):
				t.Fatalf("only %d instances answered $SRV.STATS", len(perInstance))
			}
			var st micro.Stats
			if err := json.Unmarshal(m.Data, &st); err != nil {
				t.Fatal(err)
			}
			perInstance[st.ID] = 0
			for _, e := range st.Endpoints {
				if e.Subject == protocol.ResolveSubject {
					perInstance[st.ID] += e.NumRequests
					total += e.NumRequests
				}
			}
		}
		return total, perInstance
	}
	var (
		total       int
		perInstance map[string]int
	)
	testinfra.Eventually(t, requestTimeout, func() bool {
		total, perInstance = stats()
		if total > requests {
			t.Fatalf("instances counted %d requests, want %d (each answered once)", total, requests)
		}
		return total == requests
	}, "the instances' request counts to add up to every request sent")
	for id, n := range perInstance {
		if n == 0 {
			t.Fatalf("instance %s served no request: the queue group did not share the load", id)
		}
	}
}

// BenchmarkResolvePush10kNATS is BenchmarkResolvePush10k (internal/postgres) end to end: 10,000 hosts
// of one environment, every tenth with an override, paged through the resolve_push endpoint over NATS
// (queries, merges, JSON and transport included).
func BenchmarkResolvePush10kNATS(b *testing.B) {
	s := newStack(b, 1, resolver.Config{})
	env := s.db.Environment("bench")
	s.db.Hosts(env, "bench", 10_000)
	s.db.PutEnv(env, "labels", `{"static":{"env":"prod","team":"core","region":"eu-west-1"},"dynamic":[{"name":"kernel","source":"command","command":["uname","-r"]}]}`)
	s.db.OverrideEvery(env, "labels", `{"static":{"team":"web","rack":"r12"},"dynamic":[{"name":"role","source":"env","env":"ROLE"}]}`, 10)
	s.db.Analyze()

	b.ReportAllocs()
	for b.Loop() {
		req := protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract, EnvironmentID: env, ConfigType: "labels"}
		hosts := 0
		for {
			reply, code := call[protocol.ResolveSetsReply](b, s.client, protocol.ResolvePushSubject, req)
			if code != "" {
				b.Fatalf("push page: %s", code)
			}
			for _, set := range reply.Sets {
				hosts += len(set.Hosts)
			}
			if reply.NextAfter == "" {
				break
			}
			req.After = reply.NextAfter
		}
		if hosts != 10_000 {
			b.Fatalf("resolved %d hosts", hosts)
		}
	}
}

// Module wires the service from the app's pool, connection and logger, with its config defaults.
func TestModule(t *testing.T) {
	pool := testinfra.Postgres(t)
	srv := testinfra.NATS(t)
	log, _ := testinfra.Logger(t)
	db := seed.New(t, pool)
	env := db.Environment("prod")
	host := db.Host(env, "web-1", "agent-web-1")
	v := db.PutEnv(env, "healthcheck", `{"interval_seconds":60}`)

	svcConn := srv.Connect(t)
	app := fxtest.New(t,
		fx.Supply(pool, svcConn, log),
		fx.NopLogger,
		resolver.Module,
	)
	app.RequireStart()
	client := srv.Connect(t)
	if got := resolve(t, client, protocol.ResolveRequest{HostID: host}); got.Configs["healthcheck"].Version != v {
		t.Fatalf("resolve through the fx module: %+v", got)
	}
	app.RequireStop()
	// Stopping drains the endpoint subscriptions; once the server has processed that, nobody answers.
	if err := svcConn.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Request(protocol.ResolveSubject, []byte(`{}`), requestTimeout); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("request after the app stopped: err = %v, want no responders", err)
	}
}
