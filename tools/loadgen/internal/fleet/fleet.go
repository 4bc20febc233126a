// Package fleet simulates many ConfigSync agents in one process, speaking the real protocol of
// libs/protocol: the startup fetch (request-reply, with boot jitter), config_update commands answered
// with acks on each agent's own ack subject, and periodic heartbeats carrying the config_hash and
// versions of a cache kept exactly as a real agent keeps it.
//
// Agents are multiplexed over a small number of NATS connections (agent i publishes on connection
// i mod Conns). Commands arrive in one of two ways:
//
//   - Wildcard (default): every connection holds ONE subscription to configsync.cmd.* in the queue
//     group "configsync-loadgen", so each command reaches exactly one connection of the fleet, which
//     hands it to the addressed agent by the subject's last token (Router). This keeps the fleet's
//     subscription count at Conns, and the per-message cost on the server is one match plus one
//     delivery, as with real agents.
//   - PerAgent: every agent subscribes to its own configsync.cmd.<id> on its connection, so the server
//     holds N subscriptions, as it does with a real fleet. All of a connection's subscriptions feed one
//     channel, so the client needs no goroutine per agent.
//
// Either way, one worker per connection applies commands in arrival order.
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/tools/loadgen/internal/latency"
)

// SubscriptionMode is how the fleet receives commands.
type SubscriptionMode string

// Subscription modes.
const (
	Wildcard SubscriptionMode = "wildcard"
	PerAgent SubscriptionMode = "per-agent"
)

// QueueGroup is the queue group of the fleet's wildcard command subscriptions.
const QueueGroup = "configsync-loadgen"

// Config configures a fleet.
type Config struct {
	// URL of the NATS server; CredsFile, when set, a NATS credentials file every connection uses (the
	// services' user: per-agent users would need a connection each).
	URL       string
	CredsFile string
	// CAFile, when set, is the CA the servers' TLS certificates are verified with.
	CAFile string
	// Conns is the number of NATS connections the agents share (at least 1).
	Conns int
	// Subscriptions: Wildcard (default) or PerAgent.
	Subscriptions SubscriptionMode
	// FetchTimeout bounds one startup fetch (default 10 s).
	FetchTimeout time.Duration
	// HeartbeatInterval is each agent's background heartbeat period; 0 disables background heartbeats.
	HeartbeatInterval time.Duration
	// AgentVersion is the base of the agent_version reported in heartbeats (default "loadgen/1.0.0").
	AgentVersion string
	// Name prefixes the NATS connection names (default "configsync-loadgen").
	Name string
	// DropPushes is the fraction (0..1) of pushes lost at the agents: for that share of agents, the
	// first config_update of each (type, version) is dropped unanswered, as if the network lost it; a
	// later one of the same version (an anti-entropy repair) is applied. The agent keeps heartbeating
	// what it really holds, so the backend sees it behind.
	DropPushes float64
	// Refuse, when set, is asked about every config_update an agent receives (a deletion excepted) and
	// plays the agent's local policy: a non-empty answer makes the agent refuse the config, acknowledge
	// its version failed with that text and keep what it held, as a real agent does when its policy
	// refuses a config (for example a command label on a host whose policy.commands is empty).
	Refuse func(agentID, configType string, payload json.RawMessage) string
}

// Fleet is a set of simulated agents and the connections they share.
type Fleet struct {
	cfg     Config
	conns   []*nats.Conn
	replies []*replyMux // one per connection
	agents  []*Agent
	router  *Router
	table   *entryTable
	cmdCh   []chan *nats.Msg
	subs    []*nats.Subscription

	fetchLatency latency.Recorder
	// fetchTimeline: every successful first fetch by when it began, from the boot.
	fetchTimeline latency.Timeline
	counters      counters
	errMu         sync.Mutex
	fetchErrors   map[string]int64

	workers sync.WaitGroup
	bgStop  context.CancelFunc
	bgDone  sync.WaitGroup

	retry retryState // agents' fetch retries (retry.go)

	// perAgentConns: every agent has its own connection (Connect), conns[i] being agent i's.
	perAgentConns bool
	// built holds the agents once they are all built: the reconnect handlers (on the connections'
	// goroutines) read them from here.
	built atomic.Pointer[[]*Agent]
}

