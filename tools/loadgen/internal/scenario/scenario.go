// Package scenario runs loadgen's fleet scenarios against a real ConfigSync stack: it registers the
// simulated hosts through the API, boots the fleet (the thundering herd of startup fetches), pushes
// environment-wide config changes and waits for every ack to be persisted, and sustains a heartbeat
// rate while watching heartbeats land. Every number comes from what the backend persisted (observe)
// or exposes (backendstats), never from the fleet's own view of having sent something.
package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/tools/loadgen/internal/backendstats"
	"github.com/configsync/configsync/tools/loadgen/internal/configapi"
	"github.com/configsync/configsync/tools/loadgen/internal/fleet"
	"github.com/configsync/configsync/tools/loadgen/internal/latency"
	"github.com/configsync/configsync/tools/loadgen/internal/observe"
	"github.com/configsync/configsync/tools/loadgen/internal/procstat"
)

// Scenario names.
const (
	Push      = "push"
	Herd      = "herd"
	Heartbeat = "heartbeat"
)

// Options configure a run.
type Options struct {
	Agents        int
	Conns         int
	Subscriptions fleet.SubscriptionMode
	// Scenarios to run (Push, Herd, Heartbeat, Rollout, RolloutFail).
	Scenarios map[string]bool
	// Jitter is the boot window of the herd (agents fetch at a random point within it).
	Jitter time.Duration
	// RetryFor: agents whose startup fetch failed retry as the agent does for this long from the boot.
	RetryFor     time.Duration
	FetchTimeout time.Duration
	// HeartbeatInterval is each agent's background heartbeat period (keeps the fleet online).
	HeartbeatInterval time.Duration
	// HeartbeatRate (per second) and Duration shape the heartbeat scenario.
	HeartbeatRate float64
	Duration      time.Duration
	// Timeout bounds every wait (all online, all acks persisted, all heartbeats landed).
	Timeout time.Duration
	// Pushes is how many environment-wide pushes the push scenario makes, one after the other.
	Pushes int
	// DropPushes is the fraction (0..1) of pushes the agents lose (fleet.Config.DropPushes): the push
	// scenario then measures convergence through anti-entropy repairs.
	DropPushes float64
	// Credentials is how many distinct credentials the pushed collectors reference.
	Credentials int
	// RegisterConcurrency bounds the host registration batches in flight.
	RegisterConcurrency int
	// RunID names the tenant, environment and agents of this run.
	RunID string
	// Real, when set, gives every agent its own NATS connection and user (realconn.go).
	Real *RealConnections
	// PollInterval overrides how often persisted state and rollouts are polled (default: 100 ms with
	// the postgres observer, 1 s through the API).
	PollInterval time.Duration
	// FailRatio is the share (0..1) of agents that refuse the RolloutFail scenario's config.
	FailRatio float64
	// Analyze refreshes the hosts table's planner statistics after registration, when the observer
	// can (postgres): the steady state of a fleet that grew over time rather than one registered a
	// second ago.
	Analyze bool
	// Signing says whether the stack's resolver signs configs ("on", "off"; "" unknown), for the report.
	Signing string
}

// Backend is the stack under test.
type Backend struct {
	API      *configapi.Client
	Observer observe.Observer
	// NATSURL and CredsFile are what the fleet connects with.
	NATSURL   string
	CredsFile string
	// NATSCA verifies the servers' TLS certificates (empty: plaintext or the system roots).
	NATSCA string
	// Control is a connection for reading service stats; JS its JetStream context.
	Control *nats.Conn
	JS      jetstream.JetStream
	// Processes lists the service processes whose memory is reported (may be nil).
	Processes []int
	// NATSServer is the one of Processes that is the nats-server alone (0: none is; an embedded
	// server then counts in the services' memory).
	NATSServer int
	// Alive reports whether the stack is still up (nil: assume it is).
	Alive func() bool
	// CPUGroups lists, by name, the processes whose CPU time each phase reports (for example the
	// services and the PostgreSQL backends of their database); looked up again at every snapshot.
	CPUGroups func() map[string][]int
	// Signatures reads the resolver's count of statements signed so far (nil: not observable).
	Signatures func(ctx context.Context) (int64, error)
}

// The roles of the processes in Result.Memory.
const (
	RoleServices   = "services"
	RoleNATSServer = "nats-server"
)

// CPU is the CPU time groups of processes used during one phase, by group name: CPUServices,
// CPUNATSServer, CPUPostgres and "loadgen" (this process: the simulated fleet).
type CPU map[string]time.Duration

// The CPU groups of a stack. A stack whose nats-server runs in a process of its own (devstack's) has
// CPUNATSServer apart from CPUServices; one that embeds it in the services' process (or an external
// stack given by -service-pids) counts it in CPUServices and has no CPUNATSServer group.
const (
	CPUServices   = "services"
	CPUNATSServer = "nats-server"
	CPUPostgres   = "postgres"
)

