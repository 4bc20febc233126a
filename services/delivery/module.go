// Package delivery wires the delivery service: it answers agents' startup config fetches and fans
// config-change events out to online agents as config_update commands. It keeps no state of its own;
// effective configs come from the resolver service and credentials from the credential service, both
// over NATS request-reply (libs/platform/natsrpc clients). Fetches are answered by a natsrpc Batcher
// (bounded queue, batches growing with the load); config-change events by a libs/platform/jsconsumer
// consumer that pulls one event per free worker.
//
// Module needs a *zap.Logger, a *nats.Conn and a jetstream.JetStream from the app (the platform
// modules) and loads its own Config from CONFIGSYNC_* variables; it provides only a readiness check,
// so several services can share one fx app (tools/devstack).
package delivery

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/health"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/libs/platform/natsrpc"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/delivery/internal/deliver"
	"github.com/configsync/configsync/services/delivery/internal/deliverymetrics"
	"github.com/configsync/configsync/services/delivery/internal/natsapi"
)

// Config tunes delivery. Every field has a default.
type Config struct {
	// OnlineWindow: hosts whose last heartbeat is older are offline and get no push (3 heartbeats).
	OnlineWindow time.Duration `env:"CONFIGSYNC_ONLINE_WINDOW" default:"90s"`
	// FetchWorkers bounds the fetches answered at once per instance, in batches of up to FetchBatch
	// (FetchWorkers/FetchBatch batches at a time). FetchQueue is how many may wait; beyond that a fetch
	// is refused at once with "unavailable" and the agent retries later.
	FetchWorkers int `env:"CONFIGSYNC_FETCH_WORKERS" default:"256"`
	FetchQueue   int `env:"CONFIGSYNC_FETCH_QUEUE" default:"4096"`
	// FetchBatch is the most fetches answered together (one resolver request, one credential
	// injection); FetchBatchWait how long a batch waits for more while others are running. At 128 (two
	// batches at a time) a 50,000-agent herd cost 145-152 µs of services + PostgreSQL CPU per fetch
	// and had a p99 of 66-130 ms, against 153-156 µs and 245-346 ms at 64 (three runs each).
	FetchBatch     int           `env:"CONFIGSYNC_FETCH_BATCH" default:"128"`
	FetchBatchWait time.Duration `env:"CONFIGSYNC_FETCH_BATCH_WAIT" default:"2ms"`
	// FetchTimeout bounds a fetch from its arrival: a fetch still queued by then is dropped.
	FetchTimeout time.Duration `env:"CONFIGSYNC_FETCH_TIMEOUT" default:"10s"`
	// UpstreamTimeout bounds one request to the resolver or credential service.
	UpstreamTimeout time.Duration `env:"CONFIGSYNC_UPSTREAM_TIMEOUT" default:"5s"`
	// PushPageSize is how many hosts are resolved and pushed per page.
	PushPageSize int `env:"CONFIGSYNC_PUSH_PAGE_SIZE" default:"1000"`
	// PushConcurrency is how many events one instance fans out at a time.
	PushConcurrency int `env:"CONFIGSYNC_PUSH_CONCURRENCY" default:"4"`
	// PushAckWait is JetStream's redelivery timeout for an event (extended while a fan-out runs).
	PushAckWait time.Duration `env:"CONFIGSYNC_PUSH_ACK_WAIT" default:"60s"`
	// PushRetryDelay is the first delay before a failed fan-out is redone (doubling up to 1 minute).
	PushRetryDelay time.Duration `env:"CONFIGSYNC_PUSH_RETRY_DELAY" default:"1s"`
	// IngestLagAfter: when ack-ingest's heartbeat consumer has heartbeats waiting and has handed none
	// out for this long, stored heartbeats are stale and pushes go to every host in scope.
	IngestLagAfter time.Duration `env:"CONFIGSYNC_INGEST_LAG_AFTER" default:"5s"`
	// RepairQueue is how many anti-entropy repair requests may wait; more are dropped (and asked
	// again by ack-ingest after its backoff).
	RepairQueue int `env:"CONFIGSYNC_REPAIR_QUEUE" default:"64"`

	// LosePush, when set (fault tests only; no variable sets it), makes the event fan-out lose the
	// commands it answers true for, as a network would. Repairs are never lost this way.
	LosePush func(agentID string, command []byte) bool
}

