// Package agentrun is the ConfigSync agent as a library: Run starts everything the agent binary runs
// (config sync, hot-reloaded components, heartbeats) and returns when its context ends. cmd/agent,
// tools/devstack and the end-to-end tests all start agents through it.
package agentrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/configsync/configsync/agent/internal/changedetect"
	"github.com/configsync/configsync/agent/internal/command"
	"github.com/configsync/configsync/agent/internal/configcache"
	"github.com/configsync/configsync/agent/internal/configsync"
	"github.com/configsync/configsync/agent/internal/credsrenew"
	"github.com/configsync/configsync/agent/internal/healthcheck"
	"github.com/configsync/configsync/agent/internal/inventory"
	"github.com/configsync/configsync/agent/internal/labels"
	"github.com/configsync/configsync/agent/internal/logcollect"
	"github.com/configsync/configsync/agent/internal/logrelay"
	"github.com/configsync/configsync/agent/internal/metrics"
	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/agent/internal/scheduler"
	"github.com/configsync/configsync/agent/internal/selflog"
	"github.com/configsync/configsync/agent/internal/tracing"
	"github.com/configsync/configsync/agent/internal/transport"
	"github.com/configsync/configsync/agent/internal/trust"
	"github.com/configsync/configsync/agent/internal/watchfiles"
	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Observation kinds, published on protocol.ObservationSubject(agentID, kind).
const (
	KindMetrics   = "metrics"
	KindChanges   = "changes"
	KindFiles     = "files"
	KindHealth    = "health"
	KindInventory = "inventory"
	KindProcesses = "processes"
	KindTraces    = "traces"
)

// Scheduler task names.
const (
	taskHeartbeat       = "heartbeat"
	taskMetrics         = "metrics"
	taskInventory       = "inventory"
	taskProcesses       = "processes"
	taskWatchFiles      = "watch_files"
	taskChangeDetection = "change_detection"
	taskHealthcheck     = "healthcheck"
)

// Built-in intervals, used until the intervals config (or a local default) says otherwise.
const (
	defaultMetricsInterval   = 60 * time.Second
	defaultInventoryInterval = 10 * time.Minute
	defaultHeartbeatInterval = 30 * time.Second
	defaultProcessesInterval = 5 * time.Minute
)

// shutdownTimeout bounds flushing NATS on stop.
const shutdownTimeout = 3 * time.Second

// hooks let tests observe the agent from inside.
type hooks struct {
	observe func(kind string, v any)
	applied func(configsync.Resolved, error)
	ready   func(*agent) // after startup application, before the scheduler starts
	// keysRefetchJitter, if set, replaces keysRefetchJitter.
	keysRefetchJitter *time.Duration
}

// When a push names a key the agent does not trust, it fetches once (the reply carries the resolver's
// signed trusted-key list), at most every keysRefetchEvery, after a random delay below
// keysRefetchJitter: a rotation reaches the whole fleet with the same push, and the jitter spreads the
// fleet's fetches.
const (
	keysRefetchEvery  = 5 * time.Minute
	keysRefetchJitter = 30 * time.Second
)

type agent struct {
	cfg     Config
	pol     *policy.Policy
	log     *slog.Logger
	level   *slog.LevelVar
	shipper *selflog.Shipper

	cache   *configcache.Cache
	trust   *trust.Verifier
	sched   *scheduler.Scheduler
	labels  *labels.Manager
	metrics *metrics.Task
	changes *changedetect.Scanner
	files   *watchfiles.Scanner
	health  *healthcheck.Runner
	logs    *logcollect.Renderer
	tracing *tracing.Provider
	tracer  trace.Tracer
	handler *command.ConfigHandler
	syncer  *configsync.Syncer
	client  atomic.Pointer[transport.Client]

	refetch    chan struct{}
	keysMu     sync.Mutex
	keysAsked  time.Time   // the last fetch asked for because of an untrusted key
	keysTimer  *time.Timer // that fetch's delay; stopped when the agent stops
	heartbeats atomic.Int64
	// heartbeatEvery is the heartbeat task's current period in milliseconds, reported in every
	// heartbeat so the backend judges this host's liveness by it.
	heartbeatEvery atomic.Int64
	memLimit       atomic.Int64 // bytes applied with debug.SetMemoryLimit (0: none)
}

