package tracing

import (
	"context"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/metrics"
)

// Module installs the process's tracer provider for service (see Setup: nothing without
// OTEL_EXPORTER_OTLP_ENDPOINT) and flushes it when the app stops.
func Module(service string) fx.Option {
	return fx.Module("tracing", fx.Invoke(func(lc fx.Lifecycle, log *zap.Logger) error {
		shutdown, err := Setup(context.Background(), service, metrics.Version())
		if err != nil {
			return err
		}
		if Enabled() {
			log.Info("tracing exports over OTLP", zap.String("service", service))
		}
		lc.Append(fx.Hook{OnStop: shutdown})
		return nil
	}))
}
