package fleet

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/tools/loadgen/internal/latency"
)

// Identity is one agent's own NATS user: the creds file (JWT and seed) config-api issued when the host
// was registered.
type Identity struct {
	AgentID string
	Creds   string
}

// ConnectOptions shape how a real-connection fleet connects.
type ConnectOptions struct {
	// SourceAddrs spreads the connections to a loopback server over this many local source addresses
	// (127.0.1.1, 127.0.1.2, …): the kernel has about 28,000 ephemeral ports per (source, destination)
	// address pair, fewer than a large fleet needs. 0 or 1: the kernel picks the source address.
	SourceAddrs int
	// Concurrency is the most connections being established at once (TCP, TLS and JWT handshakes);
	// default 32.
	Concurrency int
	// Progress, when set, is called with the number of connections attempted so far, from one
	// goroutine at a time.
	Progress func(done int)
}

// ConnectStorm is what connecting a real-connection fleet took: every agent's TCP connect, TLS
// handshake, and the server's verification of the agent's JWT (nonce signed with its seed).
type ConnectStorm struct {
	Conns       int              `json:"conns"`
	Failed      int              `json:"failed"`
	Errors      map[string]int64 `json:"errors,omitempty"`
	Concurrency int              `json:"concurrency"`
	SourceAddrs int              `json:"source_addrs"`
	Elapsed     time.Duration    `json:"elapsed_ns"`
	PerSecond   float64          `json:"per_second"`
	// Latency is one connection's nats.Connect, successes only.
	Latency latency.Summary `json:"latency"`
}

// Connect builds a fleet in which every agent has its own NATS connection under its own NATS user (TLS
// when cfg.CAFile is set) and its own reply-inbox subscription — and, after Subscribe, its own command
// subscription: the load a fleet of real agents puts on nats-server. cfg.Conns, cfg.CredsFile and
// cfg.Subscriptions are ignored. A process can hold at most its open-file limit of connections (20,000
// on the benchmark machine): run several loadgen processes for more.
func Connect(cfg Config, ids []Identity, opts ConnectOptions) (*Fleet, ConnectStorm, error) {
	cfg.Conns, cfg.CredsFile, cfg.Subscriptions = len(ids), "", PerAgent
	agentIDs := make([]string, len(ids))
	for i, id := range ids {
		agentIDs[i] = id.AgentID
	}
	cfg, err := withDefaults(cfg, agentIDs)
	if err != nil {
		return nil, ConnectStorm{}, err
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 32
	}
	dialers, err := sourceDialers(cfg.URL, opts.SourceAddrs)
	if err != nil {
		return nil, ConnectStorm{}, err
	}
	f := &Fleet{cfg: cfg, table: newEntryTable(), fetchErrors: map[string]int64{}, perAgentConns: true}
	f.conns = make([]*nats.Conn, len(ids))
	f.replies = make([]*replyMux, len(ids))
	storm := ConnectStorm{Conns: len(ids), Concurrency: opts.Concurrency, SourceAddrs: max(1, len(dialers))}
	var (
		lat      latency.Recorder
		errMu    sync.Mutex
		errs     = map[string]int64{}
		firstErr error
		next     atomic.Int64
		done     atomic.Int64
		progMu   sync.Mutex
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range min(opts.Concurrency, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ids) {
					return
				}
				t0 := time.Now()
				nc, mux, err := f.connectAgent(ids[i], dialers, i)
				if err == nil {
					lat.Record(time.Since(t0))
					f.conns[i], f.replies[i] = nc, mux
				} else {
					errMu.Lock()
					errs[connectErrorKind(err)]++
					if firstErr == nil {
						firstErr = fmt.Errorf("fleet: connect agent %s: %w", ids[i].AgentID, err)
					}
					errMu.Unlock()
				}
				n := int(done.Add(1))
				if opts.Progress != nil {
					progMu.Lock()
					opts.Progress(n)
					progMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	storm.Elapsed = time.Since(start)
	storm.Latency = lat.Summary()
	for _, n := range errs {
		storm.Failed += int(n)
	}
	if len(errs) > 0 {
		storm.Errors = errs
	}
	if storm.Elapsed > 0 {
		storm.PerSecond = float64(storm.Conns-storm.Failed) / storm.Elapsed.Seconds()
	}
	if firstErr != nil {
		f.Close()
		return nil, storm, fmt.Errorf("%w (%d of %d connections failed)", firstErr, storm.Failed, storm.Conns)
	}
	f.agents = make([]*Agent, len(ids))
	for i, id := range ids {
		f.agents[i] = newAgent(id.AgentID, f.conns[i], f.replies[i])
	}
	f.router = NewRouter(f.agents)
	f.built.Store(&f.agents)
	return f, storm, nil
}

// connectAgent opens agent i's own connection under its own user and subscribes its reply inbox.
func (f *Fleet) connectAgent(id Identity, dialers []*net.Dialer, i int) (*nats.Conn, *replyMux, error) {
	jwt, err := nkeys.ParseDecoratedJWT([]byte(id.Creds))
	if err != nil {
		return nil, nil, fmt.Errorf("parse creds: %w", err)
	}
	kp, err := nkeys.ParseDecoratedNKey([]byte(id.Creds))
	if err != nil {
		return nil, nil, fmt.Errorf("parse creds: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, nil, fmt.Errorf("parse creds: %w", err)
	}
	opts := append(f.baseOptions(fmt.Sprintf("%s-%s", f.cfg.Name, id.AgentID)), nats.UserJWTAndSeed(jwt, string(seed)),
		// A real agent's connection holds its command subscription and one request at a time: the
		// default 8 MiB reconnect buffer per connection would only cost loadgen memory.
		nats.ReconnectBufSize(64<<10))
	if len(dialers) > 0 {
		opts = append(opts, nats.SetCustomDialer(dialers[i%len(dialers)]))
	}
	nc, err := nats.Connect(f.cfg.URL, opts...)
	if err != nil {
		return nil, nil, err
	}
	mux, err := newScopedReplyMux(nc, id.AgentID)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("subscribe replies: %w", err)
	}
	return nc, mux, nil
}

// sourceDialers returns one dialer per local source address when the server is on a loopback
// address and n > 1; none otherwise (the kernel chooses).
func sourceDialers(serverURL string, n int) ([]*net.Dialer, error) {
	if n <= 1 {
		return nil, nil
	}
	if n > 254 {
		return nil, fmt.Errorf("fleet: at most 254 source addresses, not %d", n)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return nil, fmt.Errorf("fleet: server URL: %w", err)
	}
	host := u.Hostname()
	ip := net.ParseIP(host)
	if host == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	}
	if ip == nil || !ip.IsLoopback() || ip.To4() == nil {
		return nil, nil // a remote server: source addresses are the network's business
	}
	out := make([]*net.Dialer, n)
	for i := range out {
		out[i] = &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(i+1))}}
	}
	return out, nil
}

