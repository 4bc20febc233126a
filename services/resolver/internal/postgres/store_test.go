package postgres_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

func TestStore(t *testing.T) {
	ctx := context.Background()
	_, db, store := newDB(t)

	env := db.Environment("prod")
	h1 := db.Host(env, "web-1", "agent-1")
	h2 := db.Host(env, "web-2", "agent-2")
	h3 := db.Host(env, "web-3", "agent-3")
	db.Revoke(h3)
	envV := db.PutEnv(env, "healthcheck", `{"interval_seconds":60}`)
	db.PutEnv(env, "tracing", `{"enabled":true}`)
	envTomb := db.DeleteEnv(env, "tracing")
	hostV := db.PutHost(h1, "healthcheck", `{"timeout_seconds":5}`)
	db.PutHost(h2, "healthcheck", `{"timeout_seconds":7}`)
	hostTomb := db.DeleteHost(h2, "healthcheck")
	now := time.Now().UTC().Truncate(time.Microsecond)
	db.Heartbeat(h2, now)

	t.Run("hosts", func(t *testing.T) {
		types := []string{"healthcheck"}
		hl, err := store.LayersByHostID(ctx, h1, types)
		if h := hl.Host; err != nil || h.ID != h1 || h.AgentID != "agent-1" || h.EnvironmentID != env || h.ClientID != db.ClientOf(env) {
			t.Fatalf("LayersByHostID = %+v, %v", hl, err)
		}
		hl, err = store.LayersByAgentID(ctx, "agent-2", types)
		if err != nil || hl.Host.ID != h2 || hl.Host.ClientID != db.ClientOf(env) {
			t.Fatalf("LayersByAgentID = %+v, %v", hl, err)
		}
		for _, id := range []string{h3, "5f0c1c1e-0000-4000-8000-000000000000"} {
			if _, err := store.LayersByHostID(ctx, id, types); !errors.Is(err, resolve.ErrNotFound) {
				t.Errorf("revoked or missing host %s: err = %v, want ErrNotFound", id, err)
			}
		}
		for _, agent := range []string{"agent-3", "agent-404"} {
			if hl, err = store.LayersByAgentID(ctx, agent, types); !errors.Is(err, resolve.ErrNotFound) {
				t.Errorf("revoked or missing agent %s: %+v, %v", agent, hl, err)
			}
		}
		rows, err := store.FetchRows(ctx, []string{"agent-3", "agent-404"}, types)
		if err != nil || len(rows.Hosts) != 0 || len(rows.EnvironmentVersions) != 0 {
			t.Errorf("FetchRows of revoked and missing agents: %+v, %v", rows, err)
		}
	})

	t.Run("layers", func(t *testing.T) {
		hl, err := store.LayersByHostID(ctx, h2, []string{"healthcheck", "tracing", "labels"})
		if err != nil {
			t.Fatal(err)
		}
		l := hl.Layers
		if got := l.Environment["healthcheck"]; got.Version != envV || len(got.Data) == 0 {
			t.Errorf("env healthcheck = %+v", got)
		}
		if got := l.Environment["tracing"]; got.Version != envTomb || got.Data != nil {
			t.Errorf("env tombstone = %+v", got)
		}
		if got := l.Host["healthcheck"]; got.Version != hostTomb || got.Data != nil {
			t.Errorf("host tombstone = %+v", got)
		}
		if len(l.Environment) != 2 || len(l.Host) != 1 {
			t.Errorf("layers = %+v", l)
		}
		hl, _ = store.LayersByHostID(ctx, h2, []string{"labels"})
		if len(hl.Layers.Environment)+len(hl.Layers.Host) != 0 || hl.Host.ID != h2 {
			t.Errorf("type filter ignored or host lost: %+v", hl)
		}
		// A batch of fetches: the hosts with their own rows, and only the versions of their
		// environment's rows; the rows themselves come from EnvironmentRows.
		rows, err := store.FetchRows(ctx, []string{"agent-1", "agent-2", "agent-3"}, []string{"healthcheck", "tracing"})
		if err != nil || len(rows.Hosts) != 2 {
			t.Fatalf("FetchRows = %+v, %v", rows, err)
		}
		for _, fh := range rows.Hosts {
			want := map[string]int64{h1: hostV, h2: hostTomb}[fh.Host.ID]
			if got := fh.Overrides["healthcheck"]; got.Version != want || len(fh.Overrides) != 1 || fh.Host.EnvironmentID != env {
				t.Errorf("host %s rows = %+v, want healthcheck at %d", fh.Host.AgentID, fh.Overrides, want)
			}
		}
		if got := rows.EnvironmentVersions; len(got) != 1 || !reflect.DeepEqual(got[env], map[string]int64{"healthcheck": envV, "tracing": envTomb}) {
			t.Errorf("environment versions = %+v", got)
		}
		// Only the types asked for: h1's watch_files row stays out, and a host with rows of other types
		// only has none.
		watchV := db.PutHost(h1, "watch_files", `{"paths":["/etc"]}`)
		rows, err = store.FetchRows(ctx, []string{"agent-1", "agent-2"}, []string{"tracing"})
		if err != nil || len(rows.Hosts) != 2 {
			t.Fatalf("FetchRows of one type = %+v, %v", rows, err)
		}
		for _, fh := range rows.Hosts {
			if len(fh.Overrides) != 0 || fh.Host.EnvironmentID != env || fh.Host.ClientID != db.ClientOf(env) {
				t.Errorf("host %s of one type: %+v", fh.Host.AgentID, fh)
			}
		}
		if got := rows.EnvironmentVersions; !reflect.DeepEqual(got, map[string]map[string]int64{env: {"tracing": envTomb}}) {
			t.Errorf("environment versions of one type = %+v", got)
		}
		rows, err = store.FetchRows(ctx, []string{"agent-1"}, []string{"watch_files", "healthcheck"})
		if err != nil || len(rows.Hosts) != 1 || rows.Hosts[0].Host.ID != h1 || len(rows.Hosts[0].Overrides) != 2 ||
			rows.Hosts[0].Overrides["healthcheck"].Version != hostV || rows.Hosts[0].Overrides["watch_files"].Version != watchV ||
			len(rows.Hosts[0].Overrides["watch_files"].Data) == 0 {
			t.Errorf("FetchRows of two types = %+v, %v", rows, err)
		}
		envRows, err := store.EnvironmentRows(ctx, []string{env}, []string{"healthcheck", "tracing", "labels"})
		if err != nil || len(envRows[env]) != 2 || envRows[env]["healthcheck"].Version != envV || len(envRows[env]["healthcheck"].Data) == 0 ||
			envRows[env]["tracing"].Version != envTomb || envRows[env]["tracing"].Data != nil {
			t.Errorf("EnvironmentRows = %+v, %v", envRows, err)
		}
	})

	t.Run("environment", func(t *testing.T) {
		e, err := store.EnvironmentLayer(ctx, env, "healthcheck")
		if err != nil || !e.HasRow || e.Layer.Version != envV || e.ClientID != db.ClientOf(env) {
			t.Fatalf("EnvironmentLayer = %+v, %v", e, err)
		}
		e, err = store.EnvironmentLayer(ctx, env, "tracing")
		if err != nil || !e.HasRow || e.Layer.Data != nil || e.Layer.Version != envTomb {
			t.Fatalf("tombstone = %+v, %v", e, err)
		}
		e, err = store.EnvironmentLayer(ctx, env, "labels")
		if err != nil || e.HasRow {
			t.Fatalf("no row = %+v, %v", e, err)
		}
		if _, err := store.EnvironmentLayer(ctx, "5f0c1c1e-0000-4000-8000-000000000000", "labels"); !errors.Is(err, resolve.ErrNotFound) {
			t.Fatalf("missing environment: %v", err)
		}
	})

	t.Run("page", func(t *testing.T) {
		page, err := store.HostPage(ctx, resolve.HostPageQuery{EnvironmentID: env, ConfigType: "healthcheck", Limit: 10})
		if err != nil || len(page) != 2 {
			t.Fatalf("page = %+v, %v", page, err)
		}
		byID := map[string]resolve.PageHost{page[0].HostID: page[0], page[1].HostID: page[1]}
		if o := byID[h1].Override; o == nil || o.Version != hostV || len(o.Data) == 0 {
			t.Errorf("h1 override = %+v", o)
		}
		if o := byID[h2].Override; o == nil || o.Version != hostTomb || o.Data != nil {
			t.Errorf("h2 tombstone = %+v", o)
		}
		first, _ := store.HostPage(ctx, resolve.HostPageQuery{EnvironmentID: env, ConfigType: "healthcheck", Limit: 1})
		rest, _ := store.HostPage(ctx, resolve.HostPageQuery{EnvironmentID: env, ConfigType: "healthcheck", Limit: 10, After: first[0].HostID})
		if len(first) != 1 || len(rest) != 1 || rest[0].HostID <= first[0].HostID {
			t.Errorf("cursor: first %+v rest %+v", first, rest)
		}
		since := now.Add(-time.Second)
		online, _ := store.HostPage(ctx, resolve.HostPageQuery{EnvironmentID: env, ConfigType: "healthcheck", Limit: 10, OnlineSince: &since})
		if len(online) != 1 || online[0].HostID != h2 {
			t.Errorf("online = %+v", online)
		}
		listed, _ := store.HostPage(ctx, resolve.HostPageQuery{EnvironmentID: env, ConfigType: "labels", Limit: 10, HostIDs: []string{h1, h3}})
		if len(listed) != 1 || listed[0].HostID != h1 || listed[0].Override != nil {
			t.Errorf("listed = %+v", listed)
		}
	})
}