// CPUGroups returns Backend.CPUGroups for a stack of processes of which natsServer (0: none) is a
// nats-server of its own, and whose PostgreSQL database is dbName ("": not observed): the services,
// nats-server and the database's backends (which carry its name in their process title).
func CPUGroups(processes []int, natsServer int, dbName string) func() map[string][]int {
	return func() map[string][]int {
		g := map[string][]int{}
		for _, pid := range processes {
			if pid == natsServer {
				g[CPUNATSServer] = append(g[CPUNATSServer], pid)
			} else {
				g[CPUServices] = append(g[CPUServices], pid)
			}
		}
		if dbName != "" {
			if b := procstat.PIDsWithCmdline(" " + dbName + " "); len(b) > 0 {
				g[CPUPostgres] = b
			}
		}
		return g
	}
}

// Stack is the CPU of the stack under test without its database: the services and nats-server.
func (c CPU) Stack() time.Duration { return c[CPUServices] + c[CPUNATSServer] }

// NATSServer is nats-server's CPU: its own process's when it has one, else the services' process's
// that embeds it (with the services' own work in it).
func (c CPU) NATSServer() time.Duration {
	if d, ok := c[CPUNATSServer]; ok {
		return d
	}
	return c[CPUServices]
}

// cpuSnapshot is per-process CPU time by group.
type cpuSnapshot map[string]map[int]time.Duration

func (r *Runner) cpuSnapshot() cpuSnapshot {
	groups := map[string][]int{"loadgen": {os.Getpid()}}
	if r.backend.CPUGroups != nil {
		for name, pids := range r.backend.CPUGroups() {
			groups[name] = pids
		}
	}
	snap := cpuSnapshot{}
	for name, pids := range groups {
		snap[name] = map[int]time.Duration{}
		for _, pid := range pids {
			if d, err := procstat.CPU(pid); err == nil {
				snap[name][pid] = d
			}
		}
	}
	return snap
}

// cpuSince is the CPU used since before, per group: per-process deltas, so processes that started
// during the phase count from their start and those that ended are left out.
func (r *Runner) cpuSince(before cpuSnapshot) CPU {
	out := CPU{}
	for name, now := range r.cpuSnapshot() {
		var sum time.Duration
		for pid, d := range now {
			sum += d - before[name][pid]
		}
		out[name] = sum
	}
	return out
}

// Result is everything a run measured.
type Result struct {
	Date          time.Time              `json:"date"`
	Agents        int                    `json:"agents"`
	Conns         int                    `json:"conns"`
	Subscriptions fleet.SubscriptionMode `json:"subscriptions"`
	Observer      string                 `json:"observer"`
	Registration  configapi.Registration `json:"registration"`
	// RegistrationSignatures is what the resolver signed while the hosts were registered (with signing
	// on, their identity statements; -1: not observable).
	RegistrationSignatures int64 `json:"registration_signatures"`
	// Analyzed: the hosts table's statistics were refreshed after registration.
	Analyzed      bool   `json:"analyzed"`
	EnvironmentID string `json:"environment_id"`
	// Signing is whether the resolver signed configs during the run ("on", "off", "" unknown).
	Signing   string           `json:"signing,omitempty"`
	Herd      *HerdResult      `json:"herd,omitempty"`
	Push      *PushResult      `json:"push,omitempty"`
	Heartbeat *HeartbeatResult `json:"heartbeat,omitempty"`
	// ConnectStorm: the real-connection fleet's connect storm, before the herd.
	ConnectStorm *ConnectStormResult `json:"connect_storm,omitempty"`
	Fleet        fleet.Stats         `json:"fleet"`
	// Rollout and RolloutFail are the staged rollout scenarios (rollout.go).
	Rollout     *RolloutRun `json:"rollout,omitempty"`
	RolloutFail *RolloutRun `json:"rollout_fail,omitempty"`
	// Memory of the service processes at the end of the run (VmHWM is the peak over the whole run).
	Memory []procstat.Memory `json:"memory,omitempty"`
	// LoadgenMemory is loadgen's own (the simulated fleet shares the machine).
	LoadgenMemory *procstat.Memory `json:"loadgen_memory,omitempty"`
	// LoadAverage is the machine's 1-minute load average at the start and at the end of the run.
	LoadAverage [2]float64 `json:"load_average"`
	// Notes are non-fatal problems met along the way.
	Notes []string `json:"notes,omitempty"`
}

// Runner runs the scenarios.
type Runner struct {
	opts     Options
	backend  Backend
	progress io.Writer

	clientID, envID string
	credIDs         []string
	credInstances   int // credential service replicas that answered the first stats request
	fleet           *fleet.Fleet
	res             *Result
	identities      map[string]string // real-connection mode: each agent's creds, until connected
	failing         map[string]bool   // RolloutFail: the agents that refuse its config (read-only once the fleet runs)
}

// New returns a Runner writing progress lines to progress.
func New(opts Options, backend Backend, progress io.Writer) *Runner {
	if opts.Pushes < 1 {
		opts.Pushes = 1
	}
	if opts.Credentials < 1 {
		opts.Credentials = 1
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Minute
	}
	if opts.RunID == "" {
		opts.RunID = fmt.Sprintf("%s-%d", time.Now().UTC().Format("20060102t150405"), os.Getpid())
	}
	if progress == nil {
		progress = io.Discard
	}
	return &Runner{opts: opts, backend: backend, progress: progress}
}

