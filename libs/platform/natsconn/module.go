package natsconn

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/backoff"
	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/health"
)

// Module provides the application's *nats.Conn (from NATS_* variables; drained OnStop) and a
// jetstream.JetStream on it, ensures the JetStream streams OnStart (unless NATS_MANAGE_STREAMS=false),
// and contributes the "nats" readiness
// check.
var Module = fx.Module("natsconn",
	envconfig.Provide[Config](),
	fx.Provide(newLifecycleConn, newJetStream),
	fx.Provide(health.AsCheck(func(nc *nats.Conn) health.Check {
		return health.Check{Name: "nats", Func: Check(nc)}
	})),
)

func newLifecycleConn(lc fx.Lifecycle, cfg Config, log *zap.Logger) (*nats.Conn, error) {
	nc, err := Connect(cfg, log)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{OnStop: func(ctx context.Context) error { return Drain(ctx, nc) }})
	return nc, nil
}

func newJetStream(lc fx.Lifecycle, nc *nats.Conn, cfg Config, log *zap.Logger) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsconn: jetstream: %w", err)
	}
	log = log.Named("nats")
	if !cfg.ManageStreams {
		return js, nil
	}
	lc.Append(fx.Hook{OnStart: func(ctx context.Context) error {
		return ensureStreamsRetrying(ctx, js, StreamOptions{Replicas: cfg.StreamReplicas}, log)
	}})
	return js, nil
}

// ensureStreamsRetrying retries EnsureStreamsWith until it succeeds or ctx (fx's start timeout) ends:
// at start NATS may still be coming up, or JetStream not yet ready on a fresh cluster.
func ensureStreamsRetrying(ctx context.Context, js jetstream.JetStream, opts StreamOptions, log *zap.Logger) error {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := EnsureStreamsWith(actx, js, opts)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		log.Warn("jetstream streams not ensured yet, retrying", zap.Int("attempt", attempt), zap.Duration("backoff", wait), zap.Error(err))
		if !backoff.Sleep(ctx, wait) {
			return err
		}
		wait = min(wait*2, 2*time.Second)
	}
}
