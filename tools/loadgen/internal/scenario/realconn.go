package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/configsync/configsync/tools/loadgen/internal/configapi"
	"github.com/configsync/configsync/tools/loadgen/internal/fleet"
	"github.com/configsync/configsync/tools/loadgen/internal/procstat"
)

// RealConnections configures the real-connection mode: every simulated agent connects on its own, as
// its own NATS user (the creds config-api issued at its registration), over TLS when the stack has it.
type RealConnections struct {
	// SourceAddrs spreads the connections over this many loopback source addresses (fleet.ConnectOptions).
	SourceAddrs int
	// Concurrency is the most connections being established at once.
	Concurrency int
	// Settle is how long the connected, idle fleet is watched to measure the server's idle cost.
	Settle time.Duration
}

// ConnectStormResult is the connect storm of a real-connection fleet, measured before the herd window
// opens: the handshakes, and what the connections cost the NATS server. With a private devstack that is
// nats-server's own process; with a stack that embeds the server in the services' process (or an
// external one) it is the service processes', where the server alone works during the storm and holds
// the connections.
type ConnectStormResult struct {
	fleet.ConnectStorm
	// CPU used from the first connect until every agent had subscribed its commands, by group.
	CPU CPU `json:"cpu_ns"`
	// RSSBefore and RSSAfter are nats-server's resident memory (see above) before the storm and once
	// every agent had subscribed; RSSPer10k is the growth per 10,000 connections.
	RSSBefore uint64 `json:"rss_before_bytes"`
	RSSAfter  uint64 `json:"rss_after_bytes"`
	RSSPer10k uint64 `json:"rss_per_10k_conns_bytes"`
	// CPUPer10k is nats-server's CPU (CPU.NATSServer) during the storm per 10,000 connections.
	CPUPer10k time.Duration `json:"cpu_per_10k_conns_ns"`
	// IdleCPUPer10k is nats-server's CPU per second, per 10,000 connections, while the connected fleet
	// sat idle for Settle (no heartbeats yet): the cost of holding the connections.
	IdleCPUPer10k time.Duration `json:"idle_cpu_per_10k_conns_per_s_ns"`
	Settle        time.Duration `json:"settle_ns"`
	// Subscribed is how long subscribing every agent's commands took after the storm.
	Subscribed time.Duration `json:"subscribed_ns"`
}

// register registers the fleet's hosts, keeping every agent's NATS credentials in real-connection mode.
func (r *Runner) register(ctx context.Context, ids []string, progress func(int)) (configapi.Registration, error) {
	var opts []configapi.RegisterOption
	if r.opts.Scenarios[RolloutFail] && len(ids) > 0 {
		// The failing rollout's canary: one labelled host that never refuses.
		opts = append(opts, configapi.WithLabels(map[string]map[string]string{ids[0]: {CanaryLabel: CanaryValue}}))
	}
	if r.opts.Real == nil {
		return r.backend.API.RegisterHosts(ctx, r.envID, ids, r.opts.RegisterConcurrency, progress, opts...)
	}
	reg, err := r.backend.API.RegisterHostsWithCredentials(ctx, r.envID, ids, r.opts.RegisterConcurrency, progress, opts...)
	r.identities = reg.Credentials
	return reg, err
}

// newFleet connects the fleet: multiplexed over Conns connections, or one connection per agent. In
// real-connection mode it also subscribes every agent's commands and records the connect storm, so the
// herd window opens on a connected fleet.
func (r *Runner) newFleet(ids []string) (*fleet.Fleet, error) {
	cfg := fleet.Config{
		URL: r.backend.NATSURL, CredsFile: r.backend.CredsFile, CAFile: r.backend.NATSCA, Conns: r.opts.Conns, Subscriptions: r.opts.Subscriptions,
		FetchTimeout: r.opts.FetchTimeout, HeartbeatInterval: r.opts.HeartbeatInterval, DropPushes: r.opts.DropPushes,
	}
	if len(r.failing) > 0 {
		cfg.Refuse = r.refusal
	}
	if r.opts.Real == nil {
		f, err := fleet.New(cfg, ids)
		if err != nil {
			return nil, err
		}
		if err := f.Subscribe(); err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
	identities := make([]fleet.Identity, len(ids))
	for i, id := range ids {
		identities[i] = fleet.Identity{AgentID: id, Creds: r.identities[id]}
	}
	r.identities = nil // the seeds are needed only to connect
	rssBefore := r.natsRSS()
	cpu0 := r.cpuSnapshot()
	r.logf("connect storm: %d agents, each its own NATS user and connection (%d at a time, %d source addresses)",
		len(ids), r.opts.Real.Concurrency, r.opts.Real.SourceAddrs)
	start, last := time.Now(), time.Now()
	f, storm, err := fleet.Connect(cfg, identities, fleet.ConnectOptions{
		SourceAddrs: r.opts.Real.SourceAddrs, Concurrency: r.opts.Real.Concurrency,
		Progress: func(done int) {
			if time.Since(last) >= 2*time.Second {
				last = time.Now()
				r.logf("  connect: %d/%d (%.0f/s)", done, len(ids), float64(done)/time.Since(start).Seconds())
			}
		},
	})
	res := &ConnectStormResult{ConnectStorm: storm, RSSBefore: rssBefore}
	r.res.ConnectStorm = res
	if err != nil {
		return nil, err
	}
	subStart := time.Now()
	if err := f.Subscribe(); err != nil {
		f.Close()
		return nil, err
	}
	res.Subscribed = time.Since(subStart)
	res.CPU = r.cpuSince(cpu0)
	res.RSSAfter = r.natsRSS()
	per10k := float64(len(ids)) / 10000
	if res.RSSAfter > res.RSSBefore {
		res.RSSPer10k = uint64(float64(res.RSSAfter-res.RSSBefore) / per10k)
	}
	res.CPUPer10k = time.Duration(float64(res.CPU.NATSServer()) / per10k)
	r.logf("connect storm: %d connected in %s (%.0f/s, connect p50 %s p99 %s), %d failed; commands subscribed in %s",
		storm.Conns-storm.Failed, storm.Elapsed.Round(time.Millisecond), storm.PerSecond, storm.Latency.P50, storm.Latency.P99,
		storm.Failed, res.Subscribed.Round(time.Millisecond))
	if s := r.opts.Real.Settle; s > 0 {
		idle0 := r.cpuSnapshot()
		time.Sleep(s) // nothing to wait for: this is the idle window being measured
		idle := r.cpuSince(idle0)
		res.Settle = s
		res.IdleCPUPer10k = time.Duration(float64(idle.NATSServer()) / s.Seconds() / per10k)
	}
	r.logf("connect storm: nats-server RSS %s → %s (%s per 10,000 connections), CPU %s in the storm (%s per 10,000), idle %s/s per 10,000",
		mib(res.RSSBefore), mib(res.RSSAfter), mib(res.RSSPer10k), res.CPU.NATSServer().Round(time.Millisecond), res.CPUPer10k.Round(time.Millisecond),
		res.IdleCPUPer10k.Round(time.Microsecond))
	return f, nil
}

// natsRSS is nats-server's resident memory: its own process's when the stack runs one, else the
// summed service processes' (0 when unknown).
func (r *Runner) natsRSS() uint64 {
	pids := r.backend.Processes
	if r.backend.NATSServer != 0 {
		pids = []int{r.backend.NATSServer}
	}
	var sum uint64
	for _, pid := range pids {
		if m, err := procstat.Read(pid); err == nil {
			sum += m.RSS
		}
	}
	return sum
}

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
