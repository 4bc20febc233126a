package metrics

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/outbox"
)

// Module provides the process's *Metrics (one registry, shared by every service module of the app)
// and, when METRICS_ADDR is set, a *Listener serving it on that address for the app's lifetime. The
// app's *pgxpool.Pool and outbox relay, if any, are collected. Service modules take *Metrics and register their own
// collectors; several of them in one app (tools/devstack) share the families.
var Module = fx.Module("metrics",
	envconfig.Provide[Config](),
	fx.Provide(New, newLifecycleListener),
	fx.Invoke(registerPool, observeOutbox, func(*Listener) {}),
)

// newLifecycleListener returns the listener (nil when cfg.Addr is empty), started OnStart and shut down
// OnStop.
func newLifecycleListener(lc fx.Lifecycle, cfg Config, m *Metrics, log *zap.Logger) *Listener {
	if cfg.Addr == "" {
		return nil
	}
	l := NewListener(cfg.Addr, m, log)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { return l.Start() },
		OnStop:  l.Shutdown,
	})
	return l
}

type poolIn struct {
	fx.In
	Metrics *Metrics
	Pool    *pgxpool.Pool `optional:"true"`
}

func registerPool(in poolIn) {
	if in.Pool != nil {
		in.Metrics.RegisterPool(in.Pool)
	}
}

type relayIn struct {
	fx.In
	Metrics *Metrics
	Relay   *outbox.Relay `optional:"true"`
}

// observeOutbox makes the app's outbox relay report to m (before the relay starts: fx runs invokes
// before OnStart hooks).
func observeOutbox(in relayIn) {
	if in.Relay != nil {
		in.Relay.SetObserver(in.Metrics.Outbox(in.Relay))
	}
}

// Optional is embedded in a service module's fx parameters to take the app's *Metrics when the app
// composes Module, and nil (recording nothing) otherwise.
type Optional struct {
	fx.In
	Metrics *Metrics `optional:"true"`
}
