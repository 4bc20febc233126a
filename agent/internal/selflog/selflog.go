// Package selflog builds the agent's own logger: a console handler whose level is a slog.LevelVar (so
// agent_settings.log_level changes it live) fanned out to a Shipper that publishes records at or above
// its own level to NATS when log_shipping is enabled.
package selflog

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/configsync/configsync/libs/protocol"
)

// New returns the agent logger writing JSON (format "json") or text lines to w at the level held by
// level, plus the shipper that also receives every record.
func New(w io.Writer, format string, level *slog.LevelVar, agentID string) (*slog.Logger, *Shipper) {
	opts := &slog.HandlerOptions{Level: level}
	var console slog.Handler
	if format == "text" {
		console = slog.NewTextHandler(w, opts)
	} else {
		console = slog.NewJSONHandler(w, opts)
	}
	sh := &Shipper{agentID: agentID}
	sh.level.Store(int64(slog.LevelWarn))
	return slog.New(&fanout{console: console, ship: &shipHandler{s: sh}}), sh
}

// ParseLevel maps the config's level names (error, warn, info, debug; "warning" too) to slog levels.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q (want error, warn, info or debug)", s)
}

// Publisher sends one encoded LogRecord; it must not block and must not log.
type Publisher func(subject string, data []byte) error

// Shipper publishes the agent's own records to protocol.LogsSubject while enabled. It never logs itself
// (that would recurse); a failed publish is counted and dropped.
type Shipper struct {
	agentID string
	enabled atomic.Bool
	level   atomic.Int64
	pub     atomic.Pointer[Publisher]

	shipped atomic.Int64
	dropped atomic.Int64
}

// SetPublisher connects the shipper to NATS; until then records are dropped.
func (s *Shipper) SetPublisher(p Publisher) { s.pub.Store(&p) }

// Apply turns shipping on or off and sets its minimum level.
func (s *Shipper) Apply(enabled bool, level slog.Level) {
	s.level.Store(int64(level))
	s.enabled.Store(enabled)
}

// Stats reports how many records were shipped and dropped so far.
func (s *Shipper) Stats() (shipped, dropped int64) { return s.shipped.Load(), s.dropped.Load() }

func (s *Shipper) wants(l slog.Level) bool {
	return s.enabled.Load() && int64(l) >= s.level.Load()
}

// fanout sends each record to the console (at the LevelVar's level) and to the shipper (at its level).
type fanout struct {
	console slog.Handler
	ship    *shipHandler
}

func (f *fanout) Enabled(ctx context.Context, l slog.Level) bool {
	return f.console.Enabled(ctx, l) || f.ship.s.wants(l)
}

func (f *fanout) Handle(ctx context.Context, r slog.Record) error {
	var err error
	if f.console.Enabled(ctx, r.Level) {
		err = f.console.Handle(ctx, r)
	}
	if f.ship.s.wants(r.Level) {
		f.ship.handle(r)
	}
	return err
}

func (f *fanout) WithAttrs(as []slog.Attr) slog.Handler {
	return &fanout{console: f.console.WithAttrs(as), ship: f.ship.withAttrs(as)}
}

func (f *fanout) WithGroup(name string) slog.Handler {
	return &fanout{console: f.console.WithGroup(name), ship: f.ship.withGroup(name)}
}

type shipHandler struct {
	s      *Shipper
	prefix string
	attrs  map[string]any
}

func (h *shipHandler) withAttrs(as []slog.Attr) *shipHandler {
	n := &shipHandler{s: h.s, prefix: h.prefix, attrs: make(map[string]any, len(h.attrs)+len(as))}
	for k, v := range h.attrs {
		n.attrs[k] = v
	}
	for _, a := range as {
		addAttr(n.attrs, h.prefix, a)
	}
	return n
}

func (h *shipHandler) withGroup(name string) *shipHandler {
	if name == "" {
		return h
	}
	return &shipHandler{s: h.s, prefix: h.prefix + name + ".", attrs: h.attrs}
}

func (h *shipHandler) handle(r slog.Record) {
	p := h.s.pub.Load()
	if p == nil {
		h.s.dropped.Add(1)
		return
	}
	rec := protocol.LogRecord{AgentID: h.s.agentID, Time: r.Time.UTC(), Level: strings.ToLower(r.Level.String()), Message: r.Message}
	if len(h.attrs) > 0 || r.NumAttrs() > 0 {
		rec.Attrs = make(map[string]any, len(h.attrs)+r.NumAttrs())
		for k, v := range h.attrs {
			rec.Attrs[k] = v
		}
		r.Attrs(func(a slog.Attr) bool {
			addAttr(rec.Attrs, h.prefix, a)
			return true
		})
	}
	if rec.Time.IsZero() {
		rec.Time = time.Now().UTC()
	}
	data, err := json.Marshal(rec)
	if err != nil {
		h.s.dropped.Add(1)
		return
	}
	if err := (*p)(protocol.LogsSubject(h.s.agentID), data); err != nil {
		h.s.dropped.Add(1)
		return
	}
	h.s.shipped.Add(1)
}

func addAttr(m map[string]any, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			addAttr(m, p, g)
		}
		return
	}
	if a.Key == "" {
		return
	}
	switch v.Kind() {
	case slog.KindDuration:
		m[prefix+a.Key] = v.Duration().String()
	case slog.KindTime:
		m[prefix+a.Key] = v.Time().UTC().Format(time.RFC3339Nano)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			m[prefix+a.Key] = err.Error()
			return
		}
		m[prefix+a.Key] = fmt.Sprint(v.Any())
	default:
		m[prefix+a.Key] = v.Any()
	}
}