type counters struct {
	fetchOK, fetchFailed, fetchTypeErrors           atomic.Int64
	commands, applied, stale, rejected, malformed   atomic.Int64
	foreign, acksSent, ackErrors                    atomic.Int64
	heartbeatsSent, heartbeatErrors, droppedByConns atomic.Int64
	pushesDropped, refused, repeated                atomic.Int64
	reconnects, acksRepublished                     atomic.Int64
}

// New connects Conns connections and builds one agent per id (ids must be valid agent ids). Commands
// are not received until Start.
func New(cfg Config, agentIDs []string) (*Fleet, error) {
	cfg, err := withDefaults(cfg, agentIDs)
	if err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, table: newEntryTable(), fetchErrors: map[string]int64{}}
	for i := range cfg.Conns {
		opts := f.baseOptions(fmt.Sprintf("%s-%d", cfg.Name, i))
		if cfg.CredsFile != "" {
			opts = append(opts, nats.UserCredentials(cfg.CredsFile))
		}
		nc, err := nats.Connect(cfg.URL, opts...)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("fleet: connect %d/%d to %s: %w", i+1, cfg.Conns, cfg.URL, err)
		}
		f.conns = append(f.conns, nc)
		mux, err := newReplyMux(nc)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("fleet: subscribe replies on connection %d: %w", i+1, err)
		}
		f.replies = append(f.replies, mux)
	}
	f.agents = make([]*Agent, len(agentIDs))
	for i, id := range agentIDs {
		f.agents[i] = newAgent(id, f.conns[i%len(f.conns)], f.replies[i%len(f.replies)])
	}
	f.router = NewRouter(f.agents)
	f.built.Store(&f.agents)
	return f, nil
}

// withDefaults checks cfg and the agent ids and fills in cfg's defaults.
func withDefaults(cfg Config, agentIDs []string) (Config, error) {
	if cfg.Conns < 1 {
		cfg.Conns = 1
	}
	if cfg.Subscriptions == "" {
		cfg.Subscriptions = Wildcard
	}
	if cfg.Subscriptions != Wildcard && cfg.Subscriptions != PerAgent {
		return cfg, fmt.Errorf("fleet: unknown subscription mode %q", cfg.Subscriptions)
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = 10 * time.Second
	}
	if cfg.AgentVersion == "" {
		cfg.AgentVersion = "loadgen/1.0.0"
	}
	if cfg.Name == "" {
		cfg.Name = "configsync-loadgen"
	}
	for _, id := range agentIDs {
		if !protocol.ValidAgentID(id) {
			return cfg, fmt.Errorf("fleet: invalid agent id %q", id)
		}
	}
	return cfg, nil
}

// baseOptions are the options of every connection of the fleet, named name.
func (f *Fleet) baseOptions(name string) []nats.Option {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(10 * time.Second),
		// Count, don't print, slow-consumer and other async errors.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				f.counters.droppedByConns.Add(1)
			}
		}),
		// An ack in flight when the connection broke is lost (core NATS), and nothing else brings it
		// back: the agent holds the version, so its heartbeats are not behind and anti-entropy sends
		// nothing. The real agent republishes its newest ack of every type after each reconnect; so
		// do the simulated ones.
		nats.ReconnectHandler(func(nc *nats.Conn) {
			f.counters.reconnects.Add(1)
			f.republishAcks(nc)
		}),
	}
	if f.cfg.CAFile != "" {
		opts = append(opts, nats.RootCAs(f.cfg.CAFile))
	}
	return opts
}

// Agents returns the fleet's agents (index i publishes on connection i mod Conns).
func (f *Fleet) Agents() []*Agent { return f.agents }

