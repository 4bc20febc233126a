// Package command handles the commands the backend sends an agent on configsync.cmd.<agent_id>. Its
// ConfigHandler routes config_update commands by config type: it caches the config, hot-reloads it
// through the type's registered callback and acknowledges the result.
package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/configsync/configsync/agent/internal/configcache"
	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Callback applies one config type live. data is the config to apply: the pushed payload, or for a
// deleted type the local default (nil when there is none, meaning built-in defaults).
type Callback func(ctx context.Context, configType string, data json.RawMessage, version int64) error

// AckPublisher sends apply acknowledgements to the backend.
type AckPublisher interface {
	// PublishAck sends a; the message carries ctx's trace context (the apply span's), if any.
	PublishAck(ctx context.Context, a protocol.Ack) error
}

// Options configure a ConfigHandler.
type Options struct {
	AgentID string
	Cache   *configcache.Cache
	Acks    AckPublisher
	Log     *slog.Logger
	// LocalDefault returns the local YAML default of a type (nil if none); used when a type is deleted.
	LocalDefault func(configType string) json.RawMessage
	// Check, if set, decides whether a valid config may be applied at all (the agent's local policy).
	// A refused config is acknowledged failed with the error and never cached: the running config of
	// its type stays, and the agent keeps reporting the version it holds.
	Check func(configType string, data json.RawMessage) error
	// Verify, if set, checks the command's signed statement before anything else (trust.Verifier). A
	// command it refuses is acknowledged failed (signature_invalid), never cached: the running config
	// of its type stays.
	Verify func(cmd protocol.Command) error
	Tracer trace.Tracer
	Now    func() time.Time
}

// ConfigHandler is the generic config_update handler. Changes to the cache and the live config are
// serialised: Handle holds the handler's lock, and other appliers (the startup/background sync) take
// it with Lock.
type ConfigHandler struct {
	opts Options

	mu        sync.Mutex
	cbMu      sync.RWMutex
	callbacks map[string]Callback
	// lastAck is the newest ack per config type (guarded by mu): republished after a reconnect, since
	// an ack in flight when the connection dropped is lost, and used to apply each version once.
	lastAck map[string]protocol.Ack
}