func connectErrorKind(err error) string {
	var netErr net.Error
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return "authorization"
	case errors.Is(err, nats.ErrMaxConnectionsExceeded):
		return "max connections"
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrTimeout):
		return "no server / timeout"
	case errors.As(err, &netErr):
		return "network"
	default:
		return "other"
	}
}

// subscribePerAgentConns subscribes every agent to its own command subject on its own connection;
// workers goroutines apply the commands (agent i on worker i mod workers).
func (f *Fleet) subscribePerAgentConns(workers int) error {
	workers = max(1, min(workers, len(f.agents)))
	perWorker := max(4096, 2*len(f.agents)/workers)
	for range workers {
		ch := make(chan *nats.Msg, perWorker)
		f.cmdCh = append(f.cmdCh, ch)
		f.workers.Add(1)
		go f.commandWorker(ch)
	}
	subs := make([]*nats.Subscription, len(f.agents))
	err := f.eachConn(func(i int, nc *nats.Conn) error {
		sub, err := nc.ChanSubscribe(protocol.CommandSubject(f.agents[i].ID), f.cmdCh[i%workers])
		if err != nil {
			return fmt.Errorf("fleet: subscribe commands of %s: %w", f.agents[i].ID, err)
		}
		subs[i] = sub
		return nc.FlushTimeout(30 * time.Second)
	})
	for _, s := range subs {
		if s != nil {
			f.subs = append(f.subs, s)
		}
	}
	return err
}

// eachConn calls fn for every connection, a bounded number at a time, and joins the errors (the
// first few, sorted, so a broken run does not print thousands).
func (f *Fleet) eachConn(fn func(i int, nc *nats.Conn) error) error {
	var (
		next atomic.Int64
		mu   sync.Mutex
		errs []string
		wg   sync.WaitGroup
	)
	for range min(64, len(f.conns)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(f.conns) {
					return
				}
				if f.conns[i] == nil {
					continue
				}
				if err := fn(i, f.conns[i]); err != nil {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) == 0 {
		return nil
	}
	sort.Strings(errs)
	more := ""
	if len(errs) > 3 {
		more = fmt.Sprintf(" (and %d more)", len(errs)-3)
		errs = errs[:3]
	}
	return fmt.Errorf("%v%s", errs, more)
}
