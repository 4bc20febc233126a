// Package fleetmetrics computes the fleet figures an on-call dashboard needs — hosts, hosts online,
// drifted, stale and with failed applies, per environment — once per period, on the one config-api
// replica holding a PostgreSQL advisory lock (the lease). Each period it runs the drift report (package
// drift, the rule of the API's GET .../drift) over every environment and stores the drifted hosts in
// host_drift, then one aggregate statement stores the per-environment rows in environment_fleet_stats,
// which the web console's overview reads with their time ("as of"); the gauges are their sums. No
// scrape and no page ever walks the hosts, and the console's drifted count and filter are the API's
// drift. Replicas without the lease export only configsync_fleet_lease_held 0.
package fleetmetrics

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/services/config-api/internal/drift"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/postgres/sqlcdb"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

// Drift reports an environment's drifted hosts: drift.Detector, the rule of the API's drift report,
// of which the pass keeps only what it stores (ids and stale flags, drift.Drifted).
type Drift interface {
	Drifted(ctx context.Context, p tenancy.Principal, environmentID uuid.UUID, sel selector.Selector) (drift.Drifted, error)
}

// system is the principal the drift pass runs as: it reads every environment.
var system = tenancy.Principal{Name: "fleet-metrics", IsAdmin: true}

// DutyFactor bounds the lease holder's background work: after a computation that took d, the next
// starts no sooner than DutyFactor×d after it (and no sooner than Interval). The drift pass grows with
// the fleet (it resolves every host: seconds per 10,000 hosts), and at 100,000 hosts a fixed 30 s period
// kept one replica resolving the whole fleet back to back, its CPU and memory taken from the pushes and
// fetches it competes with; bounded, it takes at most 1/DutyFactor of the time, however large the fleet.
const DutyFactor = 10

// LeaseKey is the advisory lock key of the fleet metrics lease ("cfsfleet").
const LeaseKey int64 = 0x6366736666656574

// Options tune the fleet gauges.
type Options struct {
	// Interval is how often the lease holder recomputes the totals (default 30s): at most this often,
	// and no sooner than DutyFactor times the last computation's duration after it ended.
	Interval time.Duration
	// OnlineWindow: a host is online when its last heartbeat is at most this old (config-api's).
	OnlineWindow time.Duration
}

// Fleet is the lease loop and the collector of its last result.
type Fleet struct {
	pool  *pgxpool.Pool
	drift Drift
	log   *zap.Logger
	opts  Options

	mu     sync.Mutex
	leader bool
	totals Totals
	at     time.Time
	period time.Duration // the wait before the next computation (at least opts.Interval)

	held, refreshed                       *prometheus.Desc
	hosts, online, drifted, stale, failed *prometheus.Desc
	failures                              *prometheus.Desc
}

// Totals are the fleet's figures, summed over its environments.
type Totals struct {
	Hosts, Online, Drifted, Stale, FailedHosts, FailedApplies int64
}

// New returns the fleet gauges over pool, registered on m (nil: the figures are still computed and
// stored for the console, without gauges); d finds the drifted hosts. Run computes them.
func New(pool *pgxpool.Pool, d Drift, m *metrics.Metrics, opts Options, log *zap.Logger) *Fleet {
	if opts.Interval <= 0 {
		opts.Interval = 30 * time.Second
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(metrics.Namespace+"_fleet_"+name, help, nil, nil)
	}
	f := &Fleet{pool: pool, drift: d, log: log.Named("fleet-metrics"), opts: opts,
		held:      desc("lease_held", "1 on the config-api replica computing the fleet gauges, else 0."),
		refreshed: desc("refreshed_timestamp_seconds", "When the fleet gauges were last computed (Unix time)."),
		hosts:     desc("hosts", "Registered hosts, not revoked."),
		online:    desc("hosts_online", "Hosts whose last heartbeat is within the online window."),
		drifted:   desc("hosts_drifted", "Hosts the drift report lists as drifted (their reported config state differs from the expected one)."),
		stale:     desc("hosts_stale", "Drifted hosts with a config type reported behind the expected version, or not at all."),
		failed:    desc("hosts_failed_apply", "Hosts whose last apply of at least one config type failed."),
		failures:  desc("failed_applies", "(host, config type) pairs whose last apply failed."),
	}
	metrics.Register(m, prometheus.Collector(f))
	return f
}

// Describe implements prometheus.Collector.
func (f *Fleet) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{f.held, f.refreshed, f.hosts, f.online, f.drifted, f.stale, f.failed, f.failures} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the last totals, only while this replica holds the lease
// and they are fresh (computed within three periods, a period stretched by DutyFactor included).
func (f *Fleet) Collect(ch chan<- prometheus.Metric) {
	f.mu.Lock()
	leader, t, at, period := f.leader, f.totals, f.at, max(f.opts.Interval, f.period)
	f.mu.Unlock()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	if !leader || time.Since(at) > 3*period {
		g(f.held, 0)
		return
	}
	g(f.held, 1)
	g(f.refreshed, float64(at.UnixNano())/1e9)
	g(f.hosts, float64(t.Hosts))
	g(f.online, float64(t.Online))
	g(f.drifted, float64(t.Drifted))
	g(f.stale, float64(t.Stale))
	g(f.failed, float64(t.FailedHosts))
	g(f.failures, float64(t.FailedApplies))
}