// Module runs the fetch endpoint and the config-change consumer for the app's lifetime.
var Module = fx.Module("delivery",
	envconfig.Provide[Config](),
	fx.Provide(
		fx.Private,
		func(cfg Config, nc *nats.Conn, js jetstream.JetStream, log *zap.Logger, m metrics.Optional) *Service {
			m.Metrics.BuildInfo("delivery")
			return newService(cfg, nc, js, log.Named("delivery"), m.Metrics)
		},
	),
	fx.Provide(health.AsCheck(func(s *Service) health.Check {
		return health.Check{Name: "delivery", Func: s.Ready}
	})),
	fx.Invoke(func(lc fx.Lifecycle, s *Service) {
		lc.Append(fx.Hook{OnStart: func(context.Context) error { return s.Start() }, OnStop: s.Stop})
	}),
)

// Service is delivery ready to be started.
type Service struct {
	nc       *nats.Conn
	fetch    *natsapi.FetchServer
	events   *natsapi.EventConsumer
	repairer *deliver.Repairer
	repairs  *natsapi.RepairServer
}

// New builds delivery without fx, on nc (requests, commands) and js (events).
func New(cfg Config, nc *nats.Conn, js jetstream.JetStream, log *zap.Logger) *Service {
	return newService(cfg, nc, js, log, nil)
}

// newService is New reporting to m (nil records nothing).
func newService(cfg Config, nc *nats.Conn, js jetstream.JetStream, log *zap.Logger, m *metrics.Metrics) *Service {
	upstream := natsapi.NewUpstreamClient(nc, cfg.UpstreamTimeout) // the resolver and the credential service
	fetcher := deliver.NewFetcher(upstream, upstream, log)
	lag := natsapi.NewIngestLag(natsapi.JetStreamConsumers{JS: js}, cfg.IngestLagAfter, log)
	var pushPublisher deliver.CommandPublisher = deliverymetrics.Commands(natsapi.NewCommandPublisher(nc), m)
	if cfg.LosePush != nil {
		pushPublisher = natsapi.LossyPublisher{CommandPublisher: pushPublisher, Lose: cfg.LosePush}
	}
	pusher := deliver.NewPusher(upstream, upstream, pushPublisher, deliver.PushOptions{
		OnlineWindow:  cfg.OnlineWindow,
		PageSize:      cfg.PushPageSize,
		IngestLagging: lag.Lagging,
	}, log)
	repairer := deliver.NewRepairer(fetcher, deliverymetrics.Commands(natsapi.NewCommandPublisher(nc), m), log)
	fetch := natsapi.NewFetchServer(fetcher, natsapi.FetchOptions{
		BatchOptions: natsrpc.BatchOptions{
			Workers:   cfg.FetchWorkers,
			Queue:     cfg.FetchQueue,
			Timeout:   cfg.FetchTimeout,
			Batch:     cfg.FetchBatch,
			BatchWait: cfg.FetchBatchWait,
		},
		Observer: m.RPC(),
	}, log)
	deliverymetrics.QueueDepth(m, fetch.Queued)
	deliverymetrics.Repairs(m, repairer.Stats)
	// The events still waiting in JetStream, and how full the stream is.
	m.RegisterStreams(js, metrics.StreamTarget{Stream: protocol.EventsStream, Consumers: []string{natsapi.PushDurable}})
	return &Service{
		nc:       nc,
		repairer: repairer,
		repairs:  natsapi.NewRepairServer(repairer, cfg.RepairQueue, log),
		fetch:    fetch,
		events: natsapi.NewEventConsumer(js, pusher, natsapi.EventOptions{
			Concurrency: cfg.PushConcurrency,
			AckWait:     cfg.PushAckWait,
			RetryDelay:  cfg.PushRetryDelay,
			Observer:    m.Consumers(),
		}, log),
	}
}

// Start registers the fetch endpoint and starts consuming config-change events; it does not block.
func (s *Service) Start() error {
	if err := s.fetch.Start(s.nc); err != nil {
		return err
	}
	if err := s.repairs.Start(s.nc); err != nil {
		return errors.Join(err, s.fetch.Stop(context.Background()))
	}
	s.events.Start()
	return nil
}

// RepairStats counts the anti-entropy repairs delivery sent since start.
func (s *Service) RepairStats() deliver.RepairStats { return s.repairer.Stats() }

// Stop stops both, letting in-flight fetches and fan-outs finish until ctx is done.
func (s *Service) Stop(ctx context.Context) error {
	return errors.Join(s.repairs.Stop(ctx), s.fetch.Stop(ctx), s.events.Stop(ctx))
}

// Ready reports whether events are being consumed.
func (s *Service) Ready(ctx context.Context) error { return s.events.Ready(ctx) }