// Subscribe starts receiving and answering commands. It returns once the server has registered every
// subscription.
func (f *Fleet) Subscribe() error {
	if f.perAgentConns {
		return f.subscribePerAgentConns(16)
	}
	// Deep buffers: an environment-wide push delivers one command per agent in a burst.
	perConn := max(4096, 2*len(f.agents)/len(f.conns))
	for i, nc := range f.conns {
		ch := make(chan *nats.Msg, perConn)
		f.cmdCh = append(f.cmdCh, ch)
		switch f.cfg.Subscriptions {
		case Wildcard:
			sub, err := nc.ChanQueueSubscribe(protocol.CommandSubjectPrefix+"*", QueueGroup, ch)
			if err != nil {
				return fmt.Errorf("fleet: subscribe commands: %w", err)
			}
			f.subs = append(f.subs, sub)
		case PerAgent:
			for j := i; j < len(f.agents); j += len(f.conns) {
				sub, err := nc.ChanSubscribe(protocol.CommandSubject(f.agents[j].ID), ch)
				if err != nil {
					return fmt.Errorf("fleet: subscribe commands of %s: %w", f.agents[j].ID, err)
				}
				f.subs = append(f.subs, sub)
			}
		}
		f.workers.Add(1)
		go f.commandWorker(ch)
	}
	for _, nc := range f.conns {
		if err := nc.FlushTimeout(30 * time.Second); err != nil {
			return fmt.Errorf("fleet: flush subscriptions: %w", err)
		}
	}
	return nil
}

func (f *Fleet) commandWorker(ch <-chan *nats.Msg) {
	defer f.workers.Done()
	for msg := range ch {
		f.handleCommand(msg.Subject, msg.Data, time.Now())
	}
}

// handleCommand demultiplexes one command and publishes the agent's ack.
func (f *Fleet) handleCommand(subject string, data []byte, received time.Time) {
	a, ok := f.router.Route(subject)
	if !ok {
		f.counters.foreign.Add(1)
		return
	}
	f.counters.commands.Add(1)
	cmd, err := decodeCommand(data)
	if err != nil || cmd.Type != protocol.CommandConfigUpdate || cmd.ConfigType == "" {
		f.counters.malformed.Add(1)
		return
	}
	if f.cfg.DropPushes > 0 && a.dropFirst(cmd.ConfigType, cmd.Version, f.cfg.DropPushes) {
		f.counters.pushesDropped.Add(1)
		return
	}
	var ack protocol.Ack
	if reason := f.refusal(a, cmd); reason != "" {
		ack = a.refuse(cmd, reason, received)
		f.counters.refused.Add(1)
	} else {
		var outcome commandOutcome
		ack, outcome = a.handle(f.table, cmd, received)
		switch outcome {
		case outcomeApplied:
			f.counters.applied.Add(1)
		case outcomeRepeated:
			f.counters.applied.Add(1)
			f.counters.repeated.Add(1)
		case outcomeStale:
			f.counters.stale.Add(1)
		case outcomeRejected:
			f.counters.rejected.Add(1)
		}
	}
	a.rememberAck(ack)
	if err := a.publishAck(ack); err != nil {
		f.counters.ackErrors.Add(1)
		return
	}
	f.counters.acksSent.Add(1)
}

// republishAcks publishes again the newest ack of every type of the agents publishing on nc (after nc
// reconnected), as the real agent does after each reconnect; ack-ingest's upsert makes a repeat harmless.
func (f *Fleet) republishAcks(nc *nats.Conn) {
	agents := f.built.Load()
	if agents == nil {
		return // connecting still: no agent has acked anything
	}
	for _, a := range *agents {
		if a.conn != nc {
			continue
		}
		for _, ack := range a.lastAcks() {
			if err := a.publishAck(ack); err != nil {
				f.counters.ackErrors.Add(1)
				continue
			}
			f.counters.acksRepublished.Add(1)
		}
	}
}

// refusal is why agent a's local policy refuses cmd ("" when it does not, or when no Refuse is set).
func (f *Fleet) refusal(a *Agent, cmd protocol.Command) string {
	if f.cfg.Refuse == nil || agentconfig.IsNull(cmd.Payload) {
		return ""
	}
	return f.cfg.Refuse(a.ID, cmd.ConfigType, cmd.Payload)
}

