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

// Push sends the effective config of ev's type, as it is now, to every online host in ev's scope (the
// whole environment, or one host): one config_update per host, a deleted config as a null payload. It
// pages through the hosts; collector lists are injected once per distinct list, never per host. Hosts
// whose credentials fail are skipped (and logged); the rest are pushed. An error (wrapping
// ErrInvalidRequest for an unusable event, else ErrUnavailable) means the fan-out did not complete and
// should be redone; a vanished environment or host is not an error (there is no one to push to).
// ev must be a valid event (protocol.ConfigChanged.Validate; the events consumer decodes and checks it).
func (p *Pusher) Push(ctx context.Context, ev protocol.ConfigChanged) (PushResult, error) {
	var res PushResult
	req, err := p.batchRequest(ev)
	if err != nil {
		return res, err
	}
	if p.opts.IngestLagging != nil && p.opts.IngestLagging(ctx) {
		// Hosts look offline only because their heartbeats are not stored yet: push to all of them.
		req.OnlineSince, req.OnlineAt = nil, nil
		p.log.Info("push: ack-ingest is behind on heartbeats, pushing to every host in scope", eventFields(ev)...)
	}
	f := &fanout{p: p, ev: ev, issuedAt: p.opts.Now().UTC()}
	for {
		rctx, span := tracer.Start(ctx, "resolve", trace.WithAttributes(attribute.Int("page", res.Pages+1)))
		page, err := p.resolver.ResolveBatch(rctx, req)
		endSpan(span, err)
		if err != nil {
			err = classifyRemote("resolver", err)
			if isNotFound(err) {
				p.log.Info("push: nothing to push, scope no longer exists", eventFields(ev)...)
				return res, nil
			}
			return res, fmt.Errorf("resolve page %d: %w", res.Pages+1, err)
		}
		res.Pages++
		if err := f.page(ctx, page, &res); err != nil {
			return res, fmt.Errorf("page %d: %w", res.Pages, err)
		}
		if page.NextAfter == "" || page.NextAfter == req.After {
			return res, nil
		}
		req.After = page.NextAfter
	}
}

func (p *Pusher) batchRequest(ev protocol.ConfigChanged) (protocol.ResolveBatchRequest, error) {
	// Online by protocol.Online: the window, or a host's own heartbeat interval when that is longer.
	now := p.opts.Now().UTC()
	since := now.Add(-p.opts.OnlineWindow)
	req := protocol.ResolveBatchRequest{
		EnvironmentID: ev.EnvironmentID,
		ConfigType:    ev.ConfigType,
		OnlineSince:   &since,
		OnlineAt:      &now,
		Limit:         p.opts.PageSize,
	}
	switch ev.Scope {
	case protocol.ScopeEnvironment:
	case protocol.ScopeHost:
		req.HostIDs = []string{ev.HostID}
	default: // unreachable for a decoded event (protocol.ConfigChanged.Validate checked it)
		return protocol.ResolveBatchRequest{}, fmt.Errorf("%w: unknown scope", ErrInvalidRequest)
	}
	return req, nil
}

// fanout is the state of one event's fan-out across pages.
type fanout struct {
	p        *Pusher
	ev       protocol.ConfigChanged
	issuedAt time.Time

	// The environment's effective config is the same on every page: it is injected and encoded once.
	env     *protocol.EffectiveConfig
	envTmpl commandTemplate
	envErr  *protocol.Error
	// Overrides already prepared on earlier pages, by content (bounded: see maxPreparedOverrides).
	prepared map[string]preparedGroup
	buf      []byte
}

type preparedGroup struct {
	tmpl commandTemplate
	err  *protocol.Error
}

// maxPreparedOverrides bounds the overrides remembered across pages of one event.
const maxPreparedOverrides = 4096

// group is the hosts of a page that receive the same effective config.
type group struct {
	key     string
	content string // version and bytes of an override; "" for the environment group
	cfg     protocol.EffectiveConfig
	agents  []string
	tmpl    commandTemplate
	err     *protocol.Error
	cached  bool
}

