package deliver

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// PushOptions tune the fan-out.
type PushOptions struct {
	// OnlineWindow: a host is online when its last heartbeat is at most this old.
	OnlineWindow time.Duration
	// PageSize is how many hosts are resolved and published per page.
	PageSize int
	// IngestLagging, when set, tells whether stored heartbeats are stale because ack-ingest is behind;
	// then every host in scope is pushed, not only the online ones (nil: never).
	IngestLagging func(ctx context.Context) bool
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// PushResult counts what one event's fan-out did.
type PushResult struct {
	Pages int
	// Hosts is the number of online hosts in scope.
	Hosts int
	// Published commands (handed to the message server).
	Published int
	// SkippedCredentials: hosts not pushed because their collector credentials failed.
	SkippedCredentials int
	// FailedPublish: commands the connection refused (best effort; the agent pulls at startup).
	FailedPublish int
	// SkippedTooLarge: hosts not pushed because their config alone exceeds the NATS max payload.
	SkippedTooLarge int
}

// Pusher fans config-change events out to online agents.
type Pusher struct {
	resolver  Resolver
	injector  Injector
	publisher CommandPublisher
	opts      PushOptions
	log       *zap.Logger
}

// NewPusher returns a Pusher. Zero options get defaults (90 s online window, pages of 1,000 hosts).
func NewPusher(resolver Resolver, injector Injector, publisher CommandPublisher, opts PushOptions, log *zap.Logger) *Pusher {
	if opts.OnlineWindow <= 0 {
		opts.OnlineWindow = 90 * time.Second
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 1000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Pusher{resolver: resolver, injector: injector, publisher: publisher, opts: opts, log: log}
}

// Push sends the effective config of ev's type, as it is now, to every online host in ev's scope that
// the event changed: for an environment-scope event at version V, the hosts whose environment layer
// resolves to V (the others are covered by another event, or during a staged rollout are not in a
// started stage); for a host-scope event, its host. One config_update per host, a deleted config as a
// null payload. It pages through the hosts with the resolver's resolve_push, which answers each page
// as distinct config sets with their agents: each set is injected (collectors that reference
// credentials, all or nothing) and encoded once, then published to its agents; the environment's own
// config, the same on every page, once per event. Hosts whose credentials fail are skipped (and
// logged); the rest are pushed. An error (wrapping ErrInvalidRequest for an unusable event, else
// ErrUnavailable: a resolver of another contract during a rolling upgrade is one) means the fan-out
// did not complete and should be redone; a vanished environment or host is not an error (there is no
// one to push to). ev must be a valid event (protocol.ConfigChanged.Validate; the events consumer
// decodes and checks it).
func (p *Pusher) Push(ctx context.Context, ev protocol.ConfigChanged) (PushResult, error) {
	var res PushResult
	req, err := p.pushRequest(ev)
	if err != nil {
		return res, err
	}
	if p.opts.IngestLagging != nil && p.opts.IngestLagging(ctx) {
		// Hosts look offline only because their heartbeats are not stored yet: push to all of them.
		req.OnlineSince, req.OnlineAt = nil, nil
		p.log.Info("push: ack-ingest is behind on heartbeats, pushing to every host in scope", eventFields(ev)...)
	}
	f := &fanout{p: p, ev: ev, issuedAt: p.opts.Now().UTC()}
	// The next page is resolved while this one is injected and published: the resolver's and the
	// database's part of a page overlaps the message server's, instead of the two taking turns. At most
	// two pages are held.
	pctx, cancel := context.WithCancel(ctx)
	next := p.resolvePage(pctx, req, 1)
	defer func() {
		cancel()
		if next != nil {
			<-next // the prefetch in flight ends with pctx
		}
	}()
	for {
		r := <-next
		next = nil
		if r.err != nil {
			if isNotFound(r.err) {
				p.log.Info("push: nothing to push, scope no longer exists", eventFields(ev)...)
				return res, nil
			}
			return res, fmt.Errorf("resolve page %d: %w", res.Pages+1, r.err)
		}
		res.Pages++
		more := r.page.NextAfter != "" && r.page.NextAfter != req.After
		if more {
			req.After = r.page.NextAfter
			next = p.resolvePage(pctx, req, res.Pages+1)
		}
		if err := f.page(ctx, r.page, &res); err != nil {
			return res, fmt.Errorf("page %d: %w", res.Pages, err)
		}
		if !more {
			return res, nil
		}
	}
}

// resolvedPage is one page of a fan-out as the resolver answered it, or why it could not.
type resolvedPage struct {
	page protocol.ResolveSetsReply
	err  error
}

// resolvePage asks the resolver for page number n of req in a goroutine of its own; the channel
// (buffered) receives the answer, checked against the contract, or the error, classified.
func (p *Pusher) resolvePage(ctx context.Context, req protocol.ResolvePushRequest, n int) chan resolvedPage {
	out := make(chan resolvedPage, 1)
	go func() {
		rctx, span := tracer.Start(ctx, "resolve", trace.WithAttributes(attribute.Int("page", n)))
		page, err := p.resolver.ResolvePush(rctx, req)
		if err == nil {
			if cerr := page.Check(); cerr != nil {
				// Another contract (a rolling upgrade) or a reply that contradicts itself: never guess
				// at its meaning; the event is redone.
				err = protocol.Errorf(protocol.CodeContractMismatch, "unusable resolve_push reply: %s", cerr.Error())
			}
		}
		endSpan(span, err)
		if err != nil {
			err = classifyRemote("resolver", err)
		}
		out <- resolvedPage{page: page, err: err}
	}()
	return out
}

func (p *Pusher) pushRequest(ev protocol.ConfigChanged) (protocol.ResolvePushRequest, error) {
	// Online by protocol.Online: the window, or a host's own heartbeat interval when that is longer.
	now := p.opts.Now().UTC()
	since := now.Add(-p.opts.OnlineWindow)
	req := protocol.ResolvePushRequest{
		Contract:      protocol.ResolveSetsContract,
		EnvironmentID: ev.EnvironmentID,
		ConfigType:    ev.ConfigType,
		OnlineSince:   &since,
		OnlineAt:      &now,
		Limit:         p.opts.PageSize,
	}
	switch ev.Scope {
	case protocol.ScopeEnvironment:
		// Only the hosts this event changed: those whose environment layer is at its version.
		req.EnvironmentVersion = ev.Version
	case protocol.ScopeHost:
		req.HostIDs = []string{ev.HostID}
	default: // unreachable for a decoded event (protocol.ConfigChanged.Validate checked it)
		return protocol.ResolvePushRequest{}, fmt.Errorf("%w: unknown scope", ErrInvalidRequest)
	}
	return req, nil
}

// fanout is the state of one event's fan-out across pages.
type fanout struct {
	p        *Pusher
	ev       protocol.ConfigChanged
	issuedAt time.Time

	// The environment's own config (no host row in it) is the same on every page: it is injected and
	// encoded once per event.
	env     *protocol.EffectiveConfig
	envTmpl commandTemplate
	envErr  *protocol.Error
	buf     []byte
}

// setPush is one config set of a page: the config its agents receive and its encoded command.
type setPush struct {
	key    string
	cfg    protocol.EffectiveConfig
	agents []string
	tmpl   commandTemplate
	err    *protocol.Error
	env    bool // the environment's own config (HostVersion 0)
	done   bool // tmpl and err are known (the environment's config, from an earlier page)
}

func (f *fanout) page(ctx context.Context, page protocol.ResolveSetsReply, res *PushResult) error {
	sets := make([]*setPush, 0, len(page.Sets))
	hosts := 0
	for i, set := range page.Sets {
		n, ok := set.Configs[f.ev.ConfigType]
		if !ok {
			hosts += len(set.Hosts)
			continue // no row at either level: nothing to say
		}
		sp := &setPush{key: strconv.Itoa(i), cfg: page.Configs[n], agents: make([]string, 0, len(set.Hosts))}
		sp.env = sp.cfg.HostVersion == 0
		for _, h := range set.Hosts {
			if !protocol.ValidAgentID(h.AgentID) {
				f.p.log.Warn("push: host with an unusable agent id skipped", zap.String("host_id", h.HostID))
				continue
			}
			sp.agents = append(sp.agents, h.AgentID)
		}
		hosts += len(sp.agents)
		sets = append(sets, sp)
	}
	res.Hosts += hosts
	for _, a := range page.Failed {
		f.p.log.Warn("push: host skipped, its config cannot be delivered",
			append(eventFields(f.ev), zap.String("agent_id", a.AgentID), zap.String("code", a.Error.Code), zap.String("reason", a.Error.Message))...)
	}
	res.SkippedTooLarge += len(page.Failed)

	if err := f.prepare(ctx, page, sets); err != nil {
		return err
	}
	for _, sp := range sets {
		// "unavailable" is transient (the cipher is away), unlike a broken credential: skipping these
		// hosts would leave them on the old config for good, so the fan-out is redone later instead.
		if sp.err != nil && sp.err.Code == protocol.CodeUnavailable {
			return fmt.Errorf("%w: inject credentials for %d hosts: %s", ErrUnavailable, len(sp.agents), sp.err.Message)
		}
	}

	// Every command of the page carries this span's context to its agent, whose apply span continues it.
	ctx, span := tracer.Start(ctx, "publish", trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	published, failed, skipped := 0, 0, 0
	for _, sp := range sets {
		if sp.err != nil {
			skipped += len(sp.agents)
			f.p.log.Warn("push: hosts skipped, their config cannot be delivered",
				append(eventFields(f.ev), zap.Int("hosts", len(sp.agents)), zap.Strings("agent_ids_sample", sample(sp.agents, 10)),
					zap.Int64("version", sp.cfg.Version), zap.String("code", sp.err.Code), zap.String("reason", sp.err.Message))...)
			continue
		}
		for _, agentID := range sp.agents {
			f.buf = sp.tmpl.appendCommand(f.buf[:0], commandID(agentID, f.ev.ConfigType, sp.cfg.Version))
			if err := f.p.publisher.Publish(ctx, agentID, f.buf); err != nil {
				failed++
				continue
			}
			published++
		}
	}
	if err := f.p.publisher.Flush(ctx); err != nil {
		f.p.log.Warn("push: flush failed; commands may not have reached agents", append(eventFields(f.ev), zap.Error(err))...)
	}
	span.SetAttributes(attribute.Int("published", published), attribute.Int("failed", failed))
	res.Published += published
	res.FailedPublish += failed
	res.SkippedCredentials += skipped
	f.p.log.Info("push page sent", append(eventFields(f.ev), zap.Int("page", res.Pages), zap.Int("hosts", hosts),
		zap.Int("published", published), zap.Int("skipped_credentials", skipped), zap.Int("publish_failed", failed))...)
	return nil
}

// prepare injects credentials into the collector lists of the page's sets (each set's list once, the
// environment's once per event) and encodes each set's command.
func (f *fanout) prepare(ctx context.Context, page protocol.ResolveSetsReply, sets []*setPush) error {
	collectors := f.ev.ConfigType == agentconfig.Collectors
	var items []protocol.InjectItem
	for i, sp := range sets {
		if sp.env && f.env != nil && sameConfig(*f.env, sp.cfg) {
			sp.tmpl, sp.err, sp.done = f.envTmpl, f.envErr, true
			continue
		}
		if collectors && needsInjection(sp.cfg.ConfigData) {
			set := page.Sets[i]
			items = append(items, protocol.InjectItem{Key: sp.key, ClientID: set.ClientID, EnvironmentID: set.EnvironmentID, Collectors: sp.cfg.ConfigData})
		}
	}
	ictx, span := tracer.Start(ctx, "inject", trace.WithAttributes(attribute.Int("lists", len(items))))
	results, err := injectAll(ictx, f.p.injector, items)
	endSpan(span, err)
	if err != nil {
		return err
	}
	for _, sp := range sets {
		if sp.done {
			continue
		}
		data, fields := sp.cfg.ConfigData, []string(nil)
		if r, ok := results[sp.key]; ok {
			if r.err != nil {
				sp.err = r.err
			} else {
				data, fields = r.collectors, r.secretFields
			}
		}
		if sp.err == nil {
			tmpl, err := newCommandTemplate(f.ev.ConfigType, sp.cfg.Version, data, fields, sp.cfg.Statement, f.issuedAt)
			if err != nil {
				sp.err = protocol.Errorf(protocol.CodeInternal, "%s", err.Error())
			}
			sp.tmpl = tmpl
		}
		if sp.env {
			env := sp.cfg
			f.env, f.envTmpl, f.envErr = &env, sp.tmpl, sp.err
		}
	}
	return nil
}

func eventFields(ev protocol.ConfigChanged) []zap.Field {
	return []zap.Field{zap.String("event_id", ev.EventID), zap.String("scope", ev.Scope),
		zap.String("environment_id", ev.EnvironmentID), zap.String("config_type", ev.ConfigType)}
}

func sample(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// sameConfig reports whether two effective configs are the same content with the same statement.
func sameConfig(a, b protocol.EffectiveConfig) bool {
	return a.Version == b.Version && a.EnvironmentVersion == b.EnvironmentVersion && a.HostVersion == b.HostVersion &&
		string(a.ConfigData) == string(b.ConfigData) && sameStatement(a.Statement, b.Statement)
}

func sameStatement(a, b *protocol.Signed) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.KeyID == b.KeyID && string(a.Statement) == string(b.Statement) && string(a.Signature) == string(b.Signature)
}

// tracer names delivery's spans: resolve, inject and publish under the push or fetch that needs them.
var tracer = otel.Tracer("github.com/configsync/configsync/services/delivery/deliver")

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
