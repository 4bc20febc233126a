// Package ackingest wires the ack-ingest service: durable JetStream consumers that write agents' apply
// acknowledgements into host_config_apply_status and their heartbeats into the hosts table, in batches.
// The consumers are libs/platform/jsconsumer consumers in their batched shape (large pulls split into
// one batch per writer); the ingest package decides each record's outcome (done, retry, drop) and owns
// the rules on agent-reported values (applied_at clock skew, the text of an unexplained failure).
//
// Module needs a *zap.Logger, a *pgxpool.Pool and a jetstream.JetStream from the app (the platform
// modules) and loads its own Config from CONFIGSYNC_INGEST_* variables; it provides only a readiness
// check, so several services can share one fx app (tools/devstack).
package ackingest

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/libs/platform/envconfig"
	"github.com/configsync/configsync/libs/platform/health"
	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingestmetrics"
	"github.com/configsync/configsync/services/ack-ingest/internal/natsapi"
	"github.com/configsync/configsync/services/ack-ingest/internal/postgres"
)

// Config tunes ack-ingest. Every field has a default.
type Config struct {
	// BatchSize is the most acks (or heartbeats) written with one statement.
	BatchSize int `env:"CONFIGSYNC_INGEST_BATCH_SIZE" default:"1000"`
	// BatchWait is how long a writer waits for a batch to fill once it holds a message.
	BatchWait time.Duration `env:"CONFIGSYNC_INGEST_BATCH_WAIT" default:"5ms"`
	// Writers is how many batches per consumer are written concurrently.
	Writers int `env:"CONFIGSYNC_INGEST_WRITERS" default:"2"`
	// AckWait is how long JetStream waits for a message to be settled before redelivering it.
	AckWait time.Duration `env:"CONFIGSYNC_INGEST_ACK_WAIT" default:"30s"`
	// RetryDelay is the first redelivery delay after a database error (doubling up to MaxRetryDelay).
	RetryDelay    time.Duration `env:"CONFIGSYNC_INGEST_RETRY_DELAY" default:"1s"`
	MaxRetryDelay time.Duration `env:"CONFIGSYNC_INGEST_MAX_RETRY_DELAY" default:"30s"`
	// HostCacheSize bounds the agent_id -> host_id cache.
	HostCacheSize int `env:"CONFIGSYNC_INGEST_HOST_CACHE_SIZE" default:"100000"`
	// RepairBackoff is the wait before a repair of the same (host, type, version) is asked again,
	// doubling per attempt up to RepairMaxBackoff (anti-entropy; the first repair is asked at once).
	RepairBackoff    time.Duration `env:"CONFIGSYNC_REPAIR_BACKOFF" default:"30s"`
	RepairMaxBackoff time.Duration `env:"CONFIGSYNC_REPAIR_MAX_BACKOFF" default:"30m"`
	// RepairGrace: a heartbeat stored less than this after a config's last write is not counted behind
	// on it (the push is on its way), so a push still in flight is not repaired as well.
	RepairGrace time.Duration `env:"CONFIGSYNC_REPAIR_GRACE" default:"5s"`
}

// Module runs the ack and heartbeat consumers for the app's lifetime.
var Module = fx.Module("ack-ingest",
	envconfig.Provide[Config](),
	fx.Provide(
		fx.Private,
		func(cfg Config, pool *pgxpool.Pool, js jetstream.JetStream, log *zap.Logger, m metrics.Optional) *Service {
			m.Metrics.BuildInfo("ack-ingest")
			return newService(cfg, pool, js, log.Named("ack-ingest"), m.Metrics)
		},
	),
	fx.Provide(health.AsCheck(func(s *Service) health.Check {
		return health.Check{Name: "ack-ingest", Func: s.Ready}
	})),
	fx.Invoke(func(lc fx.Lifecycle, s *Service) {
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error { s.Start(); return nil },
			OnStop:  s.Stop,
		})
	}),
)