// NewConfigHandler returns a handler with no callbacks.
func NewConfigHandler(opts Options) *ConfigHandler {
	if opts.Tracer == nil {
		opts.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LocalDefault == nil {
		opts.LocalDefault = func(string) json.RawMessage { return nil }
	}
	return &ConfigHandler{opts: opts, callbacks: map[string]Callback{}}
}

// RegisterCallback sets the hot-reload callback of a config type.
func (h *ConfigHandler) RegisterCallback(configType string, cb Callback) {
	h.cbMu.Lock()
	defer h.cbMu.Unlock()
	h.callbacks[configType] = cb
}

// Lock excludes Handle while a caller changes the cache and the live config itself.
func (h *ConfigHandler) Lock() { h.mu.Lock() }

// Unlock releases Lock.
func (h *ConfigHandler) Unlock() { h.mu.Unlock() }

// HandleMessage decodes a command message and handles it. Anything but config_update is logged and
// dropped.
func (h *ConfigHandler) HandleMessage(ctx context.Context, data []byte) {
	var cmd protocol.Command
	if err := json.Unmarshal(data, &cmd); err != nil {
		h.opts.Log.Warn("command dropped: not a command envelope", "error", err)
		return
	}
	if cmd.Type != protocol.CommandConfigUpdate {
		h.opts.Log.Warn("command dropped: unsupported command type", "command_id", cmd.CommandID, "type", cmd.Type)
		return
	}
	h.Handle(ctx, cmd)
}

// Handle runs the config_update flow and returns the ack it published (ok false when the command was
// rejected before it named a config type, so there was nothing to acknowledge):
//
//  1. reject an empty config_type; check the signed statement (Options.Verify); validate the payload and check it with Options.Check (a refusal is
//     acknowledged failed and changes nothing);
//  2. cache.Put the payload (a null payload removes the type); a version older than the cached one is
//     ignored and acknowledged with the cached version;
//  3. look up the type's callback;
//  4. call it to hot-reload (a deleted type reloads the local default);
//  5. publish the ack, applied or failed with the error text;
//  6. without a callback the config is still cached, and acknowledged as applied.
func (h *ConfigHandler) Handle(ctx context.Context, cmd protocol.Command) (protocol.Ack, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	log := h.opts.Log.With("command_id", cmd.CommandID, "config_type", cmd.ConfigType, "version", cmd.Version)

	if cmd.ConfigType == "" {
		log.Warn("config update rejected: config_type is empty")
		return protocol.Ack{}, false
	}
	ctx, span := h.opts.Tracer.Start(ctx, "config.apply", trace.WithAttributes(
		attribute.String("config_type", cmd.ConfigType), attribute.Int64("version", cmd.Version),
		attribute.String("origin", "push")))
	defer span.End()

	if h.opts.Verify != nil {
		if err := h.opts.Verify(cmd); err != nil {
			log.Warn("config update refused: signature does not verify", "error", err)
			span.SetAttributes(attribute.Bool("refused", true))
			return h.ack(ctx, cmd.ConfigType, cmd.Version, err), true
		}
	}
	deleted := agentconfig.IsNull(cmd.Payload)
	if !deleted {
		if err := agentconfig.ValidateDelivered(cmd.ConfigType, cmd.Payload, cmd.SecretFields); err != nil {
			log.Warn("config update rejected", "error", err)
			return h.ack(ctx, cmd.ConfigType, cmd.Version, err), true
		}
		if h.opts.Check != nil {
			if err := h.opts.Check(cmd.ConfigType, cmd.Payload); err != nil {
				log.Warn("config update refused by the local policy", "error", err)
				span.SetAttributes(attribute.Bool("refused", true))
				return h.ack(ctx, cmd.ConfigType, cmd.Version, err), true
			}
		}
	} else if !agentconfig.Known(cmd.ConfigType) {
		err := fmt.Errorf("unknown config type %q", cmd.ConfigType)
		log.Warn("config update rejected", "error", err)
		return h.ack(ctx, cmd.ConfigType, cmd.Version, err), true
	}

	if h.alreadyApplied(cmd.ConfigType, cmd.Version, deleted) {
		// A redelivered push (e.g. a fan-out redone after a crash, or a refetch after a reconnect):
		// applying it again would restart components for nothing. Acknowledge it again instead.
		log.Info("config update already applied")
		return h.ack(ctx, cmd.ConfigType, cmd.Version, nil), true
	}

	errs, err := h.opts.Cache.Apply(configcache.Change{ConfigType: cmd.ConfigType, Data: cmd.Payload, Version: cmd.Version,
		SecretFields: cmd.SecretFields, Delete: deleted, Statement: cmd.Statement})
	if errs[0] != nil {
		err = errs[0]
	}
	var stale *configcache.StaleError
	switch {
	case errors.As(err, &stale):
		log.Info("config update ignored: older than the cached version", "cached_version", stale.Current)
		span.SetAttributes(attribute.Bool("stale", true))
		return h.ack(ctx, cmd.ConfigType, stale.Current, nil), true
	case errors.Is(err, configcache.ErrNotPersisted):
		// In effect in memory, not on disk: the next successful write or fetch catches up.
		log.Warn("config cached in memory only", "error", err)
	case err != nil:
		// Refused before it changed anything (e.g. a secret pointer that names no value).
		log.Warn("config update rejected", "error", err)
		return h.ack(ctx, cmd.ConfigType, cmd.Version, err), true
	}

	data := cmd.Payload
	if deleted {
		data = h.opts.LocalDefault(cmd.ConfigType)
		log.Info("config deleted; falling back to the local default", "has_local_default", data != nil)
	}
	applyErr := h.Invoke(ctx, cmd.ConfigType, data, cmd.Version)
	if applyErr != nil {
		log.Warn("config apply failed", "error", applyErr)
	} else {
		log.Info("config applied")
	}
	return h.ack(ctx, cmd.ConfigType, cmd.Version, applyErr), true
}

// Invoke calls the callback of configType, if any (step 6: none is not an error). Callers other than
// Handle hold Lock.
func (h *ConfigHandler) Invoke(ctx context.Context, configType string, data json.RawMessage, version int64) (err error) {
	h.cbMu.RLock()
	cb, ok := h.callbacks[configType]
	h.cbMu.RUnlock()
	if !ok {
		return nil
	}
	defer func() {
		// A callback bug must fail this apply, not the agent.
		if r := recover(); r != nil {
			err = fmt.Errorf("%s callback panicked: %v", configType, r)
		}
	}()
	return cb(ctx, configType, data, version)
}

// Ack publishes an apply acknowledgement for configType at version: applied when applyErr is nil,
// failed with its text otherwise.
func (h *ConfigHandler) Ack(ctx context.Context, configType string, version int64, applyErr error) protocol.Ack {
	return h.ack(ctx, configType, version, applyErr)
}

// alreadyApplied reports whether version of configType was applied successfully and is what the cache
// holds in full (a redacted entry after a restart still needs its secrets applied). Callers hold mu.
func (h *ConfigHandler) alreadyApplied(configType string, version int64, deleted bool) bool {
	last, ok := h.lastAck[configType]
	if !ok || last.Version != version || last.Status != protocol.AckApplied {
		return false
	}
	e, cached := h.opts.Cache.Get(configType)
	if deleted {
		return !cached
	}
	return cached && e.Version == version && !e.Redacted
}

// RepublishAcks publishes the newest ack of every config type again. The agent calls it after each
// reconnect; ack-ingest's upsert makes a repeated ack harmless.
func (h *ConfigHandler) RepublishAcks() {
	h.mu.Lock()
	acks := make([]protocol.Ack, 0, len(h.lastAck))
	for _, a := range h.lastAck {
		acks = append(acks, a)
	}
	h.mu.Unlock()
	if h.opts.Acks == nil {
		return
	}
	for _, a := range acks {
		if err := h.opts.Acks.PublishAck(context.Background(), a); err != nil {
			h.opts.Log.Warn("ack not republished", "config_type", a.ConfigType, "version", a.Version, "error", err)
		}
	}
}

func (h *ConfigHandler) ack(ctx context.Context, configType string, version int64, applyErr error) protocol.Ack {
	a := protocol.Ack{AgentID: h.opts.AgentID, ConfigType: configType, Version: version,
		Status: protocol.AckApplied, AppliedAt: h.opts.Now().UTC()}
	if applyErr != nil {
		a.Status = protocol.AckFailed
		a.Error = applyErr.Error()
		span := trace.SpanFromContext(ctx)
		span.SetStatus(codes.Error, "apply failed")
	}
	if last, ok := h.lastAck[configType]; !ok || version >= last.Version {
		if h.lastAck == nil {
			h.lastAck = map[string]protocol.Ack{}
		}
		h.lastAck[configType] = a
	}
	if h.opts.Acks != nil {
		if err := h.opts.Acks.PublishAck(ctx, a); err != nil {
			h.opts.Log.Warn("ack not published", "config_type", configType, "version", version, "error", err)
		}
	}
	return a
}
