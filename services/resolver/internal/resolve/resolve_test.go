package resolve_test

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

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

func id(n int) string { return fmt.Sprintf("00000000-0000-0000-0000-%012d", n) }

const (
	client = "c0000000-0000-0000-0000-000000000001"
	env    = "e0000000-0000-0000-0000-000000000001"
)

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	if want == "" {
		if len(got) != 0 && string(got) != "null" {
			t.Fatalf("data = %s, want null", got)
		}
		return
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("data %q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want %q: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("data = %s, want %s", got, want)
	}
}

// oneHost is a store with one host (id(1), agent "agent-1") in env.
func oneHost() *fakeStore {
	s := newFakeStore()
	s.addEnv(env, client)
	s.addHost(fakeHost{Host: resolve.Host{ID: id(1), AgentID: "agent-1", EnvironmentID: env}})
	return s
}

func TestResolveCases(t *testing.T) {
	s := oneHost()
	// environment only
	s.putEnv(env, "healthcheck", `{"interval_seconds":60,"timeout_seconds":5}`, 1)
	// host only
	s.putHost(id(1), "tracing", `{"enabled":true,"sample_ratio":0.5}`, 2)
	// both: shallow merge, host keys win
	s.putEnv(env, "agent_settings", `{"collector_timeout":"10s","log_level":"info"}`, 3)
	s.putHost(id(1), "agent_settings", `{"log_level":"debug"}`, 4)
	// log_shipping: neither

	r := resolve.New(s, resolve.Options{})
	reply, err := r.Resolve(context.Background(), protocol.ResolveRequest{HostID: id(1)})
	if err != nil {
		t.Fatal(err)
	}
	wantHost := protocol.HostRef{HostID: id(1), AgentID: "agent-1", ClientID: client, EnvironmentID: env}
	if reply.Host != wantHost {
		t.Fatalf("host = %+v, want %+v", reply.Host, wantHost)
	}
	cases := []struct {
		typ, data, source    string
		version, envV, hostV int64
	}{
		{"healthcheck", `{"interval_seconds":60,"timeout_seconds":5}`, "environment", 1, 1, 0},
		{"tracing", `{"enabled":true,"sample_ratio":0.5}`, "host_override", 2, 0, 2},
		{"agent_settings", `{"collector_timeout":"10s","log_level":"debug"}`, "merged", 4, 3, 4},
	}
	for _, c := range cases {
		got, ok := reply.Configs[c.typ]
		if !ok {
			t.Fatalf("%s missing from %v", c.typ, reply.Configs)
		}
		jsonEqual(t, got.ConfigData, c.data)
		if got.ConfigType != c.typ || got.Source != c.source || got.Version != c.version ||
			got.EnvironmentVersion != c.envV || got.HostVersion != c.hostV {
			t.Errorf("%s = %+v, want source %s version %d env %d host %d", c.typ, got, c.source, c.version, c.envV, c.hostV)
		}
		if got.Provenance != nil {
			t.Errorf("%s has provenance without explain", c.typ)
		}
	}
	if _, ok := reply.Configs["log_shipping"]; ok {
		t.Errorf("log_shipping has no row at either level but was returned")
	}
	if len(reply.Configs) != len(cases) {
		t.Errorf("configs = %v, want %d types", reply.Configs, len(cases))
	}
}