func (r *Runner) logf(format string, args ...any) {
	fmt.Fprintf(r.progress, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func (r *Runner) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.res.Notes = append(r.res.Notes, msg)
	r.logf("note: %s", msg)
}

// Run sets up the tenant and the fleet, runs the selected scenarios in the order herd, push, rollout,
// rollout-fail, heartbeat, and returns what it measured. A partial Result comes back with an error.
func (r *Runner) Run(ctx context.Context) (*Result, error) {
	r.res = &Result{Date: time.Now().UTC(), Agents: r.opts.Agents, Conns: r.opts.Conns, Subscriptions: r.opts.Subscriptions,
		Observer: r.backend.Observer.Name(), Signing: r.opts.Signing}
	r.res.LoadAverage[0], _ = procstat.LoadAverage()
	defer r.finish()
	ids, err := r.setup(ctx)
	if err != nil {
		return r.res, err
	}
	f, err := r.newFleet(ids)
	if err != nil {
		return r.res, err
	}
	r.fleet = f
	defer f.Close()
	if err := r.boot(ctx); err != nil {
		return r.res, err
	}
	if r.opts.Scenarios[Push] {
		if err := r.push(ctx); err != nil {
			return r.res, fmt.Errorf("push scenario: %w", err)
		}
	}
	if r.opts.Scenarios[Rollout] {
		run, err := r.rollout(ctx, false)
		r.res.Rollout = run
		if err != nil {
			return r.res, fmt.Errorf("rollout scenario: %w", err)
		}
	}
	if r.opts.Scenarios[RolloutFail] {
		run, err := r.rollout(ctx, true)
		r.res.RolloutFail = run
		if err != nil {
			return r.res, fmt.Errorf("rollout-fail scenario: %w", err)
		}
	}
	if r.opts.Scenarios[Heartbeat] {
		if err := r.heartbeat(ctx); err != nil {
			return r.res, fmt.Errorf("heartbeat scenario: %w", err)
		}
	}
	return r.res, nil
}

func (r *Runner) finish() {
	r.res.LoadAverage[1], _ = procstat.LoadAverage()
	if r.fleet != nil {
		r.res.Fleet = r.fleet.Stats()
	}
	for _, pid := range r.backend.Processes {
		m, err := procstat.Read(pid)
		if err != nil {
			r.note("memory of pid %d: %v", pid, err)
			continue
		}
		m.Role = RoleServices
		if pid == r.backend.NATSServer {
			m.Role = RoleNATSServer
		}
		r.res.Memory = append(r.res.Memory, m)
	}
	if m, err := procstat.Read(os.Getpid()); err == nil {
		r.res.LoadgenMemory = &m
	}
}

// setup creates the tenant, the credentials and the first configs, and registers one host per agent.
func (r *Runner) setup(ctx context.Context) ([]string, error) {
	api := r.backend.API
	var err error
	if r.clientID, err = api.CreateClient(ctx, "loadgen-"+r.opts.RunID); err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	if r.envID, err = api.CreateEnvironment(ctx, r.clientID, fmt.Sprintf("bench-%d", r.opts.Agents)); err != nil {
		return nil, fmt.Errorf("create environment: %w", err)
	}
	r.res.EnvironmentID = r.envID
	for i := range r.opts.Credentials {
		id, err := api.CreateCredential(ctx, r.clientID, r.envID, fmt.Sprintf("loadgen-db-%d", i),
			map[string]string{"username": "monitor", "password": fmt.Sprintf("loadgen-password-%d", i)})
		if err != nil {
			return nil, fmt.Errorf("create credential: %w", err)
		}
		r.credIDs = append(r.credIDs, id)
	}
	initial := map[string]any{
		"intervals":  map[string]string{"metrics": "30s", "inventory": "1h", "heartbeat": "30s", "processes": "1m"},
		"labels":     map[string]any{"static": map[string]string{"bench": "loadgen", "run": r.opts.RunID}},
		"collectors": r.collectors(0),
	}
	for _, typ := range []string{"intervals", "labels", "collectors"} {
		if _, err := api.PutEnvironmentConfig(ctx, r.envID, typ, initial[typ]); err != nil {
			return nil, fmt.Errorf("initial %s config: %w", typ, err)
		}
	}

	ids := make([]string, r.opts.Agents)
	for i := range ids {
		ids[i] = fmt.Sprintf("lg-%s-%06d", r.opts.RunID, i)
	}
	if r.opts.Scenarios[RolloutFail] {
		r.failing = failingAgents(ids, r.opts.FailRatio)
	}
	r.logf("registering %d hosts in environment %s (batches of up to %d, %d in flight)", len(ids), r.envID, configapi.MaxBatch, r.opts.RegisterConcurrency)
	sigBefore := r.signatures(ctx)
	start, last := time.Now(), time.Now()
	reg, err := r.register(ctx, ids, func(done int) {
		if time.Since(last) >= 2*time.Second {
			last = time.Now()
			el := time.Since(start)
			r.logf("  register: %d/%d hosts (%.0f/s)", done, len(ids), float64(done)/el.Seconds())
		}
	})
	r.res.Registration = reg
	if err != nil {
		return nil, err
	}
	r.res.RegistrationSignatures = -1
	if after := r.signatures(ctx); sigBefore >= 0 && after >= 0 {
		r.res.RegistrationSignatures = after - sigBefore
	}
	r.logf("registered %d hosts in %s (%.0f/s, %d batches, %d retries)", reg.Hosts, reg.Elapsed.Round(time.Millisecond), reg.PerSecond, reg.Batches, reg.Retries)
	if a, ok := r.backend.Observer.(interface{ Analyze(context.Context) error }); ok && r.opts.Analyze {
		if err := a.Analyze(ctx); err != nil {
			r.note("%v", err)
		} else {
			r.res.Analyzed = true
			r.logf("ANALYZE hosts: fresh planner statistics, as autovacuum would give a fleet that grew over time")
		}
	}
	return ids, nil
}

// collectors is the pushed collectors list: one mysql collector per credential (each a distinct
// credential_id) and one http collector without secrets; round changes the intervals so every push
// carries new content.
func (r *Runner) collectors(round int) []map[string]any {
	out := []map[string]any{{"type": "http", "name": "self", "url": "http://127.0.0.1:8080/healthz", "interval": fmt.Sprintf("%ds", 10+round)}}
	for i, id := range r.credIDs {
		out = append(out, map[string]any{"type": "mysql", "name": fmt.Sprintf("db-%d", i), "host": fmt.Sprintf("10.0.0.%d", i+1),
			"port": 3306, "interval": fmt.Sprintf("%ds", 30+round), "credential_id": id})
	}
	return out
}

// injects reads the credential service's inject counter (-1 when unavailable).
func (r *Runner) injects(ctx context.Context) int64 {
	if r.backend.Control == nil {
		return -1
	}
	c, err := backendstats.CredentialInjects(ctx, r.backend.Control, r.credInstances)
	if err != nil {
		r.note("credential stats: %v", err)
		return -1
	}
	if r.credInstances == 0 {
		r.credInstances = c.Instances
	}
	return c.Requests
}

// signatures reads the resolver's signature counter (-1 when it cannot be read).
func (r *Runner) signatures(ctx context.Context) int64 {
	if r.backend.Signatures == nil {
		return -1
	}
	n, err := r.backend.Signatures(ctx)
	if err != nil {
		r.note("resolver signatures: %v", err)
		return -1
	}
	return n
}

// quiesceInjects waits until the credential service's inject counter has not moved for about a
// second (three reads in a row), so that what a later phase counts is that phase's own work. It
// returns the settled counter, or -1 when the counter cannot be read.
func (r *Runner) quiesceInjects(ctx context.Context) int64 {
	last, same := r.injects(ctx), 0
	if last < 0 {
		return -1
	}
	deadline := time.Now().Add(r.opts.Timeout)
	lastLog := time.Now()
	for same < 3 {
		if time.Now().After(deadline) {
			r.note("the credential inject counter was still moving after %s; counts below include that work", r.opts.Timeout)
			return last
		}
		time.Sleep(100 * time.Millisecond)
		n := r.injects(ctx)
		if n < 0 {
			return -1
		}
		if n == last {
			same++
		} else {
			same = 0
			if time.Since(lastLog) >= 2*time.Second {
				lastLog = time.Now()
				r.logf("  waiting for the backend to go quiet: credential inject requests still moving (%d)", n)
			}
		}
		last = n
	}
	return last
}

// waitFor polls check every interval until it reports done, printing its status every 2 s.
func (r *Runner) waitFor(ctx context.Context, what string, interval time.Duration, check func(context.Context) (done bool, status string, err error)) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	start, lastLog := time.Now(), time.Now()
	var status string
	for {
		pollStart := time.Now()
		done, st, err := check(ctx)
		if err != nil && ctx.Err() == nil {
			return time.Time{}, fmt.Errorf("%s: %w", what, err)
		}
		if st != "" {
			status = st
		}
		if done {
			return time.Now(), nil
		}
		if r.backend.Alive != nil && !r.backend.Alive() {
			return time.Time{}, fmt.Errorf("%s: the stack under test exited (%s)", what, status)
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			r.logf("  %s: %s (%.1f s)", what, status, time.Since(start).Seconds())
		}
		// Never poll faster than the poll itself takes: the observer must not become the load.
		wait := max(interval, 2*time.Since(pollStart))
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s: gave up after %s: %s", what, r.opts.Timeout, status)
		case <-time.After(wait):
		}
	}
}