// Run starts the agent and blocks until ctx is done, then stops cleanly. It fails only on a bad
// Config or an unusable data directory: a backend that is away never stops the agent.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("agentrun: %w", err)
	}
	a, err := newAgent(cfg)
	if err != nil {
		return err
	}
	return a.run(ctx)
}

func newAgent(cfg Config) (*agent, error) {
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = 10 * time.Second
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if len(cfg.DiskPaths) == 0 {
		cfg.DiskPaths = []string{"/"}
	}
	if cfg.AgentVersion == "" {
		cfg.AgentVersion = Version
	}
	if cfg.LogOutput == nil {
		cfg.LogOutput = os.Stderr
	}
	if cfg.hooks == nil {
		cfg.hooks = &hooks{}
	}
	a := &agent{cfg: cfg, level: new(slog.LevelVar), refetch: make(chan struct{}, 1)}
	pol, err := cfg.buildPolicy()
	if err != nil {
		return nil, fmt.Errorf("agentrun: %w", err)
	}
	a.pol = pol
	lvl, err := selflog.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("agentrun: log_level: %w", err)
	}
	a.level.Set(lvl)
	a.log, a.shipper = selflog.New(cfg.LogOutput, cfg.LogFormat, a.level, cfg.AgentID)
	a.log = a.log.With("agent_id", cfg.AgentID)

	keys, err := cfg.Trust.loadKeySet()
	if err != nil {
		return nil, fmt.Errorf("agentrun: %w", err)
	}
	a.trust = trust.Open(cfg.AgentID, keys, cfg.Trust.InsecureSkipVerify, cfg.DataDir, a.log)
	var verifyCached func(configcache.Stored) error
	if !a.trust.Skip() {
		verifyCached = a.trust.Cached
	}
	if a.cache, err = configcache.OpenVerified(cfg.DataDir, a.log, verifyCached); err != nil {
		return nil, fmt.Errorf("agentrun: %w", err)
	}
	a.tracing = tracing.New(func(s tracing.Span) { a.observe(KindTraces, s) })
	a.tracer = a.tracing.Tracer()
	a.sched = scheduler.New(a.log)
	a.labels = labels.NewManager(a.log, pol)
	a.metrics = metrics.NewTask(a.log, pol, metrics.SystemCollectors(cfg.ProcRoot, cfg.DiskPaths), a.labels.Labels,
		func(r metrics.Report) { a.observe(KindMetrics, r) })
	a.changes = changedetect.NewScanner(a.log, pol, func(r changedetect.Report) { a.observe(KindChanges, r) })
	a.files = watchfiles.NewScanner(a.log, pol, func(r watchfiles.Report) { a.observe(KindFiles, r) })
	a.health = healthcheck.NewRunner(a.log, a.healthChecks(), func(r healthcheck.Report) { a.observe(KindHealth, r) })
	host, port, err := net.SplitHostPort(cfg.LogRelayAddr)
	if err != nil {
		host, port = "127.0.0.1", "24280"
	}
	a.logs = logcollect.NewRenderer(a.log, pol, cfg.DataDir, a.logTagPrefix(), host, port)

	a.handler = command.NewConfigHandler(command.Options{
		AgentID:      cfg.AgentID,
		Cache:        a.cache,
		Acks:         ackPublisher{a},
		Log:          a.log,
		LocalDefault: func(t string) json.RawMessage { return cfg.Defaults[t] },
		Check:        a.checkPolicy,
		Verify: func(cmd protocol.Command) error {
			err := a.trust.Config(cmd.ConfigType, cmd.Version, cmd.Payload, cmd.SecretFields, cmd.Statement)
			if errors.Is(err, signing.ErrUntrustedKey) {
				a.refetchForKeys()
			}
			return err
		},
		Tracer: a.tracer,
	})
	a.registerCallbacks()
	a.syncer = &configsync.Syncer{
		Handler:      a.handler,
		Cache:        a.cache,
		Fetcher:      fetcher{a},
		Local:        cfg.Defaults,
		Log:          a.log,
		FetchTimeout: cfg.FetchTimeout,
		Tracer:       a.tracer,
		Check:        a.checkPolicy,
		Trust:        a.trust,
		OnApplied:    cfg.hooks.applied,
	}

	a.sched.Add(taskHeartbeat, defaultHeartbeatInterval, a.traced(taskHeartbeat, a.heartbeat))
	a.heartbeatEvery.Store(defaultHeartbeatInterval.Milliseconds())
	a.sched.Add(taskMetrics, defaultMetricsInterval, a.traced(taskMetrics, a.metrics.Run))
	a.sched.Add(taskInventory, defaultInventoryInterval, a.traced(taskInventory, a.inventory))
	a.sched.Add(taskProcesses, defaultProcessesInterval, a.traced(taskProcesses, a.processes))
	a.sched.Add(taskWatchFiles, defaultInventoryInterval, a.traced(taskWatchFiles, a.files.Scan))
	a.sched.Add(taskChangeDetection, 0, a.traced(taskChangeDetection, a.changes.Scan))
	a.sched.Add(taskHealthcheck, healthcheck.DefaultInterval, a.traced(taskHealthcheck, a.health.Run))
	return a, nil
}