func second[T any](_ T, err error) error { return err }

// BenchmarkResolvePush10k resolves one type for 10,000 hosts (every tenth with an override that needs
// a merge), paging through the environment as a push does, with the PostgreSQL queries included.
func BenchmarkResolvePush10k(b *testing.B) {
	ctx := context.Background()
	_, db, store := newDB(b)
	env := db.Environment("bench")
	db.Hosts(env, "bench", 10_000)
	db.PutEnv(env, "labels", `{"static":{"env":"prod","team":"core","region":"eu-west-1"},"dynamic":[{"name":"kernel","source":"command","command":["uname","-r"]}]}`)
	if n := db.OverrideEvery(env, "labels", `{"static":{"team":"web","rack":"r12"},"dynamic":[{"name":"role","source":"env","env":"ROLE"}]}`, 10); n != 1000 {
		b.Fatalf("%d overrides, want 1000", n)
	}
	db.Analyze()
	r := resolve.New(store, resolve.Options{})
	req := protocol.ResolvePushRequest{Contract: protocol.ResolveSetsContract, EnvironmentID: env, ConfigType: "labels"}

	b.ReportAllocs()
	for b.Loop() {
		hosts, overrides := 0, 0
		req.After = ""
		for {
			reply, err := r.ResolvePush(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			for _, set := range reply.Sets {
				if reply.Configs[set.Configs["labels"]].HostVersion != 0 {
					overrides += len(set.Hosts)
				}
				hosts += len(set.Hosts)
			}
			if reply.NextAfter == "" {
				break
			}
			req.After = reply.NextAfter
		}
		if hosts != 10_000 || overrides != 1000 {
			b.Fatalf("resolved %d hosts with %d overrides", hosts, overrides)
		}
	}
}