// pollInterval is how often to poll the observer (and a rollout).
func (r *Runner) pollInterval() time.Duration {
	if r.opts.PollInterval > 0 {
		return r.opts.PollInterval
	}
	if r.backend.Observer.Name() == "postgres" {
		return 100 * time.Millisecond
	}
	return time.Second
}

func (r *Runner) stackAlive() error {
	if r.backend.Alive != nil && !r.backend.Alive() {
		return errors.New("the stack under test exited")
	}
	return nil
}

// HerdResult is the boot of the fleet: every agent fetching within the jitter window.
type HerdResult struct {
	Agents     int              `json:"agents"`
	Window     time.Duration    `json:"window_ns"`
	Elapsed    time.Duration    `json:"elapsed_ns"`
	OK         int64            `json:"ok"`
	Failed     int64            `json:"failed"`
	Errors     map[string]int64 `json:"errors,omitempty"`
	TypeErrors int64            `json:"type_errors"`
	Latency    latency.Summary  `json:"latency"`
	// Timeline is the successful first fetches by when they began (half-second buckets from the
	// boot); Wakeups is loadgen's own scheduling delay in the same buckets (latency.ProbeWakeups,
	// a 5 ms sleep), which a fetch's round trip includes.
	Timeline []latency.Bucket `json:"timeline,omitempty"`
	Wakeups  []latency.Bucket `json:"loadgen_wakeup_delay,omitempty"`
	// LoadgenGCs is how many GC cycles of loadgen's own heap ended during the herd (their assists slow
	// the goroutines reading replies, which the wake-up delay does not show).
	LoadgenGCs  uint64  `json:"loadgen_gc_cycles"`
	PerSecond   float64 `json:"per_second"`
	Injects     int64   `json:"inject_requests"`
	Credentials int     `json:"credentials_per_inject"`
	// OnlineAfter is how long after the boot began every host was seen online.
	OnlineAfter time.Duration `json:"online_after_ns"`
	// CPU used from the boot until every agent had fetched (first heartbeats included).
	CPU CPU `json:"cpu_ns"`
	// LateInjects are inject requests made after the herd ended (fetches served late); QuietAfter is
	// when, from the boot, the credential service stopped receiving them.
	LateInjects int64         `json:"late_inject_requests"`
	QuietAfter  time.Duration `json:"quiet_after_ns"`
	// Retry is what agents whose first fetch failed did, retrying as the agent does for RetryFor.
	Retry    fleet.RetryStats `json:"retry"`
	RetryFor time.Duration    `json:"retry_for_ns"`
	// Signatures the resolver made for the herd (-1: not observable): with signing on, one statement
	// per distinct config not signed yet, never one per fetch; hosts' identities were signed at their
	// registration (a host without one gets it at its first fetch ever).
	Signatures int64 `json:"signatures"`

	beforeInjects, endInjects int64
}