// StartOptions control the fleet's boot.
type StartOptions struct {
	// Fetch makes every agent fetch its configs at startup, each after a random delay in [0, Jitter).
	Fetch  bool
	Jitter time.Duration
	// RetryFor, when positive, makes an agent whose startup fetch failed retry as the real agent does
	// (the backend's retry_after_ms, else its own backoff) until it has its config or RetryFor has
	// passed since the boot began; the boot ends when every agent has its config or gave up.
	RetryFor time.Duration
}

// Start boots every agent as a real one does: (optionally) sleep a random jitter, fetch, then send a
// first heartbeat so that the backend sees the agent online; background heartbeats then run every
// HeartbeatInterval until Close. The returned channel is closed when every agent has booted.
func (f *Fleet) Start(opts StartOptions) <-chan struct{} {
	done := make(chan struct{})
	var booted sync.WaitGroup
	booted.Add(len(f.agents))
	now := time.Now()
	f.retry.begin(now, opts.RetryFor)
	f.fetchTimeline.Begin(now)
	for _, a := range f.agents {
		boot := func() {
			defer booted.Done()
			if opts.Fetch {
				f.fetchUntilConfigured(a, f.fetch(a))
			}
			f.sendHeartbeat(a, time.Now())
		}
		if opts.Fetch && opts.Jitter > 0 {
			time.AfterFunc(rand.N(opts.Jitter), boot)
		} else {
			go boot()
		}
	}
	go func() { booted.Wait(); close(done) }()

	if f.cfg.HeartbeatInterval > 0 && f.bgStop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		f.bgStop = cancel
		f.bgDone.Add(1)
		go func() {
			defer f.bgDone.Done()
			// Start after the boot window so the first background beat doesn't pile on the boot's.
			select {
			case <-done:
			case <-ctx.Done():
				return
			}
			f.backgroundHeartbeats(ctx)
		}()
	}
	return done
}

// fetch runs one agent's startup fetch and records its latency and outcome. It returns why it failed
// (a *protocol.Error for an error reply), nil on success.
func (f *Fleet) fetch(a *Agent) error {
	began := time.Now()
	elapsed, kind, err := f.fetchOnce(a)
	if err != nil {
		f.fetchFailed(kind)
		return err
	}
	f.counters.fetchOK.Add(1)
	f.fetchLatency.Record(elapsed)
	f.fetchTimeline.Record(began, elapsed)
	return nil
}

// FetchTimeline summarises the successful first fetches of the last Start by when they began, in
// buckets of width from the boot.
func (f *Fleet) FetchTimeline(width time.Duration) []latency.Bucket {
	return f.fetchTimeline.Buckets(width)
}

// fetchOnce makes one fetch request and applies the reply: its round trip, or why it failed (a short
// kind for the report, and the error).
func (f *Fleet) fetchOnce(a *Agent) (time.Duration, string, error) {
	req, _ := encodeFetchRequest(a.ID)
	start := time.Now()
	msg, err := a.replies.request(f.cfg.FetchTimeout, a.ID, protocol.FetchSubject(a.ID), req)
	elapsed := time.Since(start)
	if err != nil {
		return elapsed, fetchErrorKind(err), err
	}
	reply, err := decodeFetchReply(msg.Data)
	if err != nil {
		// A micro endpoint may answer an error in headers only.
		if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
			return elapsed, "error " + code, &protocol.Error{Code: code, Message: msg.Header.Get(micro.ErrorHeader)}
		}
		return elapsed, "undecodable reply", err
	}
	if reply.Error != nil {
		return elapsed, "error " + reply.Error.Code, reply.Error
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return elapsed, "error " + code, &protocol.Error{Code: code, Message: msg.Header.Get(micro.ErrorHeader)}
	}
	if err := a.applyFetch(f.table, reply); err != nil {
		return elapsed, "unusable reply", err
	}
	if len(reply.TypeErrors) > 0 {
		f.counters.fetchTypeErrors.Add(1)
	}
	return elapsed, "", nil
}

func (f *Fleet) fetchFailed(kind string) {
	f.counters.fetchFailed.Add(1)
	f.errMu.Lock()
	f.fetchErrors[kind]++
	f.errMu.Unlock()
}

func fetchErrorKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "timeout"
	case errors.Is(err, nats.ErrNoResponders):
		return "no responders"
	default:
		return "request failed"
	}
}

func (f *Fleet) sendHeartbeat(a *Agent, now time.Time) {
	hb := a.heartbeat(f.table, f.cfg.AgentVersion, now)
	b, err := encodeHeartbeat(hb)
	if err == nil {
		err = a.conn.Publish(protocol.HeartbeatSubject(a.ID), b)
	}
	if err != nil {
		f.counters.heartbeatErrors.Add(1)
		return
	}
	f.counters.heartbeatsSent.Add(1)
}

// backgroundHeartbeats gives every agent one heartbeat per HeartbeatInterval, spread evenly: agents
// are split into slots of a 100 ms tick, one slot beating per tick.
func (f *Fleet) backgroundHeartbeats(ctx context.Context) {
	const tick = 100 * time.Millisecond
	slots := max(1, int(f.cfg.HeartbeatInterval/tick))
	t := time.NewTicker(tick)
	defer t.Stop()
	for slot := 0; ; slot = (slot + 1) % slots {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for i := slot; i < len(f.agents); i += slots {
				f.sendHeartbeat(f.agents[i], now)
			}
		}
	}
}

// BurstResult is what SendHeartbeats did.
type BurstResult struct {
	Sent    int64
	Elapsed time.Duration
	// Final is every agent's heartbeat sequence number after the burst.
	Final map[string]int64
}

// SendHeartbeats sends heartbeats at rate per second, round robin over the agents, for d (on top of
// the background heartbeats). It paces in 5 ms steps and never bursts to catch up by more than one
// step, so the offered rate is at most rate.
func (f *Fleet) SendHeartbeats(ctx context.Context, rate float64, d time.Duration) BurstResult {
	const step = 5 * time.Millisecond
	start := time.Now()
	var sent int64
	next := 0
	t := time.NewTicker(step)
	defer t.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case now := <-t.C:
			elapsed := now.Sub(start)
			if elapsed >= d {
				break loop
			}
			due := int64(rate*elapsed.Seconds()) - sent
			due = min(due, int64(rate*2*step.Seconds())+1)
			for ; due > 0; due-- {
				f.sendHeartbeat(f.agents[next], now)
				next = (next + 1) % len(f.agents)
				sent++
			}
		}
	}
	res := BurstResult{Sent: sent, Elapsed: time.Since(start), Final: make(map[string]int64, len(f.agents))}
	for _, a := range f.agents {
		a.mu.Lock()
		res.Final[a.ID] = a.hbSeq
		a.mu.Unlock()
	}
	return res
}

