package outbox

import (
	"context"

	"go.uber.org/fx"

	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/metrics"
)

// Module runs a Relay (options from OUTBOX_* variables) for the application's lifetime: started OnStart,
// cancelled and awaited OnStop, before the pool and NATS connection it uses are closed. With
// metrics.Module in the app it reports publishes and the backlog (configsync_outbox_*).
var Module = fx.Module("outbox",
	envconfig.Provide[RelayOptions](),
	fx.Provide(NewRelay),
	fx.Invoke(runRelay),
)

func runRelay(lc fx.Lifecycle, r *Relay, m metrics.Optional) {
	r.SetObserver(m.Metrics.Outbox(r))
	app.RunForLifetime(lc, func(ctx context.Context) { _ = r.Run(ctx) })
}