func (a *agent) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer a.stopKeysRefetch()
	a.log.Info("agent starting", "version", a.cfg.AgentVersion, "data_dir", a.cfg.DataDir)
	a.warnIfRoot()
	lim := a.pol.Limits()
	a.log.Info("local policy in force", "commands", len(a.cfg.Policy.Commands), "read_paths", a.cfg.Policy.ReadPaths,
		"env", len(a.cfg.Policy.Env), "upload_file_contents", a.pol.UploadFileContents(),
		"network_allow", len(a.cfg.Policy.Network.Allow), "min_interval", lim.MinInterval,
		"max_file_size", lim.MaxFileSize, "max_files", lim.MaxFiles)

	// With a creds file the agent signs in with whichever of it and its renewed copy in the data
	// directory is newer, and renews them before they expire.
	var renewer *credsrenew.Renewer
	extra := a.cfg.NATSOptions
	if a.cfg.NATS.CredsFile != "" {
		var err error
		if renewer, err = credsrenew.Open(a.cfg.NATS.CredsFile, a.cfg.DataDir, a.cfg.AgentID, a.log); err != nil {
			return fmt.Errorf("agentrun: %w", err)
		}
		extra = append([]nats.Option{renewer.Option()}, extra...)
	}
	client, err := transport.Connect(transport.Options{
		AgentID: a.cfg.AgentID, URL: a.cfg.NATS.URL,
		User: a.cfg.NATS.User, Password: a.cfg.NATS.Password, Token: a.cfg.NATS.Token,
		TLS: a.cfg.NATS.transportTLS(), Log: a.log, OnReconnect: a.reconnected, Extra: extra,
	})
	if err != nil {
		// Only a malformed URL or unreadable creds file gets here; the server being down does not.
		return fmt.Errorf("agentrun: %w", err)
	}
	a.client.Store(client)
	a.shipper.SetPublisher(client.Publish)
	if _, err := client.SubscribeCommands(func(data []byte, h nats.Header) {
		a.handler.HandleMessage(transport.TraceContext(ctx, h), data)
	}); err != nil {
		client.Close(context.Background())
		return fmt.Errorf("agentrun: %w", err)
	}

	// Collected logs (Fluent Bit) reach NATS through the agent's own TLS connection.
	var relay *logrelay.Relay
	if a.cfg.LogRelayAddr != "" {
		relay, err = logrelay.Start(a.cfg.LogRelayAddr, a.logTagPrefix(), func() int { return int(client.Conn().MaxPayload()) },
			client.Publish, a.log)
		if err != nil {
			// Not fatal: config sync works without log shipping.
			a.log.Warn("log relay not started; collected logs are not shipped", "addr", a.cfg.LogRelayAddr, "error", err)
		}
	}

	var wg sync.WaitGroup
	defer func() {
		cancel()
		a.sched.Wait()
		wg.Wait()
		sctx, scancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer scancel()
		if relay != nil {
			_ = relay.Close(sctx)
		}
		// Drain first: commands still pending are handled (and acked) while the components exist.
		client.Close(sctx)
		a.shipper.SetPublisher(func(string, []byte) error { return errors.New("agent stopped") })
		a.labels.Close()
		a.pol.CloseIdleConnections()
		_ = a.tracing.Shutdown(sctx)
		a.log.Info("agent stopped")
	}()

	if j := a.cfg.BootJitter; j > 0 {
		d := time.Duration(rand.Int64N(int64(j)))
		a.log.Info("boot jitter before config fetch", "sleep", d)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
	}

	fetched := a.syncer.Startup(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if a.cfg.hooks.ready != nil {
		a.cfg.hooks.ready(a)
	}
	a.sched.Start(ctx)
	wg.Go(func() { a.syncer.Background(ctx, !fetched, a.refetch) })
	if renewer != nil {
		wg.Go(func() {
			// Reconnecting at once with the new JWT avoids the server closing the connection when the
			// old one expires.
			renewer.Run(ctx, client.Conn(), func() { _ = client.Conn().ForceReconnect() })
		})
	}
	a.log.Info("agent running", "config_from_backend", fetched, "config_hash", a.cache.ConfigHash(),
		"config_version", a.cache.ConfigVersion())
	<-ctx.Done()
	a.log.Info("agent stopping")
	return nil
}

