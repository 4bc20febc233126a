package logging

import (
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/configsync/configsync/libs/platform/envconfig"
)

// Module provides the application's *zap.Logger (configured from LOG_LEVEL and LOG_FORMAT) and makes it
// fx's event logger. fx.WithLogger sits outside fx.Module so that it applies to the whole application.
var Module = fx.Options(
	fx.Module("logging",
		envconfig.Provide[Config](),
		fx.Provide(New),
	),
	fx.WithLogger(func(log *zap.Logger) fxevent.Logger {
		l := &fxevent.ZapLogger{Logger: log.Named("fx")}
		// fx reports every provide and invoke; keep those at debug, errors stay errors.
		l.UseLogLevel(zapcore.DebugLevel)
		return l
	}),
)