// boot starts the fleet (the herd when selected) and waits until the backend sees every host online.
func (r *Runner) boot(ctx context.Context) error {
	herd := r.opts.Scenarios[Herd]
	before, sigBefore := int64(-1), int64(-1)
	if herd {
		before = r.injects(ctx)
		sigBefore = r.signatures(ctx)
		r.logf("herd: %d agents fetch within a %s jitter window", r.opts.Agents, r.opts.Jitter)
	} else {
		r.logf("boot: %d agents send a first heartbeat (no startup fetch: herd not selected)", r.opts.Agents)
	}
	if herd {
		// loadgen's heap holds every agent's connection (with TLS about 60 KB each: 870 MB live at
		// 15,000) and a cycle over it takes 0.4-1.2 s, its mark assists charged to the goroutines that
		// read the replies: the round trips measured. Collected now, before the window, the next cycle
		// is that heap's size of allocation away, more than a herd allocates.
		runtime.GC()
	}
	gcs0 := gcCycles()
	cpu0 := r.cpuSnapshot()
	start := time.Now()
	var wakeups latency.Timeline
	wakeups.Begin(start)
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	probed := make(chan struct{})
	go func() { defer close(probed); latency.ProbeWakeups(probeCtx, wakeupProbeInterval, &wakeups) }()
	booted := r.fleet.Start(fleet.StartOptions{Fetch: herd, Jitter: r.opts.Jitter, RetryFor: r.opts.RetryFor})
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-booted:
			break wait
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := r.stackAlive(); err != nil {
				return err
			}
			s := r.fleet.Stats()
			if herd {
				rs := r.fleet.RetryStats()
				r.logf("  herd: %d fetched, %d failed (%.1f s); %d retries configured %d agents", s.FetchOK, s.FetchFailed, time.Since(start).Seconds(), rs.Retries, rs.RetriedOK)
			}
		}
	}
	elapsed := time.Since(start)
	cpu := r.cpuSince(cpu0)
	stopProbe()
	<-probed
	loadgenGCs := gcCycles() - gcs0
	if herd {
		s := r.fleet.Stats()
		h := &HerdResult{Agents: r.opts.Agents, Window: r.opts.Jitter, Elapsed: elapsed, OK: s.FetchOK, Failed: s.FetchFailed,
			Errors: s.FetchErrors, TypeErrors: s.FetchTypeErrors, Latency: s.FetchLatency, Injects: -1, Credentials: len(r.credIDs), CPU: cpu,
			Retry: r.fleet.RetryStats(), RetryFor: r.opts.RetryFor}
		if elapsed > 0 {
			h.PerSecond = float64(s.FetchOK) / elapsed.Seconds()
		}
		h.Timeline = r.fleet.FetchTimeline(timelineBucket)
		h.Wakeups = wakeups.Buckets(timelineBucket)
		h.LoadgenGCs = loadgenGCs
		h.endInjects = r.injects(ctx)
		h.beforeInjects = before
		r.res.Herd = h
		r.logTimeline(h)
		r.logf("herd: %d ok, %d failed in %s; fetch p50 %s p95 %s p99 %s", h.OK, h.Failed, elapsed.Round(time.Millisecond),
			h.Latency.P50.Round(time.Microsecond), h.Latency.P95.Round(time.Microsecond), h.Latency.P99.Round(time.Microsecond))
		if h.TypeErrors > 0 {
			r.note("%d fetches withheld a type (type_errors)", h.TypeErrors)
		}
		if h.Failed > 0 && h.RetryFor > 0 {
			r.logf("herd: retries: %d (%d waited the backend's retry_after_ms), %d agents configured by a retry, %d left without config; every agent configured %s after boot",
				h.Retry.Retries, h.Retry.ServerDelays, h.Retry.RetriedOK, h.Retry.GaveUp, h.Retry.AllConfigured.Round(time.Millisecond))
		}
	}
	if err := r.fleet.Flush(30 * time.Second); err != nil {
		return fmt.Errorf("flush boot heartbeats: %w", err)
	}
	// Delivery pushes only to hosts whose heartbeat ack-ingest has persisted within the online window.
	since := start.Add(-time.Second)
	doneAt, err := r.waitFor(ctx, "waiting for every host online", r.pollInterval(), func(ctx context.Context) (bool, string, error) {
		n, err := r.backend.Observer.Online(ctx, r.envID, since)
		return n >= r.opts.Agents, fmt.Sprintf("%d/%d hosts online", n, r.opts.Agents), err
	})
	if err != nil {
		return err
	}
	r.logf("all %d hosts online %.1f s after boot", r.opts.Agents, doneAt.Sub(start).Seconds())
	if h := r.res.Herd; h != nil {
		h.OnlineAfter = doneAt.Sub(start)
		// Fetches still queued in the backend are served after the herd (to agents that may long have
		// given up): wait for them, and count them apart.
		settled := r.quiesceInjects(ctx)
		if h.beforeInjects >= 0 && settled >= 0 && h.endInjects >= 0 {
			h.Injects = settled - h.beforeInjects
			h.LateInjects = settled - h.endInjects
			h.QuietAfter = time.Since(start)
		}
		h.Signatures = -1
		if after := r.signatures(ctx); sigBefore >= 0 && after >= 0 {
			h.Signatures = after - sigBefore
			r.logf("herd: the resolver signed %d statements (%d hosts)", h.Signatures, r.opts.Agents)
		}
		if h.LateInjects > 0 {
			r.note("herd: the backend served %d more fetches (credential inject requests) after the herd ended, %.1f s after boot it was quiet: requests queued in delivery are answered even when the agent has already timed out",
				h.LateInjects, h.QuietAfter.Seconds())
		}
	}
	return nil
}