// checkPolicy is the handler's and the syncer's pre-apply check (see checkPolicy).
func (a *agent) checkPolicy(configType string, data json.RawMessage) error {
	return checkPolicy(a.pol, configType, data)
}

// warnIfRoot says loudly that the agent runs as root: whatever the policy allows, a config then acts
// with every right on the host. deploy/systemd runs it as an unprivileged user instead.
func (a *agent) warnIfRoot() {
	if os.Geteuid() != 0 {
		return
	}
	if a.cfg.AllowRoot {
		a.log.Info("agent running as root (allow_root is set)")
		return
	}
	a.log.Warn("AGENT RUNNING AS ROOT: everything the local policy allows runs with full rights on this host; "+
		"run it as an unprivileged user (deploy/systemd/configsync-agent.service) or set allow_root: true",
		"euid", 0)
}

// reconnected runs after every NATS reconnect: acks in flight when the connection dropped are lost, so
// the newest ones are published again, and pushes may have been missed, so a fetch is requested.
func (a *agent) reconnected() {
	a.requestRefetch()
	go a.handler.RepublishAcks()
}

// refetchForKeys asks for one fetch, after a random delay, unless one was asked for less than
// keysRefetchEvery ago: a push signed by a key this agent does not trust may be the first sign of a
// key rotation, whose signed trusted-key list the fetch reply carries (a forgery costs one fetch).
func (a *agent) refetchForKeys() {
	a.keysMu.Lock()
	now := time.Now()
	if !a.keysAsked.IsZero() && now.Sub(a.keysAsked) < keysRefetchEvery {
		a.keysMu.Unlock()
		return
	}
	a.keysAsked = now
	a.keysMu.Unlock()
	jitter := keysRefetchJitter
	if h := a.cfg.hooks; h != nil && h.keysRefetchJitter != nil {
		jitter = *h.keysRefetchJitter
	}
	var d time.Duration
	if jitter > 0 {
		d = rand.N(jitter)
	}
	a.log.Info("a config names a key this agent does not trust; fetching the trusted-key list", "in", d.String())
	a.keysMu.Lock()
	a.keysTimer = time.AfterFunc(d, a.requestRefetch)
	a.keysMu.Unlock()
}

