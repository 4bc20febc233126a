package metrics

import (
	"context"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/envconfig"
)

// Module provides the process's *Metrics (one registry, shared by every service module of the app)
// and, when METRICS_ADDR is set, a *Listener serving it on that address for the app's lifetime. The
// platform modules that see it report to it (pgdb.Module its pool, outbox.Module its relay). Service modules take *Metrics and register their own
// collectors; several of them in one app (tools/devstack) share the families.
var Module = fx.Module("metrics",
	envconfig.Provide[Config](),
	fx.Provide(New, newLifecycleListener),
	fx.Invoke(func(*Listener) {}),
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

// Optional is embedded in a service module's fx parameters to take the app's *Metrics when the app
// composes Module, and nil (recording nothing) otherwise.
type Optional struct {
	fx.In
	Metrics *Metrics `optional:"true"`
}