// PushRun is one environment-wide push.
type PushRun struct {
	Version int64 `json:"version"`
	// PutLatency is the PUT's round trip.
	PutLatency time.Duration `json:"put_latency_ns"`
	// AllPersisted is from the PUT's answer to the last ack persisted (postgres: the newest
	// updated_at; config-api: the end of the first poll that saw every ack, an upper bound).
	AllPersisted time.Duration `json:"all_persisted_ns"`
	Applied      int           `json:"applied"`
	Failed       int           `json:"failed"`
	// Received: PUT sent -> command received, per agent. Persisted: PUT answered -> ack persisted,
	// per host (postgres only).
	Received  latency.Summary `json:"received"`
	Persisted latency.Summary `json:"persisted"`
	// Injects is how many credential inject requests the push caused; each decrypts every distinct
	// credential of its collectors once.
	Injects  int64 `json:"inject_requests"`
	Decrypts int64 `json:"decrypts"`
	// AcksPerSecond is Applied / AllPersisted.
	AcksPerSecond float64 `json:"acks_per_second"`
	// Signatures the resolver made from the PUT until every ack was persisted (-1: not observable):
	// with signing on, one per distinct config pushed (the environment's), whatever the fleet size.
	Signatures int64 `json:"signatures"`
	// CPU used from the PUT until every ack was persisted (background heartbeats included).
	CPU CPU `json:"cpu_ns"`
}

// PushResult is the push scenario.
type PushResult struct {
	ConfigType  string    `json:"config_type"`
	Credentials int       `json:"credentials"`
	Runs        []PushRun `json:"runs"`
	// Worst is the slowest run's AllPersisted; Complete whether every run reached every agent.
	Worst    time.Duration `json:"worst_ns"`
	Complete bool          `json:"complete"`
	Method   string        `json:"method"`
	// DropPushes is the fraction of pushes the agents lost on purpose; with it, Worst is the time to
	// full convergence, repairs included. HeartbeatInterval is the agents' heartbeat period.
	DropPushes        float64       `json:"drop_pushes,omitempty"`
	HeartbeatInterval time.Duration `json:"heartbeat_interval_ns,omitempty"`
}

func (r *Runner) push(ctx context.Context) error {
	res := &PushResult{ConfigType: "collectors", Credentials: len(r.credIDs), Complete: true,
		DropPushes: r.opts.DropPushes, HeartbeatInterval: r.opts.HeartbeatInterval,
		Method: "PUT returned -> " + map[string]string{"postgres": "max(host_config_apply_status.updated_at)", "config-api": "first host-list poll showing every ack"}[r.backend.Observer.Name()]}
	r.res.Push = res
	for round := 1; round <= r.opts.Pushes; round++ {
		run, err := r.pushOnce(ctx, round)
		res.Runs = append(res.Runs, run)
		if err != nil {
			res.Complete = false
			return err
		}
		res.Worst = max(res.Worst, run.AllPersisted)
	}
	return nil
}