// stopKeysRefetch cancels a pending key fetch (the agent is stopping).
func (a *agent) stopKeysRefetch() {
	a.keysMu.Lock()
	defer a.keysMu.Unlock()
	if a.keysTimer != nil {
		a.keysTimer.Stop()
	}
}

// requestRefetch asks the background syncer for a fetch (after a reconnect pushes may have been
// missed).
func (a *agent) requestRefetch() {
	select {
	case a.refetch <- struct{}{}:
	default:
	}
}

func (a *agent) observe(kind string, v any) {
	if h := a.cfg.hooks.observe; h != nil {
		h(kind, v)
	}
	c := a.client.Load()
	if c == nil {
		return
	}
	if err := c.Observe(kind, v); err != nil {
		a.log.Debug("observation not published", "kind", kind, "error", err)
	}
}

func (a *agent) traced(name string, fn scheduler.Func) scheduler.Func {
	return func(ctx context.Context) {
		ctx, span := a.tracer.Start(ctx, "task."+name, trace.WithAttributes(attribute.String("task", name)))
		defer span.End()
		fn(ctx)
	}
}

func (a *agent) heartbeat(context.Context) {
	hb := protocol.Heartbeat{
		AgentID:        a.cfg.AgentID,
		SentAt:         time.Now().UTC(),
		AgentVersion:   a.cfg.AgentVersion,
		ConfigHash:     a.cache.ConfigHash(),
		ConfigVersion:  a.cache.ConfigVersion(),
		ConfigVersions: a.cache.ConfigVersions(),

		HeartbeatIntervalMS: a.heartbeatEvery.Load(),
	}
	a.heartbeats.Add(1)
	c := a.client.Load()
	if c == nil {
		return
	}
	if err := c.PublishHeartbeat(hb); err != nil {
		a.log.Warn("heartbeat not published", "error", err)
	}
}

func (a *agent) inventory(context.Context) {
	a.observe(KindInventory, inventory.Collect(a.cfg.ProcRoot, a.cfg.AgentVersion, a.labels.Labels()))
}

func (a *agent) processes(context.Context) {
	p, err := inventory.CollectProcesses(a.cfg.ProcRoot, 10)
	if err != nil {
		a.log.Warn("process list unavailable", "error", err)
		return
	}
	a.observe(KindProcesses, p)
}

func (a *agent) healthChecks() []healthcheck.Check {
	return []healthcheck.Check{
		{Name: "nats", Func: func(context.Context) error {
			if c := a.client.Load(); c == nil || !c.Connected() {
				return errors.New("not connected to NATS")
			}
			return nil
		}},
		{Name: "data_dir", Func: func(context.Context) error {
			f, err := os.CreateTemp(a.cfg.DataDir, ".health-*")
			if err != nil {
				return fmt.Errorf("data directory not writable: %w", err)
			}
			name := f.Name()
			f.Close()
			return os.Remove(name)
		}},
		{Name: "collectors", Func: func(context.Context) error {
			if n := a.metrics.LastFailures(); n > 0 {
				return fmt.Errorf("%d collectors failed in the last metrics run", n)
			}
			return nil
		}},
		{Name: "config_cache", Func: func(context.Context) error {
			if _, err := os.Stat(a.cache.Path()); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		}},
	}
}

// ackPublisher and fetcher bind the transport lazily: the handler exists before the connection.
type ackPublisher struct{ a *agent }

func (p ackPublisher) PublishAck(ctx context.Context, ack protocol.Ack) error {
	c := p.a.client.Load()
	if c == nil {
		return errors.New("not connected")
	}
	return c.PublishAck(ctx, ack)
}

type fetcher struct{ a *agent }

func (f fetcher) Fetch(ctx context.Context) (*protocol.FetchReply, error) {
	c := f.a.client.Load()
	if c == nil {
		return nil, errors.New("not connected")
	}
	return c.Fetch(ctx)
}

// logTagPrefix is the tag prefix of collected logs, and so their subject prefix.
func (a *agent) logTagPrefix() string {
	return protocol.AgentSubjectPrefix + a.cfg.AgentID + ".applogs"
}
