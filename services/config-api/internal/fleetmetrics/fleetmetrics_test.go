package fleetmetrics

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/config-api/internal/drift"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

var env1 = uuid.MustParse("00000000-0000-0000-0000-0000000000e1")

func hostID(n int) uuid.UUID {
	return uuid.MustParse("00000000-0000-0000-0000-00000000000" + string(rune('0'+n)))
}

// fakeDrift is the drift report port: the test says which hosts each environment's report lists.
type fakeDrift struct {
	mu      sync.Mutex
	drifted map[uuid.UUID][]drift.Host
	fail    map[uuid.UUID]error
	calls   int
}

func (f *fakeDrift) set(env uuid.UUID, hs ...drift.Host) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.drifted == nil {
		f.drifted = map[uuid.UUID][]drift.Host{}
	}
	f.drifted[env] = hs
}

func (f *fakeDrift) Drifted(_ context.Context, p tenancy.Principal, env uuid.UUID, sel selector.Selector) (drift.Drifted, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if !p.Admin() || !sel.Empty() {
		return drift.Drifted{}, errors.New("the drift pass must read every host of every environment as an admin")
	}
	if err := f.fail[env]; err != nil {
		return drift.Drifted{}, err
	}
	out := drift.Drifted{EnvironmentID: env}
	for _, h := range f.drifted[env] {
		out.HostIDs, out.Stale = append(out.HostIDs, h.HostID), append(out.Stale, h.Stale())
	}
	return out, nil
}