func (r *Runner) pushOnce(ctx context.Context, round int) (PushRun, error) {
	var run PushRun
	before := r.quiesceInjects(ctx)
	sigBefore := r.signatures(ctx)
	cpu0 := r.cpuSnapshot()
	r.logf("push %d/%d: PUT collectors (%d credentials) to %d online agents", round, r.opts.Pushes, len(r.credIDs), r.opts.Agents)
	sent := time.Now()
	version, err := r.backend.API.PutEnvironmentConfig(ctx, r.envID, "collectors", r.collectors(round))
	if err != nil {
		return run, err
	}
	returned := time.Now()
	run.Version, run.PutLatency = version, returned.Sub(sent)

	var last observe.AckProgress
	doneAt, err := r.waitFor(ctx, fmt.Sprintf("push %d acks", round), r.pollInterval(), func(ctx context.Context) (bool, string, error) {
		p, err := r.backend.Observer.Acks(ctx, r.envID, "collectors", version)
		if err != nil {
			return false, "", err
		}
		last = p
		return p.Applied+p.Failed >= r.opts.Agents, fmt.Sprintf("%d/%d acks persisted", p.Applied+p.Failed, r.opts.Agents), nil
	})
	run.Applied, run.Failed = last.Applied, last.Failed
	run.CPU = r.cpuSince(cpu0)
	run.Signatures = -1
	if after := r.signatures(ctx); sigBefore >= 0 && after >= 0 {
		run.Signatures = after - sigBefore
	}
	if err != nil {
		return run, err
	}
	end := doneAt
	if !last.Last.IsZero() {
		end = last.Last
	}
	run.AllPersisted = max(0, end.Sub(returned))
	if run.AllPersisted > 0 {
		run.AcksPerSecond = float64(run.Applied) / run.AllPersisted.Seconds()
	}
	var recv []time.Duration
	for _, t := range r.fleet.Receipts("collectors", version) {
		recv = append(recv, t.Sub(sent))
	}
	run.Received = latency.Summarize(recv)
	times, err := r.backend.Observer.AckTimes(ctx, r.envID, "collectors", version)
	if err != nil {
		r.note("ack times: %v", err)
	}
	var persisted []time.Duration
	for _, t := range times {
		persisted = append(persisted, max(0, t.Sub(returned)))
	}
	run.Persisted = latency.Summarize(persisted)
	run.Injects, run.Decrypts = -1, -1
	if after := r.injects(ctx); before >= 0 && after >= 0 {
		run.Injects = after - before
		run.Decrypts = run.Injects * int64(len(r.credIDs))
	}
	if run.Failed > 0 {
		r.note("push %d: %d agents acknowledged failed", round, run.Failed)
	}
	r.logf("push %d/%d: version %d, PUT %s, all %d acks persisted %s after the PUT returned; %d inject request(s), %d signature(s)",
		round, r.opts.Pushes, version, run.PutLatency.Round(time.Millisecond), run.Applied+run.Failed,
		run.AllPersisted.Round(time.Millisecond), run.Injects, run.Signatures)
	return run, nil
}

