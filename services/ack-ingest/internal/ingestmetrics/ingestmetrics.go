// Package ingestmetrics times ack-ingest's database writes. Messages by kind (the acks and heartbeats
// durable consumers) and outcome, batch sizes and lag are counted by the jsconsumer observer of
// libs/platform/metrics.
package ingestmetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/configsync/configsync/libs/platform/metrics"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
)

// Store returns s timing its batch writes into m (s itself when m is nil).
func Store(s ingest.Store, m *metrics.Metrics) ingest.Store {
	if m == nil {
		return s
	}
	return &store{Store: s, commit: metrics.RegisterHistogramVec(m, "ingest", "commit_duration_seconds",
		"Time to write one batch to PostgreSQL, by kind (acks, heartbeats) and result (ok, error).",
		metrics.DurationBuckets, "kind", "result")}
}

type store struct {
	ingest.Store
	commit *prometheus.HistogramVec
}

func (s *store) observe(kind string, start time.Time, err error) {
	s.commit.WithLabelValues(kind, metrics.Result(err)).Observe(time.Since(start).Seconds())
}

func (s *store) UpsertApplyStatuses(ctx context.Context, rows []ingest.ApplyStatus) error {
	start := time.Now()
	err := s.Store.UpsertApplyStatuses(ctx, rows)
	s.observe("acks", start, err)
	return err
}

func (s *store) UpdateHeartbeats(ctx context.Context, rows []ingest.HostHeartbeat) (ingest.HeartbeatWrite, error) {
	start := time.Now()
	w, err := s.Store.UpdateHeartbeats(ctx, rows)
	s.observe("heartbeats", start, err)
	return w, err
}

// Repairs exposes anti-entropy's counters (ingest.RepairStats) as
// configsync_antientropy_repairs_total{result}: requested (handed to delivery), backed_off (left alone
// while the last repair is recent), refused (the version was acked failed) and closed (the host now
// reports the version).
func Repairs(m *metrics.Metrics, stats func() ingest.RepairStats) {
	metrics.RegisterCounterSnapshot(m, "antientropy_repairs_total",
		"Anti-entropy's (host, config type) repairs by result: requested, backed_off, refused, closed.", "result",
		func() map[string]int64 {
			s := stats()
			return map[string]int64{"requested": s.Requested, "backed_off": s.BackedOff, "refused": s.Refused, "closed": s.Closed}
		})
}
