package httpserver

import (
	"context"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/health"
)

// Module provides the *Server (from HTTP_* variables, with every Check of the "readiness" group) and its
// *mux.Router; it starts listening OnStart and shuts down gracefully OnStop. Because OnStop runs in
// reverse order, the server stops taking requests before the pool and NATS connection it uses close.
var Module = fx.Module("httpserver",
	envconfig.Provide[Config](),
	fx.Provide(
		fx.Annotate(newLifecycleServer, fx.ParamTags(``, ``, ``, `group:"`+health.ReadinessGroup+`"`)),
		(*Server).Router,
	),
)

func newLifecycleServer(lc fx.Lifecycle, cfg Config, log *zap.Logger, checks []health.Check) *Server {
	s := New(cfg, log, checks)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { return s.Start() },
		OnStop:  s.Shutdown,
	})
	return s
}