// Run tries for the lease and, while it holds it, recomputes the totals every Interval, until ctx is
// done. The lease is a session advisory lock on a connection of its own: it ends when that connection
// does (this replica stopped or lost the database), and another replica takes over at its next try.
// A stop interrupts the drift pass (its reports go through the resolver, and take seconds per 10,000
// hosts) but never a statement on the lease's connection (it waits for the one in flight, bounded by
// the statement timeout), so the lease is always unlocked on a live session before the connection
// closes: another replica can take it at once rather than when the server notices the session ended.
func (f *Fleet) Run(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			f.release(ctx, conn)
		}
	}()
	t := time.NewTimer(f.opts.Interval)
	defer t.Stop()
	for {
		start := time.Now()
		var err error
		if conn, err = f.refresh(ctx, conn); err != nil && ctx.Err() == nil {
			f.log.Warn("fleet metrics not refreshed", zap.Error(err))
		}
		took := time.Since(start)
		wait := max(f.opts.Interval-took, (DutyFactor-1)*took)
		f.mu.Lock()
		f.period = took + wait
		f.mu.Unlock()
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh takes the lease if free and, holding it, recomputes the totals. It returns the connection to
// keep (nil after an error: the connection is closed, which releases the lease).
func (f *Fleet) refresh(ctx context.Context, conn *pgx.Conn) (*pgx.Conn, error) {
	fail := func(err error) (*pgx.Conn, error) {
		if conn != nil {
			f.release(ctx, conn)
		}
		return nil, err
	}
	// Not cancelled by ctx: see Run.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(f.opts.Interval, 10*time.Second))
	defer cancel()
	if conn == nil {
		c, err := pgx.ConnectConfig(qctx, f.pool.Config().ConnConfig)
		if err != nil {
			return fail(fmt.Errorf("connect: %w", err))
		}
		conn = c
	}
	f.mu.Lock()
	leader := f.leader
	f.mu.Unlock()
	if !leader {
		var got bool
		if err := conn.QueryRow(qctx, "SELECT pg_try_advisory_lock($1)", LeaseKey).Scan(&got); err != nil {
			return fail(fmt.Errorf("try lease: %w", err))
		}
		if !got {
			return conn, nil // another replica holds it
		}
		f.log.Info("fleet metrics lease taken")
	}
	totals, err := Compute(ctx, conn, f.drift, f.opts.OnlineWindow, f.log)
	if err != nil {
		return fail(err)
	}
	f.mu.Lock()
	f.leader, f.totals, f.at = true, totals, time.Now()
	f.mu.Unlock()
	return conn, nil
}

// statementTimeout bounds each statement of Compute on the lease's connection.
const statementTimeout = 30 * time.Second

// Compute recomputes and stores every environment's fleet stats on db and returns their totals: the
// drift pass (d's report of each environment, its drifted hosts stored in host_drift as soon as it is
// in), then one aggregate statement; the statements are not interrupted by a cancelled ctx (each is
// bounded by statementTimeout, so the lease's connection stays usable), the reports are. The lease holder runs it once per period; tests run it
// directly. An environment whose report fails keeps its previous drift rows (logged), so one
// environment cannot stop the others' figures.
func Compute(ctx context.Context, db sqlcdb.DBTX, d Drift, onlineWindow time.Duration, log *zap.Logger) (Totals, error) {
	q := sqlcdb.New(db)
	stmt := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), statementTimeout)
	}
	sctx, cancel := stmt()
	envs, err := q.ListEnvironmentIDs(sctx)
	cancel()
	if err != nil {
		return Totals{}, fmt.Errorf("fleet stats: list environments: %w", err)
	}
	// Each environment's drifted hosts are stored as soon as its report is in, so the pass holds one
	// environment's report at a time, not the whole fleet's, and of it only the ids and stale flags.
	for _, env := range envs {
		report, err := d.Drifted(ctx, system, env, selector.Selector{})
		if fault.Is(err, fault.NotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			if ctx.Err() != nil {
				return Totals{}, fmt.Errorf("fleet stats: drift: %w", err)
			}
			log.Warn("fleet stats: drift report failed", zap.Stringer("environment_id", env), zap.Error(err))
			continue
		}
		sctx, cancel := stmt()
		err = q.ReplaceHostDrift(sctx, sqlcdb.ReplaceHostDriftParams{EnvironmentID: report.EnvironmentID, HostIds: report.HostIDs, Stale: report.Stale})
		cancel()
		if err != nil {
			return Totals{}, fmt.Errorf("fleet stats: store drift: %w", err)
		}
	}
	sctx, cancel = stmt()
	defer cancel()
	rows, err := q.RefreshEnvironmentFleetStats(sctx, pgtype.Interval{Microseconds: onlineWindow.Microseconds(), Valid: true})
	if err != nil {
		return Totals{}, fmt.Errorf("fleet stats: %w", err)
	}
	var totals Totals
	for _, r := range rows {
		totals.Hosts += r.Hosts
		totals.Online += r.Online
		totals.Drifted += r.Drifted
		totals.Stale += r.Stale
		totals.FailedHosts += r.FailedHosts
		totals.FailedApplies += r.FailedApplies
	}
	return totals, nil
}

// release unlocks the lease (when held) on a fresh context and closes conn: the server ends a closed
// session, and its locks, only some time after Close returns.
func (f *Fleet) release(ctx context.Context, conn *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if f.isLeader() {
		_, _ = conn.Exec(cctx, "SELECT pg_advisory_unlock($1)", LeaseKey)
	}
	f.setLeader(false)
	_ = conn.Close(cctx)
}

func (f *Fleet) isLeader() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leader
}

func (f *Fleet) setLeader(v bool) {
	f.mu.Lock()
	f.leader = v
	f.mu.Unlock()
}
