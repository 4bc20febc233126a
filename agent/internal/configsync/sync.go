package configsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/configsync/configsync/agent/internal/command"
	"github.com/configsync/configsync/agent/internal/configcache"
	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Fetcher performs the startup pull.
type Fetcher interface {
	Fetch(ctx context.Context) (*protocol.FetchReply, error)
}

// StartupOrder is the order configs are applied in at startup: the four the scheduler's first runs
// depend on (spec: labels, intervals, collectors, change_detection), then the rest.
var StartupOrder = func() []string {
	first := []string{agentconfig.Labels, agentconfig.Intervals, agentconfig.Collectors, agentconfig.ChangeDetection}
	order := slices.Clone(first)
	for _, t := range agentconfig.TypeNames() {
		if !slices.Contains(first, t) {
			order = append(order, t)
		}
	}
	return order
}()

// Verifier checks signed statements (trust.Verifier).
type Verifier interface {
	Rotate(s *protocol.Signed) error
	SetIdentity(s *protocol.Signed) error
	Config(configType string, version int64, data json.RawMessage, secretFields []string, s *protocol.Signed) error
}

// Syncer applies fetched configs through the ConfigHandler's callbacks.
type Syncer struct {
	Handler      *command.ConfigHandler
	Cache        *configcache.Cache
	Fetcher      Fetcher
	Local        map[string]json.RawMessage
	Log          *slog.Logger
	FetchTimeout time.Duration
	Tracer       trace.Tracer
	// Check, if set, decides whether a fetched config may be applied (the agent's local policy). A
	// refused config is not cached and is acknowledged failed; the type keeps the config it had (at
	// startup: the cache's, else the local default).
	Check func(configType string, data json.RawMessage) error
	// Trust, if set, verifies the reply's identity statement and each config's signed statement (a
	// deletion's too) before anything is cached. A config that fails is refused like a policy refusal:
	// acknowledged failed (signature_invalid), not cached, the type keeps the config it had.
	Trust Verifier

	// OnApplied, if set, is told of every config applied (tests and diagnostics).
	OnApplied func(Resolved, error)
	// RetryDelay overrides the background fetch backoff (tests).
	RetryDelay func(attempt int) time.Duration

	// serverDelay is how long the backend asked to be left alone after the last failed fetch (its
	// retry_after_ms), to be waited before the next one; 0: none. Only the goroutine fetching touches it
	// (Startup, then Background).
	serverDelay time.Duration
	// undelivered lists the types the last applied reply left out with a transient error (code
	// unavailable: for example collectors withheld while the credential service was away); Background
	// fetches again, with backoff, until none is left. Only the fetching goroutine touches it.
	undelivered []string
}

func (s *Syncer) tracer() trace.Tracer {
	if s.Tracer == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return s.Tracer
}

// Startup fetches (bounded by FetchTimeout), populates the cache from a successful reply and applies
// every config type in StartupOrder through the fallback chain. It reports whether the fetch
// succeeded; on failure the agent runs from its cache and local defaults.
func (s *Syncer) Startup(ctx context.Context) bool {
	reply, err := s.fetch(ctx)
	if err != nil {
		s.Log.Warn("config fetch failed; using the disk cache and local defaults", "error", err)
	}
	s.Handler.Lock()
	defer s.Handler.Unlock()
	fresh := map[string]int64{}
	refused := map[string]refusal{}
	if reply != nil {
		fresh, refused = s.populate(reply)
	}
	r := Resolver{Cache: s.Cache, Local: s.Local}
	for _, t := range StartupOrder {
		if rf, ok := refused[t]; ok {
			// Run what the agent had before the refused config: its cache entry, else the local default.
			res := Resolved{ConfigType: t, Data: s.Local[t], Source: SourceLocal}
			if e, ok := s.Cache.Get(t); ok && !e.Redacted {
				res = Resolved{ConfigType: t, Data: e.Data, Version: e.Version, Source: SourceCache}
			}
			if err := s.apply(ctx, res, 0, false); err != nil {
				s.Log.Warn("config apply failed at startup", "config_type", t, "source", string(res.Source), "error", err)
			}
			s.Handler.Ack(ctx, t, rf.version, rf.err)
			continue
		}
		res := r.Resolve(t, reply)
		ackVersion, isFresh := fresh[t]
		if res.Source == SourceNATS && !isFresh {
			// A newer push arrived before the reply: keep what the cache holds.
			if e, ok := s.Cache.Get(t); ok && !e.Redacted {
				res = Resolved{ConfigType: t, Data: e.Data, Version: e.Version, Source: SourceCache}
			}
		}
		err := s.apply(ctx, res, ackVersion, isFresh)
		if err != nil {
			s.Log.Warn("config apply failed at startup", "config_type", t, "source", string(res.Source), "error", err)
		} else {
			s.Log.Debug("config applied at startup", "config_type", t, "source", string(res.Source), "version", res.Version)
		}
	}
	return reply != nil
}