// driftedHost is a drifted host reporting labels at version reported of the expected 5 (stale when lower).
func driftedHost(n int, reported int64) drift.Host {
	return drift.Host{HostID: hostID(n), ExpectedVersions: map[string]int64{"labels": 5}, ReportedVersions: map[string]int64{"labels": reported}}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// seed makes one environment with a labels config at version 5 and four hosts: online and current,
// online and behind (reports 4), online with a failed apply, and offline; plus a revoked host.
func seed(t *testing.T, pool *pgxpool.Pool) {
	exec(t, pool, `INSERT INTO clients (id, name) VALUES ('00000000-0000-0000-0000-0000000000c1', 'c')`)
	exec(t, pool, `INSERT INTO environments (id, client_id, name) VALUES ('00000000-0000-0000-0000-0000000000e1', '00000000-0000-0000-0000-0000000000c1', 'prod')`)
	exec(t, pool, `INSERT INTO environment_configs (environment_id, config_type, config_data, version)
		VALUES ('00000000-0000-0000-0000-0000000000e1', 'labels', '{}', 5)`)
	hosts := []struct {
		n        int
		versions string
		seen     string
		revoked  bool
	}{
		{1, `{"labels": 5}`, "now()", false},
		{2, `{"labels": 4}`, "now()", false},
		{3, `{"labels": 5}`, "now()", false},
		{4, `{"labels": 1}`, "now() - interval '1 hour'", false},
		{5, `{"labels": 1}`, "now()", true},
	}
	for _, h := range hosts {
		revoked := "NULL"
		if h.revoked {
			revoked = "now()"
		}
		exec(t, pool, `INSERT INTO hosts (id, client_id, environment_id, hostname, agent_id, config_versions, config_hash, last_heartbeat_at, revoked_at)
			VALUES ($1, '00000000-0000-0000-0000-0000000000c1', '00000000-0000-0000-0000-0000000000e1', $2, $3, $4::jsonb, 'h', `+h.seen+`, `+revoked+`)`,
			"00000000-0000-0000-0000-00000000000"+string(rune('0'+h.n)), "host-"+string(rune('0'+h.n)), "agent-"+string(rune('0'+h.n)), h.versions)
	}
	exec(t, pool, `INSERT INTO host_config_apply_status (host_id, config_type, version, status, error, applied_at)
		VALUES ('00000000-0000-0000-0000-000000000003', 'labels', 5, 'failed', 'policy', now())`)
}

func TestOneReplicaHoldsTheLeaseAndTheTotalsFollowTheFleet(t *testing.T) {
	pool := testinfra.Postgres(t)
	log, _ := testinfra.Logger(t)
	seed(t, pool)
	ctx := context.Background()
	opts := Options{Interval: time.Hour, OnlineWindow: time.Minute}
	ma, mb := metrics.New(), metrics.New()
	reports := &fakeDrift{}
	// The drift report lists host-2 (labels v4 of v5: behind) and the revoked host-5 (not counted).
	reports.set(env1, driftedHost(2, 4), driftedHost(5, 1))
	a, b := New(pool, reports, ma, opts, log), New(pool, reports, mb, opts, log)

	connA, err := a.refresh(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	connB, err := b.refresh(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = connB.Close(ctx) }()
	got := func(m *metrics.Metrics, name string) float64 {
		t.Helper()
		mfs, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1 // not exported
	}
	if got(ma, "configsync_fleet_lease_held") != 1 || got(mb, "configsync_fleet_lease_held") != 0 {
		t.Fatalf("lease held by a: %v, by b: %v; want exactly a", got(ma, "configsync_fleet_lease_held"), got(mb, "configsync_fleet_lease_held"))
	}
	if got(mb, "configsync_fleet_hosts") != -1 {
		t.Fatal("the replica without the lease exports fleet totals")
	}
	for name, want := range map[string]float64{
		"configsync_fleet_hosts":              4, // the revoked one is not counted
		"configsync_fleet_hosts_online":       3,
		"configsync_fleet_hosts_drifted":      1, // host-2, as the drift report lists it
		"configsync_fleet_hosts_stale":        1, // behind, too
		"configsync_fleet_hosts_failed_apply": 1,
		"configsync_fleet_failed_applies":     1,
	} {
		if v := got(ma, name); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if n := testutil.CollectAndCount(a); n != 8 {
		t.Errorf("the lease holder exports %d series, want 8", n)
	}
	// The per-environment figures behind the gauges are stored for the console's overview.
	var hosts, online, drifted, stale, failedHosts int
	if err := pool.QueryRow(ctx, `SELECT hosts, online, drifted, stale, failed_hosts FROM environment_fleet_stats
	        WHERE environment_id = '00000000-0000-0000-0000-0000000000e1' AND computed_at > now() - interval '1 minute'`).
		Scan(&hosts, &online, &drifted, &stale, &failedHosts); err != nil {
		t.Fatalf("stored fleet stats: %v", err)
	}
	if hosts != 4 || online != 3 || drifted != 1 || stale != 1 || failedHosts != 1 {
		t.Errorf("stored stats hosts %d online %d drifted %d stale %d failed %d, want 4 3 1 1 1", hosts, online, drifted, stale, failedHosts)
	}

	storedDrift := func() map[uuid.UUID]bool {
		t.Helper()
		out := map[uuid.UUID]bool{}
		var id uuid.UUID
		var stale bool
		rows, _ := pool.Query(ctx, `SELECT host_id, stale FROM host_drift WHERE environment_id = $1`, env1)
		if _, err := pgx.ForEachRow(rows, []any{&id, &stale}, func() error { out[id] = stale; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if d := storedDrift(); len(d) != 2 || !d[hostID(2)] || !d[hostID(5)] {
		t.Errorf("stored drifted hosts %v, want host-2 and host-5, both stale", d)
	}

	// The totals move with the report: a host ahead of the expected version (reporting a version the
	// server never made) is drifted, not stale.
	reports.set(env1, driftedHost(1, 9), driftedHost(2, 4))
	if connA, err = a.refresh(ctx, connA); err != nil {
		t.Fatal(err)
	}
	if got(ma, "configsync_fleet_hosts_drifted") != 2 || got(ma, "configsync_fleet_hosts_stale") != 1 {
		t.Errorf("drifted %v stale %v, want 2 and 1", got(ma, "configsync_fleet_hosts_drifted"), got(ma, "configsync_fleet_hosts_stale"))
	}
	// host-1 and host-2 caught up, host-4 came back online behind: the stored rows are replaced.
	exec(t, pool, `UPDATE hosts SET last_heartbeat_at = now() WHERE hostname = 'host-4'`)
	reports.set(env1, driftedHost(4, 1))
	if connA, err = a.refresh(ctx, connA); err != nil {
		t.Fatal(err)
	}
	if got(ma, "configsync_fleet_hosts_online") != 4 || got(ma, "configsync_fleet_hosts_drifted") != 1 {
		t.Errorf("online %v drifted %v, want 4 and 1", got(ma, "configsync_fleet_hosts_online"), got(ma, "configsync_fleet_hosts_drifted"))
	}
	if d := storedDrift(); len(d) != 1 || !d[hostID(4)] {
		t.Errorf("stored drifted hosts %v, want host-4 alone", d)
	}
	// A report that fails keeps the environment's last drifted hosts (and the other figures move on);
	// an environment deleted meanwhile is skipped.
	reports.mu.Lock()
	reports.fail = map[uuid.UUID]error{env1: errors.New("resolver unavailable")}
	reports.mu.Unlock()
	exec(t, pool, `UPDATE hosts SET last_heartbeat_at = now() - interval '1 hour' WHERE hostname = 'host-4'`)
	if connA, err = a.refresh(ctx, connA); err != nil {
		t.Fatal(err)
	}
	if got(ma, "configsync_fleet_hosts_online") != 3 || got(ma, "configsync_fleet_hosts_drifted") != 1 {
		t.Errorf("after a failed report: online %v drifted %v, want 3 and 1", got(ma, "configsync_fleet_hosts_online"), got(ma, "configsync_fleet_hosts_drifted"))
	}
	reports.mu.Lock()
	reports.fail = map[uuid.UUID]error{env1: fault.NotFoundf("environment not found")}
	reports.mu.Unlock()
	if connA, err = a.refresh(ctx, connA); err != nil {
		t.Fatal(err)
	}
	reports.mu.Lock()
	reports.fail = nil
	reports.mu.Unlock()

	// a's connection ends (its replica stopped): the lease goes to b at its next try.
	if err := connA.Close(ctx); err != nil {
		t.Fatal(err)
	}
	a.setLeader(false)
	// PostgreSQL releases the lock once that backend has exited, shortly after the close: b retries
	// at each of its periods (polled here, with a deadline only for a hung test).
	testinfra.Eventually(t, 30*time.Second, func() bool {
		if got(mb, "configsync_fleet_lease_held") == 1 {
			return true
		}
		if connB, err = b.refresh(ctx, connB); err != nil {
			t.Fatal(err)
		}
		return false
	}, "b to take the lease")
	if got(mb, "configsync_fleet_lease_held") != 1 || got(mb, "configsync_fleet_hosts") != 4 {
		t.Fatalf("after a stopped, b: lease %v hosts %v", got(mb, "configsync_fleet_lease_held"), got(mb, "configsync_fleet_hosts"))
	}
}

// Run stops with its context and releases the lease (its connection is closed).
func TestRunReleasesTheLeaseOnStop(t *testing.T) {
	pool := testinfra.Postgres(t)
	log, _ := testinfra.Logger(t)
	m := metrics.New()
	f := New(pool, &fakeDrift{}, m, Options{Interval: 20 * time.Millisecond, OnlineWindow: time.Minute}, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	testinfra.Eventually(t, 30*time.Second, func() bool { return testutil.CollectAndCount(f, "configsync_fleet_hosts") == 1 },
		"Run to compute the totals")
	cancel()
	<-done
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The stop waited for the refresh in flight and unlocked on the live session: the lease is free
	// as soon as Run returns.
	var free bool
	if err := conn.QueryRow(context.Background(), "SELECT pg_try_advisory_lock($1)", LeaseKey).Scan(&free); err != nil {
		t.Fatal(err)
	}
	if !free {
		t.Fatal("the lease is still held after Run returned")
	}
	if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", LeaseKey); err != nil {
		t.Fatal(err)
	}
}