// Service is ack-ingest ready to be started.
type Service struct {
	consumers *natsapi.Consumers
	ingester  *ingest.Ingester
	entropy   *ingest.AntiEntropy
	entropyGo app.Background
}

// New builds ack-ingest without fx: consumers on js writing to pool.
func New(cfg Config, pool *pgxpool.Pool, js jetstream.JetStream, log *zap.Logger) *Service {
	return newService(cfg, pool, js, log, nil)
}

// newService is New reporting to m (nil records nothing).
func newService(cfg Config, pool *pgxpool.Pool, js jetstream.JetStream, log *zap.Logger, m *metrics.Metrics) *Service {
	store := postgres.NewStore(pool)
	entropy := ingest.NewAntiEntropy(store, natsapi.NewRepairPublisher(js.Conn()), ingest.RepairOptions{
		Backoff: cfg.RepairBackoff, MaxBackoff: cfg.RepairMaxBackoff, Grace: cfg.RepairGrace,
	}, log)
	ingestmetrics.Repairs(m, entropy.Stats)
	// The backlog still waiting in JetStream, and how full the streams are.
	m.RegisterStreams(js,
		metrics.StreamTarget{Stream: protocol.AcksStream, Consumers: []string{natsapi.AcksDurable}},
		metrics.StreamTarget{Stream: protocol.HeartbeatsStream, Consumers: []string{natsapi.HeartbeatsDurable}})
	ingester := ingest.NewIngester(ingestmetrics.Store(store, m), ingest.NewHostDirectory(store, cfg.HostCacheSize), entropy, log)
	return &Service{ingester: ingester, entropy: entropy, consumers: natsapi.NewConsumers(js, ingester, natsapi.BatchOptions{
		BatchSize:     cfg.BatchSize,
		BatchWait:     cfg.BatchWait,
		Writers:       cfg.Writers,
		AckWait:       cfg.AckWait,
		RetryDelay:    cfg.RetryDelay,
		MaxRetryDelay: cfg.MaxRetryDelay,
		Observer:      m.Consumers(),
	}, log)}
}

// Start begins consuming in the background (creating the durable consumers, retrying while JetStream
// is unavailable) and checking deferred hosts (anti-entropy); it does not block.
func (s *Service) Start() {
	s.entropyGo.Start(s.entropy.Run)
	s.consumers.Start()
}

// Stop stops pulling and waits for the batches in hand to be written and settled until ctx is done.
func (s *Service) Stop(ctx context.Context) error {
	err := s.consumers.Stop(ctx)
	// No deadline for anti-entropy: its pass in hand ends on cancellation.
	_ = s.entropyGo.Stop(context.Background())
	return err
}

// Stats counts what ack-ingest dropped and repaired since start.
type Stats struct {
	// RevokedAcks and RevokedHeartbeats: records of revoked hosts dropped, never stored.
	RevokedAcks, RevokedHeartbeats int64
	// Repairs: (host, type) repairs asked of delivery; RepairsBackedOff: gaps left alone because the
	// last repair of that version is too recent; RepairsRefused: gaps at a version the agent acked
	// failed (deferred by the backoff); RepairsClosed: repairs closed by a heartbeat at the version.
	Repairs, RepairsBackedOff, RepairsRefused, RepairsClosed int64
}

// Stats returns the counters.
func (s *Service) Stats() Stats {
	d, r := s.ingester.Drops(), s.entropy.Stats()
	return Stats{RevokedAcks: d.RevokedAcks, RevokedHeartbeats: d.RevokedHeartbeats,
		Repairs: r.Requested, RepairsBackedOff: r.BackedOff, RepairsRefused: r.Refused, RepairsClosed: r.Closed}
}

// Ready reports whether both consumers are running.
func (s *Service) Ready(ctx context.Context) error { return s.consumers.Ready(ctx) }