func (s *Syncer) fetch(ctx context.Context) (*protocol.FetchReply, error) {
	timeout := s.FetchTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, span := s.tracer().Start(ctx, "config.fetch")
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reply, err := s.Fetcher.Fetch(ctx)
	s.serverDelay, _ = protocol.ServerRetryAfter(err)
	return reply, err
}

// apply invokes the type's callback; configs that came fresh from NATS are acknowledged at their
// version (a deletion at the deletion's version).
func (s *Syncer) apply(ctx context.Context, res Resolved, ackVersion int64, ack bool) error {
	ctx, span := s.tracer().Start(ctx, "config.apply", trace.WithAttributes(
		attribute.String("config_type", res.ConfigType), attribute.Int64("version", res.Version),
		attribute.String("origin", string(res.Source))))
	defer span.End()
	err := s.Handler.Invoke(ctx, res.ConfigType, res.Data, res.Version)
	if ack {
		s.Handler.Ack(ctx, res.ConfigType, ackVersion, err)
	}
	if s.OnApplied != nil {
		s.OnApplied(res, err)
	}
	return err
}

// refusal is a fetched config the local policy refused.
type refusal struct {
	version int64
	err     error
}

// populate writes a fetch reply into the cache: every config received is stored (secret fields
// redacted), every type the reply lists as deleted or does not mention at all is removed (the cache
// mirrors the backend, so the reported hash can match the expected one), and types the backend could
// not deliver keep their cached entry, as do types whose config the local policy refuses. It returns
// the types the reply changed in the cache, with the version to acknowledge, and the refused ones.
func (s *Syncer) populate(reply *protocol.FetchReply) (map[string]int64, map[string]refusal) {
	refused := map[string]refusal{}
	var changes []configcache.Change
	var cleanup []configcache.Change
	before := s.Cache.ConfigVersions()
	if s.Trust != nil {
		// A new trusted-key list first: the statements of this reply may already use a new key.
		if err := s.Trust.Rotate(reply.TrustedKeys); err != nil {
			s.Log.Warn("fetched trusted-key list refused", "error", err)
		}
		if err := s.Trust.SetIdentity(reply.Identity); err != nil {
			// Environment-wide configs cannot be checked without it; each is refused below.
			s.Log.Warn("fetched identity statement refused", "error", err)
		}
	}
	verify := func(t string, data json.RawMessage) bool {
		if s.Trust == nil {
			return true
		}
		var st *protocol.Signed
		if v, ok := reply.Statements[t]; ok {
			st = &v
		}
		if err := s.Trust.Config(t, reply.Versions[t], data, reply.SecretFields[t], st); err != nil {
			s.Log.Warn("fetched config refused: signature does not verify", "config_type", t, "version", reply.Versions[t], "error", err)
			refused[t] = refusal{version: reply.Versions[t], err: err}
			return false
		}
		return true
	}
	for t, data := range reply.Configs {
		if !agentconfig.Known(t) {
			s.Log.Warn("fetched config of an unknown type ignored", "config_type", t)
			continue
		}
		if !verify(t, data) {
			continue
		}
		if agentconfig.IsNull(data) {
			changes = append(changes, configcache.Change{ConfigType: t, Version: reply.Versions[t], Delete: true})
			continue
		}
		if err := agentconfig.ValidateDelivered(t, data, reply.SecretFields[t]); err != nil {
			s.Log.Warn("fetched config rejected", "config_type", t, "error", err)
			continue
		}
		if s.Check != nil {
			if err := s.Check(t, data); err != nil {
				s.Log.Warn("fetched config refused by the local policy", "config_type", t, "version", reply.Versions[t], "error", err)
				refused[t] = refusal{version: reply.Versions[t], err: err}
				continue
			}
		}
		change := configcache.Change{ConfigType: t, Data: data, Version: reply.Versions[t], SecretFields: reply.SecretFields[t]}
		if st, ok := reply.Statements[t]; ok {
			change.Statement = &st
		}
		changes = append(changes, change)
	}
	for t, v := range reply.Versions {
		if _, ok := reply.Configs[t]; !ok && agentconfig.Known(t) {
			if !verify(t, nil) {
				continue
			}
			changes = append(changes, configcache.Change{ConfigType: t, Version: v, Delete: true})
		}
	}
	for t, v := range before {
		_, inConfigs := reply.Configs[t]
		_, inVersions := reply.Versions[t]
		_, failed := reply.TypeErrors[t]
		if !inConfigs && !inVersions && !failed {
			cleanup = append(cleanup, configcache.Change{ConfigType: t, Version: v, Delete: true})
		}
	}
	s.undelivered = s.undelivered[:0]
	for t, e := range reply.TypeErrors {
		s.Log.Warn("backend could not deliver config type", "config_type", t, "code", e.Code, "error", e.Message)
		if e.Code == protocol.CodeUnavailable && agentconfig.Known(t) {
			s.undelivered = append(s.undelivered, t)
		}
	}
	slices.Sort(s.undelivered)
	fromReply := len(changes)
	errs, err := s.Cache.Apply(append(changes, cleanup...)...)
	if err != nil {
		s.Log.Warn("fetched configs cached in memory only", "error", err)
	}
	fresh := map[string]int64{}
	for i, c := range append(changes, cleanup...) {
		var stale *configcache.StaleError
		switch {
		case errs[i] == nil && i < fromReply:
			fresh[c.ConfigType] = c.Version
		case errs[i] == nil:
			s.Log.Info("cached config the backend no longer has removed", "config_type", c.ConfigType)
		case errors.As(errs[i], &stale):
			s.Log.Info("fetched config older than cached one ignored", "config_type", c.ConfigType,
				"version", c.Version, "cached_version", stale.Current)
		default:
			s.Log.Warn("fetched config not cached", "config_type", c.ConfigType, "error", errs[i])
		}
	}
	return fresh, refused
}