func (f *fanout) page(ctx context.Context, page protocol.ResolveBatchReply, res *PushResult) error {
	envGroup := &group{key: "env", cfg: page.Environment}
	groups := []*group{}
	byOverride := map[string]*group{}
	for _, h := range page.Hosts {
		if !protocol.ValidAgentID(h.AgentID) {
			f.p.log.Warn("push: host with an unusable agent id skipped", zap.String("host_id", h.HostID))
			continue
		}
		if h.Override == nil {
			envGroup.agents = append(envGroup.agents, h.AgentID)
			continue
		}
		// Identical overrides (same version and bytes) share one injection and one encoding.
		k := strconv.FormatInt(h.Override.Version, 10) + "\x00" + string(h.Override.ConfigData)
		if st := h.Override.Statement; st != nil {
			// A signed override is its agent's alone (its statement names the agent).
			k += "\x00" + string(st.Statement)
		}
		g, ok := byOverride[k]
		if !ok {
			g = &group{key: "override-" + strconv.Itoa(len(byOverride)), content: k, cfg: *h.Override}
			byOverride[k] = g
			groups = append(groups, g)
		}
		g.agents = append(g.agents, h.AgentID)
	}
	if len(envGroup.agents) > 0 {
		groups = append(groups, envGroup)
	}
	res.Hosts += len(envGroup.agents)
	for _, g := range byOverride {
		res.Hosts += len(g.agents)
	}

	if err := f.prepare(ctx, page, groups, envGroup); err != nil {
		return err
	}
	for _, g := range groups {
		// "unavailable" is transient (the cipher is away), unlike a broken credential: skipping these
		// hosts would leave them on the old config for good, so the fan-out is redone later instead.
		if g.err != nil && g.err.Code == protocol.CodeUnavailable {
			return fmt.Errorf("%w: inject credentials for %d hosts: %s", ErrUnavailable, len(g.agents), g.err.Message)
		}
	}

	// Every command of the page carries this span's context to its agent, whose apply span continues it.
	ctx, span := tracer.Start(ctx, "publish", trace.WithSpanKind(trace.SpanKindProducer))
	defer span.End()
	published, failed, skipped := 0, 0, 0
	for _, g := range groups {
		if g.err != nil {
			skipped += len(g.agents)
			f.p.log.Warn("push: hosts skipped, their config cannot be delivered",
				append(eventFields(f.ev), zap.Int("hosts", len(g.agents)), zap.Strings("agent_ids_sample", sample(g.agents, 10)),
					zap.Int64("version", g.cfg.Version), zap.String("code", g.err.Code), zap.String("reason", g.err.Message))...)
			continue
		}
		if g.cfg.Version == 0 && isNull(g.cfg.ConfigData) {
			continue // no row at either level: nothing to say
		}
		for _, agentID := range g.agents {
			f.buf = g.tmpl.appendCommand(f.buf[:0], commandID(agentID, f.ev.ConfigType, g.cfg.Version))
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
	f.p.log.Info("push page sent", append(eventFields(f.ev), zap.Int("page", res.Pages), zap.Int("hosts", len(page.Hosts)),
		zap.Int("published", published), zap.Int("skipped_credentials", skipped), zap.Int("publish_failed", failed))...)
	return nil
}

// prepare injects credentials into the collector lists of groups (each distinct list once; the
// environment's once per event) and encodes each group's command.
func (f *fanout) prepare(ctx context.Context, page protocol.ResolveBatchReply, groups []*group, envGroup *group) error {
	envCached := f.env != nil && f.env.Version == page.Environment.Version && string(f.env.ConfigData) == string(page.Environment.ConfigData) &&
		sameStatement(f.env.Statement, page.Environment.Statement)
	collectors := f.ev.ConfigType == agentconfig.Collectors
	var items []protocol.InjectItem
	for _, g := range groups {
		if g == envGroup && envCached {
			g.tmpl, g.err, g.cached = f.envTmpl, f.envErr, true
			continue
		}
		if p, ok := f.prepared[g.content]; ok && g != envGroup {
			g.tmpl, g.err, g.cached = p.tmpl, p.err, true
			continue
		}
		if collectors && needsInjection(g.cfg.ConfigData) {
			items = append(items, protocol.InjectItem{Key: g.key, ClientID: page.ClientID, EnvironmentID: page.EnvironmentID, Collectors: g.cfg.ConfigData})
		}
	}
	ictx, span := tracer.Start(ctx, "inject", trace.WithAttributes(attribute.Int("lists", len(items))))
	results, err := injectAll(ictx, f.p.injector, items)
	endSpan(span, err)
	if err != nil {
		return err
	}
	for _, g := range groups {
		if g.cached {
			continue
		}
		data, fields := g.cfg.ConfigData, []string(nil)
		if r, ok := results[g.key]; ok {
			if r.err != nil {
				g.err = r.err
			} else {
				data, fields = r.collectors, r.secretFields
			}
		}
		if g.err == nil {
			tmpl, err := newCommandTemplate(f.ev.ConfigType, g.cfg.Version, data, fields, g.cfg.Statement, f.issuedAt)
			if err != nil {
				g.err = protocol.Errorf(protocol.CodeInternal, "%s", err.Error())
			}
			g.tmpl = tmpl
		}
		if g == envGroup {
			env := page.Environment
			f.env, f.envTmpl, f.envErr = &env, g.tmpl, g.err
		} else if len(f.prepared) < maxPreparedOverrides {
			if f.prepared == nil {
				f.prepared = map[string]preparedGroup{}
			}
			f.prepared[g.content] = preparedGroup{tmpl: g.tmpl, err: g.err}
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