// Flush waits until every connection has written what it buffered and the server has seen it.
func (f *Fleet) Flush(timeout time.Duration) error {
	if f.perAgentConns {
		return f.eachConn(func(_ int, nc *nats.Conn) error { return nc.FlushTimeout(timeout) })
	}
	var errs []error
	for _, nc := range f.conns {
		if err := nc.FlushTimeout(timeout); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Receipts returns, for every agent that received a config_update of configType at version or newer,
// when it received it.
func (f *Fleet) Receipts(configType string, version int64) []time.Time {
	var out []time.Time
	for _, a := range f.agents {
		a.mu.Lock()
		r, ok := a.receipts[configType]
		a.mu.Unlock()
		if ok && r.Version >= version {
			out = append(out, r.At)
		}
	}
	return out
}

// ReceivedVersions returns, per agent that received a config_update of configType, the version of the
// last one it received.
func (f *Fleet) ReceivedVersions(configType string) map[string]int64 {
	out := make(map[string]int64, len(f.agents))
	for _, a := range f.agents {
		a.mu.Lock()
		r, ok := a.receipts[configType]
		a.mu.Unlock()
		if ok {
			out[a.ID] = r.Version
		}
	}
	return out
}

// AgentState returns a copy of agent i's state.
func (f *Fleet) AgentState(i int) State { return f.agents[i].state(f.table) }

// Stats are the fleet's counters.
type Stats struct {
	Agents      int              `json:"agents"`
	Conns       int              `json:"conns"`
	FetchOK     int64            `json:"fetch_ok"`
	FetchFailed int64            `json:"fetch_failed"`
	FetchErrors map[string]int64 `json:"fetch_errors,omitempty"`
	// FetchTypeErrors counts fetches that succeeded but withheld some types (type_errors).
	FetchTypeErrors int64           `json:"fetch_type_errors"`
	FetchLatency    latency.Summary `json:"fetch_latency"`
	Commands        int64           `json:"commands"`
	Applied         int64           `json:"applied"`
	Stale           int64           `json:"stale"`
	Rejected        int64           `json:"rejected"`
	Malformed       int64           `json:"malformed"`
	Foreign         int64           `json:"foreign"`
	AcksSent        int64           `json:"acks_sent"`
	AckErrors       int64           `json:"ack_errors"`
	HeartbeatsSent  int64           `json:"heartbeats_sent"`
	HeartbeatErrors int64           `json:"heartbeat_errors"`
	SlowConsumer    int64           `json:"slow_consumer_events"`
	DroppedMessages int64           `json:"dropped_messages"`
	// PushesDropped: config_updates lost on purpose (-drop-pushes).
	PushesDropped int64 `json:"pushes_dropped"`
	// Refused: config_updates the agents' simulated local policy refused (acknowledged failed).
	Refused int64 `json:"refused"`
	// Repeated: config_updates of a version the agent already held (counted in Applied too; acked
	// again, as the agent does).
	Repeated int64 `json:"repeated"`
	// Reconnects: the fleet's connections that broke and reconnected; AcksRepublished the acks the
	// agents on them sent again (their newest of each type), as a real agent does after a reconnect.
	Reconnects      int64 `json:"reconnects"`
	AcksRepublished int64 `json:"acks_republished"`
}

// Stats returns a snapshot of the fleet's counters.
func (f *Fleet) Stats() Stats {
	c := &f.counters
	s := Stats{
		Agents: len(f.agents), Conns: len(f.conns),
		FetchOK: c.fetchOK.Load(), FetchFailed: c.fetchFailed.Load(), FetchTypeErrors: c.fetchTypeErrors.Load(),
		FetchLatency: f.fetchLatency.Summary(),
		Commands:     c.commands.Load(), Applied: c.applied.Load(), Stale: c.stale.Load(), Rejected: c.rejected.Load(),
		Malformed: c.malformed.Load(), Foreign: c.foreign.Load(), AcksSent: c.acksSent.Load(), AckErrors: c.ackErrors.Load(),
		HeartbeatsSent: c.heartbeatsSent.Load(), HeartbeatErrors: c.heartbeatErrors.Load(), SlowConsumer: c.droppedByConns.Load(),
		PushesDropped: c.pushesDropped.Load(), Refused: c.refused.Load(), Repeated: c.repeated.Load(),
		Reconnects: c.reconnects.Load(), AcksRepublished: c.acksRepublished.Load(),
	}
	f.errMu.Lock()
	if len(f.fetchErrors) > 0 {
		s.FetchErrors = make(map[string]int64, len(f.fetchErrors))
		keys := make([]string, 0, len(f.fetchErrors))
		for k := range f.fetchErrors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			s.FetchErrors[k] = f.fetchErrors[k]
		}
	}
	f.errMu.Unlock()
	for _, sub := range f.subs {
		if n, err := sub.Dropped(); err == nil {
			s.DroppedMessages += int64(n)
		}
	}
	return s
}

// Close stops heartbeats, drains the connections and stops the command workers.
func (f *Fleet) Close() {
	if f.bgStop != nil {
		f.bgStop()
		f.bgDone.Wait()
	}
	for _, s := range f.subs {
		_ = s.Unsubscribe()
	}
	_ = f.eachConn(func(i int, nc *nats.Conn) error {
		if i < len(f.replies) && f.replies[i] != nil {
			f.replies[i].close()
		}
		_ = nc.FlushTimeout(5 * time.Second)
		nc.Close()
		return nil
	})
	for _, ch := range f.cmdCh {
		close(ch)
	}
	f.workers.Wait()
}