// Resync applies a later fetch: only types whose cached version changed are re-applied (and acked).
func (s *Syncer) Resync(ctx context.Context, reply *protocol.FetchReply) {
	s.Handler.Lock()
	defer s.Handler.Unlock()
	type state struct {
		version  int64
		redacted bool
		ok       bool
	}
	before := map[string]state{}
	for _, t := range StartupOrder {
		e, ok := s.Cache.Get(t)
		before[t] = state{e.Version, e.Redacted, ok}
	}
	fresh, refused := s.populate(reply)
	r := Resolver{Cache: s.Cache, Local: s.Local}
	for _, t := range StartupOrder {
		if rf, ok := refused[t]; ok {
			// The running config stays; the backend learns why the new one is not applied.
			s.Handler.Ack(ctx, t, rf.version, rf.err)
			continue
		}
		ackVersion, isFresh := fresh[t]
		if !isFresh {
			continue
		}
		e, ok := s.Cache.Get(t)
		// Unchanged unless the version moved, the type appeared or went, or the cached entry was only
		// known redacted (the live config, with its secrets, was never applied).
		if b := before[t]; b.ok == ok && b.version == e.Version && !b.redacted {
			continue
		}
		res := r.Resolve(t, reply)
		if err := s.apply(ctx, res, ackVersion, true); err != nil {
			s.Log.Warn("config apply failed after re-fetch", "config_type", t, "error", err)
		}
	}
}

// Background re-fetches until a fetch succeeds (when the startup fetch failed) and again each time
// trigger fires (a reconnect), retrying with backoff. A reply that left a type out with a transient
// error (unavailable) counts as failed for that type: what it did deliver is applied, and the fetch is
// retried with the same backoff until every type arrives. A backend that refused a fetch because it is
// busy says when to come back (retry_after_ms): that delay is waited before the next attempt, in place
// of the agent's own backoff, and a reconnect does not cut it short. It returns when ctx is done.
func (s *Syncer) Background(ctx context.Context, needFetch bool, trigger <-chan struct{}) {
	needFetch = needFetch || len(s.undelivered) > 0
	for {
		if needFetch {
			for attempt := 0; ; attempt++ {
				if d := s.serverDelay; d > 0 {
					s.serverDelay = 0
					select {
					case <-ctx.Done():
						return
					case <-time.After(d):
					}
				}
				reply, err := s.fetch(ctx)
				if err == nil {
					s.Resync(ctx, reply)
					if len(s.undelivered) == 0 {
						s.Log.Info("config fetch succeeded", "attempt", attempt+1)
						break
					}
					err = fmt.Errorf("backend could not deliver %s yet", strings.Join(s.undelivered, ", "))
				}
				if ctx.Err() != nil {
					return
				}
				if d := s.serverDelay; d > 0 {
					s.Log.Info("config fetch refused by a busy backend; retrying when it asks", "error", err, "retry_in", d)
					continue
				}
				d := protocol.FetchBackoff(attempt)
				if s.RetryDelay != nil {
					d = s.RetryDelay(attempt)
				}
				s.Log.Info("config fetch failed; retrying", "error", err, "retry_in", d)
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				case <-trigger:
					// (Re)connected: the backend may be reachable now, do not wait out the backoff.
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-trigger:
			needFetch = true
		}
	}
}