// HeartbeatResult is the heartbeat scenario.
type HeartbeatResult struct {
	TargetRate float64       `json:"target_rate"`
	Duration   time.Duration `json:"duration_ns"`
	// Sent counts every heartbeat sent during the burst (background ones included).
	Sent        int64   `json:"sent"`
	OfferedRate float64 `json:"offered_per_second"`
	// Landed is the growth of the heartbeat sequence numbers in the hosts table from the burst's start
	// until the last sent heartbeat landed; LandedRate divides it by that time.
	Landed     int64         `json:"landed"`
	LandedRate float64       `json:"landed_per_second"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	// Lag is from the end of sending until the last heartbeat landed.
	Lag time.Duration `json:"lag_ns"`
	// Processed counts heartbeats ack-ingest took off its JetStream consumer and acknowledged (written,
	// or superseded by a newer one of the same host in its batch); Stored those the stream accepted.
	// The stream is a work queue, so Stored - Processed is what ack-ingest had not yet acknowledged;
	// against a keep-last stream (earlier releases) it also counts the heartbeats the stream replaced
	// by a newer one of the same agent before ack-ingest read them.
	Processed     int64   `json:"processed"`
	ProcessedRate float64 `json:"processed_per_second"`
	Stored        int64   `json:"stored"`
	// CPU used from the first heartbeat of the burst until the last one landed.
	CPU CPU `json:"cpu_ns"`
}

func (r *Runner) heartbeat(ctx context.Context) error {
	obs := r.backend.Observer
	// consumer reads the progress of ack-ingest's heartbeats durable.
	consumer := func(ctx context.Context) (backendstats.ConsumerProgress, error) {
		return backendstats.Consumer(ctx, r.backend.JS, protocol.HeartbeatsStream, backendstats.HeartbeatsDurable)
	}
	var cons0 *backendstats.ConsumerProgress
	if r.backend.JS != nil {
		if c, err := consumer(ctx); err != nil {
			r.note("heartbeat consumer: %v", err)
		} else {
			cons0 = &c
		}
	}
	sent0 := r.fleet.Stats().HeartbeatsSent
	base, err := obs.HeartbeatSeqSum(ctx, r.envID)
	if err != nil {
		return err
	}
	r.logf("heartbeat: %.0f/s for %s over %d agents", r.opts.HeartbeatRate, r.opts.Duration, r.opts.Agents)
	cpu0 := r.cpuSnapshot()
	start := time.Now()
	burstDone := make(chan fleet.BurstResult, 1)
	go func() { burstDone <- r.fleet.SendHeartbeats(ctx, r.opts.HeartbeatRate, r.opts.Duration) }()
	tick := time.NewTicker(2 * time.Second)
	var burst fleet.BurstResult
wait:
	for {
		select {
		case burst = <-burstDone:
			break wait
		case <-tick.C:
			el := time.Since(start).Seconds()
			if cons0 != nil {
				// ack-ingest's progress from its consumer: cheaper than summing every host (see below).
				if c, err := consumer(ctx); err == nil {
					done := c.AckFloor - cons0.AckFloor
					r.logf("  heartbeat: %d sent, %d processed by ack-ingest (%.0f/s), %d waiting", r.fleet.Stats().HeartbeatsSent-sent0, done, float64(done)/el, c.NumPending)
				}
			} else if sum, err := obs.HeartbeatSeqSum(ctx, r.envID); err == nil {
				r.logf("  heartbeat: %d sent, %d landed (%.0f/s landed)", r.fleet.Stats().HeartbeatsSent-sent0, sum-base, float64(sum-base)/el)
			}
		}
	}
	tick.Stop()
	sentEnd := time.Now()
	if err := r.fleet.Flush(30 * time.Second); err != nil {
		return fmt.Errorf("flush heartbeats: %w", err)
	}
	var target int64
	for _, seq := range burst.Final {
		target += seq
	}
	h := &HeartbeatResult{TargetRate: r.opts.HeartbeatRate, Duration: r.opts.Duration, Sent: r.fleet.Stats().HeartbeatsSent - sent0}
	h.OfferedRate = float64(h.Sent) / sentEnd.Sub(start).Seconds()
	r.res.Heartbeat = h
	landed := func(ctx context.Context) (bool, string, error) {
		sum, err := obs.HeartbeatSeqSum(ctx, r.envID)
		h.Landed = sum - base
		return sum >= target, fmt.Sprintf("%d of %d landed", sum-base, target-base), err
	}
	check := landed
	if cons0 != nil {
		// The sum of the hosts' heartbeat counters reads every host of the environment (about 0.2 s of
		// PostgreSQL at 100,000 hosts); polled until the last heartbeat lands, it took a third of a core
		// from the stack under test. ack-ingest's consumer says more cheaply when the stream is
		// drained: only then is the sum read, to confirm every heartbeat landed (and polled on as
		// before if not).
		check = func(ctx context.Context) (bool, string, error) {
			c, err := consumer(ctx)
			if err != nil {
				return false, "", err
			}
			if c.NumPending > 0 || c.NumAckPending > 0 {
				return false, fmt.Sprintf("ack-ingest processed %d, %d waiting, %d in hand", c.AckFloor-cons0.AckFloor, c.NumPending, c.NumAckPending), nil
			}
			return landed(ctx)
		}
	}
	doneAt, err := r.waitFor(ctx, "heartbeats landing", r.pollInterval()/2, check)
	if err != nil {
		return err
	}
	h.CPU = r.cpuSince(cpu0)
	h.Elapsed = doneAt.Sub(start)
	h.Lag = doneAt.Sub(sentEnd)
	h.Landed = target - base
	h.LandedRate = float64(h.Landed) / h.Elapsed.Seconds()
	if cons0 != nil {
		// ack-ingest acknowledges after writing; give the last acks a moment to register.
		time.Sleep(200 * time.Millisecond)
		if c, err := consumer(ctx); err == nil {
			h.Processed = int64(c.AckFloor - cons0.AckFloor)
			h.Stored = int64(c.StreamLastSeq - cons0.StreamLastSeq)
			h.ProcessedRate = float64(h.Processed) / h.Elapsed.Seconds()
		}
	}
	r.logf("heartbeat: sent %d (%.0f/s offered); %d landed in %s (%.0f/s), lag %s after sending stopped; ack-ingest processed %d (%.0f/s)",
		h.Sent, h.OfferedRate, h.Landed, h.Elapsed.Round(time.Millisecond), h.LandedRate, h.Lag.Round(time.Millisecond), h.Processed, h.ProcessedRate)
	if h.Stored > 0 && h.Processed < h.Stored*95/100 {
		r.note("heartbeat: the stream stored %d heartbeats but ack-ingest acknowledged %d: the rest were not acknowledged when the last one landed, or (a keep-last stream) were replaced by a newer heartbeat of the same agent before ack-ingest read them", h.Stored, h.Processed)
	}
	return nil
}

// ParseScenarios parses a comma-separated scenario list.
func ParseScenarios(list string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case "":
		case Push, Herd, Heartbeat, Rollout, RolloutFail:
			out[s] = true
		default:
			return nil, fmt.Errorf("unknown scenario %q (push, herd, heartbeat, rollout, rollout-fail)", s)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no scenario selected")
	}
	return out, nil
}