// Deleting keeps a tombstone whose version still counts, so effective versions never go backwards.
func TestResolveTombstones(t *testing.T) {
	s := oneHost()
	s.putEnv(env, "healthcheck", `{"interval_seconds":60}`, 4)
	s.putHost(id(1), "healthcheck", "", 9) // override deleted
	s.putEnv(env, "tracing", "", 7)        // environment default deleted
	s.putHost(id(1), "tracing", `{"enabled":true}`, 3)
	s.putEnv(env, "labels", "", 5) // both deleted
	s.putHost(id(1), "labels", "", 6)
	s.putHost(id(1), "log_shipping", "", 8) // tombstone only

	r := resolve.New(s, resolve.Options{})
	reply, err := r.Resolve(context.Background(), protocol.ResolveRequest{AgentID: "agent-1"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		typ, data string
		version   int64
	}{
		{"healthcheck", `{"interval_seconds":60}`, 9},
		{"tracing", `{"enabled":true}`, 7},
		{"labels", "", 6},
		{"log_shipping", "", 8},
	}
	for _, c := range cases {
		got, ok := reply.Configs[c.typ]
		if !ok {
			t.Fatalf("%s missing: tombstones must be returned", c.typ)
		}
		jsonEqual(t, got.ConfigData, c.data)
		if got.Version != c.version {
			t.Errorf("%s version = %d, want %d", c.typ, got.Version, c.version)
		}
	}
}

func TestResolveTypesAndExplain(t *testing.T) {
	s := oneHost()
	s.putEnv(env, "healthcheck", `{"interval_seconds":60}`, 1)
	s.putHost(id(1), "healthcheck", `{"timeout_seconds":3}`, 2)
	s.putEnv(env, "tracing", `{"enabled":false}`, 3)
	r := resolve.New(s, resolve.Options{})
	reply, err := r.Resolve(context.Background(), protocol.ResolveRequest{
		HostID: strings.ToUpper(id(1)), Types: []string{"healthcheck", "healthcheck", "labels"}, Explain: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Configs) != 1 {
		t.Fatalf("configs = %v, want only healthcheck", reply.Configs)
	}
	hc := reply.Configs["healthcheck"]
	if len(hc.Provenance) == 0 || string(hc.Provenance) == "null" {
		t.Fatalf("explain: provenance missing: %+v", hc)
	}
	if !json.Valid(hc.Provenance) {
		t.Fatalf("provenance is not JSON: %s", hc.Provenance)
	}
}

func TestResolveErrors(t *testing.T) {
	s := oneHost()
	s.addHost(fakeHost{Host: resolve.Host{ID: id(2), AgentID: "agent-2", EnvironmentID: env}, revoked: true})
	r := resolve.New(s, resolve.Options{})
	cases := []struct {
		name string
		req  protocol.ResolveRequest
		want error
	}{
		{"no host", protocol.ResolveRequest{}, resolve.ErrInvalidRequest},
		{"both ids", protocol.ResolveRequest{HostID: id(1), AgentID: "agent-1"}, resolve.ErrInvalidRequest},
		{"bad host id", protocol.ResolveRequest{HostID: "not-a-uuid"}, resolve.ErrInvalidRequest},
		{"bad agent id", protocol.ResolveRequest{AgentID: "a.b"}, resolve.ErrInvalidRequest},
		{"unknown type", protocol.ResolveRequest{HostID: id(1), Types: []string{"healthcheck", "colectors"}}, resolve.ErrInvalidRequest},
		{"too many types", protocol.ResolveRequest{HostID: id(1), Types: make([]string, 1000)}, resolve.ErrInvalidRequest},
		{"unknown host", protocol.ResolveRequest{HostID: id(3)}, resolve.ErrNotFound},
		{"unknown agent", protocol.ResolveRequest{AgentID: "agent-3"}, resolve.ErrNotFound},
		{"revoked host", protocol.ResolveRequest{HostID: id(2)}, resolve.ErrNotFound},
		{"revoked agent", protocol.ResolveRequest{AgentID: "agent-2"}, resolve.ErrNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.Resolve(context.Background(), c.req)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	_, err := r.Resolve(context.Background(), protocol.ResolveRequest{HostID: id(1), Types: []string{"colectors"}})
	if !strings.Contains(err.Error(), `"colectors"`) {
		t.Errorf("error %q does not name the unknown type", err)
	}
}

// batchStore has hosts id(1)..id(n) in env; every third host has a healthcheck override.
func batchStore(n int) *fakeStore {
	s := newFakeStore()
	s.addEnv(env, client)
	s.putEnv(env, "healthcheck", `{"interval_seconds":60,"timeout_seconds":5}`, 10)
	for i := 1; i <= n; i++ {
		s.addHost(fakeHost{Host: resolve.Host{ID: id(i), AgentID: fmt.Sprintf("agent-%d", i), EnvironmentID: env},
			heartbeat: time.Date(2026, 1, 1, 0, i, 0, 0, time.UTC)})
		if i%3 == 0 {
			s.putHost(id(i), "healthcheck", fmt.Sprintf(`{"timeout_seconds":%d}`, i), int64(100+i))
		}
	}
	return s
}

// pushHost is one host of a push page with the config it gets (nil: no row at either level) and the
// index of its set.
type pushHost struct {
	HostID, AgentID string
	Config          *protocol.EffectiveConfig
	Set             int
}

// hostsOf flattens a push page into its hosts in host id order, checking the contract on the way.
func hostsOf(t *testing.T, reply protocol.ResolveSetsReply, configType string) []pushHost {
	t.Helper()
	if err := reply.Check(); err != nil {
		t.Fatal(err)
	}
	var hosts []pushHost
	for i, set := range reply.Sets {
		if len(set.Configs) > 1 {
			t.Fatalf("set %d has configs of other types than %s: %v", i, configType, set.Configs)
		}
		if set.ClientID != client || set.EnvironmentID != env {
			t.Fatalf("set %d scope = %s/%s", i, set.ClientID, set.EnvironmentID)
		}
		for _, h := range set.Hosts {
			ph := pushHost{HostID: h.HostID, AgentID: h.AgentID, Set: i}
			if n, ok := set.Configs[configType]; ok {
				ph.Config = &reply.Configs[n]
			}
			hosts = append(hosts, ph)
		}
	}
	slices.SortFunc(hosts, func(a, b pushHost) int { return strings.Compare(a.HostID, b.HostID) })
	return hosts
}

// collect pages through a push and returns every host.
func collect(t *testing.T, r *resolve.Resolver, req protocol.ResolvePushRequest) ([]pushHost, int) {
	t.Helper()
	req.Contract = protocol.ResolveSetsContract
	var hosts []pushHost
	pages := 0
	for {
		reply, err := r.ResolvePush(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		page := hostsOf(t, reply, req.ConfigType)
		hosts = append(hosts, page...)
		if reply.NextAfter == "" {
			return hosts, pages
		}
		if len(page) > 0 && reply.NextAfter < page[len(page)-1].HostID {
			t.Fatalf("next_after %s is before the page's last host", reply.NextAfter)
		}
		req.After = reply.NextAfter
		if pages > 1000 {
			t.Fatal("paging does not end")
		}
	}
}

func TestResolvePush(t *testing.T) {
	s := batchStore(7)
	s.putHost(id(4), "healthcheck", "", 120) // tombstone override
	r := resolve.New(s, resolve.Options{})
	reply, err := r.ResolvePush(context.Background(), protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract, EnvironmentID: env, ConfigType: "healthcheck"})
	if err != nil {
		t.Fatal(err)
	}
	if reply.NextAfter != "" || reply.Contract != protocol.ResolveSetsContract {
		t.Fatalf("reply = %+v", reply)
	}
	hosts := hostsOf(t, reply, "healthcheck")
	if len(hosts) != 7 {
		t.Fatalf("hosts = %d, want 7", len(hosts))
	}
	envSet := -1
	for i, h := range hosts {
		n := i + 1
		if h.HostID != id(n) || h.AgentID != fmt.Sprintf("agent-%d", n) || h.Config == nil {
			t.Fatalf("host %d = %+v", i, h)
		}
		c := h.Config
		switch {
		case n == 4:
			if c.Version != 120 || c.Source != "environment" || c.HostVersion != 120 {
				t.Fatalf("tombstoned override = %+v", c)
			}
			jsonEqual(t, c.ConfigData, `{"interval_seconds":60,"timeout_seconds":5}`)
		case n%3 == 0:
			if c.Source != "merged" || c.Version != int64(100+n) {
				t.Fatalf("override of host %d = %+v", n, c)
			}
			jsonEqual(t, c.ConfigData, fmt.Sprintf(`{"interval_seconds":60,"timeout_seconds":%d}`, n))
		default:
			if c.Source != "environment" || c.Version != 10 || c.EnvironmentVersion != 10 || c.HostVersion != 0 {
				t.Fatalf("host %d without a row got %+v", n, c)
			}
			jsonEqual(t, c.ConfigData, `{"interval_seconds":60,"timeout_seconds":5}`)
			// Hosts without a row of their own share one set, and so one config.
			if envSet >= 0 && h.Set != envSet {
				t.Fatalf("host %d is in set %d, the environment's is %d", n, h.Set, envSet)
			}
			envSet = h.Set
		}
	}
	// Three sets of one host each (3, 4, 6) and the environment's: each config once.
	if len(reply.Sets) != 4 || len(reply.Configs) != 4 {
		t.Fatalf("%d sets, %d configs; want 4 and 4", len(reply.Sets), len(reply.Configs))
	}
}

// Without signing, hosts whose own rows make the same config share a set: delivery injects and
// encodes it once.
func TestResolvePushSharesIdenticalOverrides(t *testing.T) {
	s := batchStore(4)
	s.putHost(id(1), "healthcheck", `{"timeout_seconds":9}`, 200)
	s.putHost(id(2), "healthcheck", `{"timeout_seconds":9}`, 200)
	r := resolve.New(s, resolve.Options{})
	reply, err := r.ResolvePush(context.Background(), protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract, EnvironmentID: env, ConfigType: "healthcheck"})
	if err != nil {
		t.Fatal(err)
	}
	hosts := hostsOf(t, reply, "healthcheck")
	if hosts[0].Set != hosts[1].Set || hosts[0].Set == hosts[2].Set || hosts[3].Set == hosts[2].Set || hosts[3].Set == hosts[0].Set {
		t.Fatalf("sets of hosts 1-4: %d %d %d %d; want 1 and 2 together, 3 (own row) and 4 (environment's) apart",
			hosts[0].Set, hosts[1].Set, hosts[2].Set, hosts[3].Set)
	}
	if len(reply.Sets) != 3 || len(reply.Configs) != 3 {
		t.Fatalf("%d sets, %d configs; want 3 and 3", len(reply.Sets), len(reply.Configs))
	}
}

// An environment-scope event at version V reaches only the hosts whose environment layer is at V: a
// page for an older version answers no host (a later event covers them) yet pages through them all.
func TestResolvePushEnvironmentVersion(t *testing.T) {
	s := batchStore(9)
	r := resolve.New(s, resolve.Options{})
	hosts, _ := collect(t, r, protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck", EnvironmentVersion: 10})
	if len(hosts) != 9 {
		t.Fatalf("event at the current version: %d hosts, want 9", len(hosts))
	}
	for _, h := range hosts {
		if h.Config.EnvironmentVersion != 10 {
			t.Fatalf("host %s got environment layer %d", h.HostID, h.Config.EnvironmentVersion)
		}
	}
	s.putEnv(env, "healthcheck", `{"interval_seconds":30}`, 11)
	hosts, pages := collect(t, r, protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck", EnvironmentVersion: 10, Limit: 4})
	if len(hosts) != 0 || pages != 3 {
		t.Fatalf("event at a replaced version: %d hosts in %d pages, want none in 3", len(hosts), pages)
	}
	hosts, _ = collect(t, r, protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck", EnvironmentVersion: 11})
	if len(hosts) != 9 {
		t.Fatalf("event at the new version: %d hosts, want 9", len(hosts))
	}
	// Host-scope pushes (no version) reach their host whatever its environment layer.
	hosts, _ = collect(t, r, protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck", HostIDs: []string{id(3)}})
	if len(hosts) != 1 || hosts[0].HostID != id(3) || hosts[0].Config.Version != 103 {
		t.Fatalf("host push = %+v", hosts)
	}
	// A deleted environment row is a version too: its tombstone event reaches the hosts.
	s.putEnv(env, "healthcheck", "", 12)
	hosts, _ = collect(t, r, protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck", EnvironmentVersion: 12})
	if len(hosts) != 9 || hosts[0].Config.Version != 12 || !agentconfig.IsNull(hosts[0].Config.ConfigData) {
		t.Fatalf("tombstone push = %d hosts, first %+v", len(hosts), hosts[0].Config)
	}
}

func TestResolvePushPaging(t *testing.T) {
	s := batchStore(25)
	r := resolve.New(s, resolve.Options{MaxPage: 10})
	req := protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck", Limit: 4}
	hosts, pages := collect(t, r, req)
	if len(hosts) != 25 || pages != 7 {
		t.Fatalf("limit 4: %d hosts in %d pages, want 25 in 7", len(hosts), pages)
	}
	for i, h := range hosts {
		if h.HostID != id(i+1) {
			t.Fatalf("host %d = %s: pages overlap or skip", i, h.HostID)
		}
	}
	// Limit 0 and limits above the maximum take the maximum.
	for _, limit := range []int{0, 1_000_000} {
		req.Limit = limit
		_, pages = collect(t, r, req)
		if pages != 3 {
			t.Errorf("limit %d: %d pages, want 3 of at most 10", limit, pages)
		}
	}
	// An exact multiple of the page size needs no trailing empty page.
	req.Limit = 5
	if _, pages = collect(t, r, req); pages != 5 {
		t.Errorf("limit 5 over 25 hosts: %d pages, want 5", pages)
	}
}

func TestResolvePushFilters(t *testing.T) {
	s := batchStore(10)
	s.hosts[id(2)] = fakeHost{Host: s.hosts[id(2)].Host, revoked: true, heartbeat: s.hosts[id(2)].heartbeat}
	r := resolve.New(s, resolve.Options{})
	since := time.Date(2026, 1, 1, 0, 6, 0, 0, time.UTC)
	cases := []struct {
		name string
		req  protocol.ResolvePushRequest
		want []int
	}{
		{"all but revoked", protocol.ResolvePushRequest{}, []int{1, 3, 4, 5, 6, 7, 8, 9, 10}},
		{"online since", protocol.ResolvePushRequest{OnlineSince: &since}, []int{6, 7, 8, 9, 10}},
		{"host list", protocol.ResolvePushRequest{HostIDs: []string{id(9), id(2), id(3), id(42)}}, []int{3, 9}},
		{"host list and online", protocol.ResolvePushRequest{HostIDs: []string{id(9), id(3)}, OnlineSince: &since}, []int{9}},
		{"after cursor", protocol.ResolvePushRequest{After: id(8)}, []int{9, 10}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.EnvironmentID, c.req.ConfigType = env, "healthcheck"
			hosts, _ := collect(t, r, c.req)
			var got []int
			for _, h := range hosts {
				var n int
				fmt.Sscanf(h.AgentID, "agent-%d", &n)
				got = append(got, n)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("hosts = %v, want %v", got, c.want)
			}
		})
	}
}

func TestResolvePushErrors(t *testing.T) {
	s := batchStore(3)
	r := resolve.New(s, resolve.Options{})
	v := protocol.ResolveSetsContract
	cases := []struct {
		name string
		req  protocol.ResolvePushRequest
		want error
	}{
		{"other contract", protocol.ResolvePushRequest{Contract: v + 1, EnvironmentID: env, ConfigType: "healthcheck"}, resolve.ErrContractMismatch},
		{"no contract", protocol.ResolvePushRequest{EnvironmentID: env, ConfigType: "healthcheck"}, resolve.ErrContractMismatch},
		{"no environment", protocol.ResolvePushRequest{Contract: v, ConfigType: "healthcheck"}, resolve.ErrInvalidRequest},
		{"bad environment", protocol.ResolvePushRequest{Contract: v, EnvironmentID: "x", ConfigType: "healthcheck"}, resolve.ErrInvalidRequest},
		{"no type", protocol.ResolvePushRequest{Contract: v, EnvironmentID: env}, resolve.ErrInvalidRequest},
		{"unknown type", protocol.ResolvePushRequest{Contract: v, EnvironmentID: env, ConfigType: "nope"}, resolve.ErrInvalidRequest},
		{"bad cursor", protocol.ResolvePushRequest{Contract: v, EnvironmentID: env, ConfigType: "healthcheck", After: "x"}, resolve.ErrInvalidRequest},
		{"bad host id", protocol.ResolvePushRequest{Contract: v, EnvironmentID: env, ConfigType: "healthcheck", HostIDs: []string{id(1), "x"}}, resolve.ErrInvalidRequest},
		{"too many host ids", protocol.ResolvePushRequest{Contract: v, EnvironmentID: env, ConfigType: "healthcheck",
			HostIDs: slices.Repeat([]string{id(1)}, protocol.MaxResolveAgents+1)}, resolve.ErrInvalidRequest},
		{"negative limit", protocol.ResolvePushRequest{Contract: v, EnvironmentID: env, ConfigType: "healthcheck", Limit: -1}, resolve.ErrInvalidRequest},
		{"negative version", protocol.ResolvePushRequest{Contract: v, EnvironmentID: env, ConfigType: "healthcheck", EnvironmentVersion: -1}, resolve.ErrInvalidRequest},
		{"unknown environment", protocol.ResolvePushRequest{Contract: v, EnvironmentID: id(99), ConfigType: "healthcheck"}, resolve.ErrNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := r.ResolvePush(context.Background(), c.req); !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	if s.pageCalls != 0 {
		t.Errorf("invalid requests reached the host query %d times", s.pageCalls)
	}
}

// An environment without a row of the type gives its hosts no config; only overriding hosts carry one.
func TestResolvePushNoEnvironmentRow(t *testing.T) {
	s := batchStore(3)
	r := resolve.New(s, resolve.Options{})
	req := protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract, EnvironmentID: env, ConfigType: "tracing"}
	reply, err := r.ResolvePush(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	hosts := hostsOf(t, reply, "tracing")
	if len(hosts) != 3 || hosts[0].Config != nil || len(reply.Configs) != 0 {
		t.Fatalf("hosts = %+v, configs %+v", hosts, reply.Configs)
	}
	s.putHost(id(2), "tracing", `{"enabled":true}`, 50)
	reply, err = r.ResolvePush(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	o := hostsOf(t, reply, "tracing")[1].Config
	if o == nil || o.Source != "host_override" || o.Version != 50 {
		t.Fatalf("override = %+v", o)
	}
	jsonEqual(t, o.ConfigData, `{"enabled":true}`)
}
