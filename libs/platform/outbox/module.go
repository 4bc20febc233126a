package outbox

import (
	"context"

	"go.uber.org/fx"

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
	var (
		cancel context.CancelFunc
		done   = make(chan struct{})
	)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			var ctx context.Context
			ctx, cancel = context.WithCancel(context.Background())
			go func() {
				defer close(done)
				_ = r.Run(ctx)
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			cancel()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
}
