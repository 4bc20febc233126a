package pgdb

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/health"
	"github.com/configsync/configsync/libs/platform/metrics"
)

// Module provides the application's *pgxpool.Pool (from DATABASE_* variables). The constructor does not
// block: the pool connects lazily, and an OnStart hook waits for the database (bounded by fx's start
// timeout) and migrates it before any later OnStart hook uses the pool. The pool is closed OnStop.
// It also contributes the "postgres" readiness check and, when the app has metrics.Module, the pool's
// statistics (configsync_db_pool_*).
var Module = fx.Module("pgdb",
	envconfig.Provide[Config](),
	fx.Provide(newLifecyclePool),
	fx.Provide(health.AsCheck(func(pool *pgxpool.Pool) health.Check {
		return health.Check{Name: "postgres", Func: Check(pool)}
	})),
	fx.Invoke(func(pool *pgxpool.Pool, m metrics.Optional) {
		m.Metrics.RegisterPool(pool, func() metrics.PoolStat { return pool.Stat() })
	}),
)

func newLifecyclePool(lc fx.Lifecycle, cfg Config, log *zap.Logger) (*pgxpool.Pool, error) {
	pool, err := NewPool(cfg)
	if err != nil {
		return nil, err
	}
	log = log.Named("pgdb")
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error { return Start(ctx, pool, cfg, log) },
		OnStop: func(context.Context) error {
			pool.Close()
			return nil
		},
	})
	return pool, nil
}
