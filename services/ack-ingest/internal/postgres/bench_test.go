package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
	"github.com/configsync/configsync/services/ack-ingest/internal/seed"
)

// BenchmarkUpdateHeartbeats measures the heartbeat write alone: batches of 1,000 hosts.
func BenchmarkUpdateHeartbeats(b *testing.B) {
	pool := testinfra.Postgres(b)
	hosts := seed.Hosts(b, pool, 10000)
	rows := make([]ingest.HostHeartbeat, 0, len(hosts))
	for agent, id := range hosts {
		rows = append(rows, ingest.HostHeartbeat{HostID: id, Heartbeat: ingest.Heartbeat{AgentID: agent, AgentVersion: "1.0.0",
			ConfigHash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", ConfigVersion: 5,
			ConfigVersions: map[string]int64{"collectors": 5, "labels": 2, "intervals": 1, "watch_files": 3}}})
	}
	sortHeartbeats(rows)
	s := NewStore(pool)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	written := 0
	for i := 0; i < b.N; i++ {
		lo := (i * 1000) % len(rows)
		batch := rows[lo:min(lo+1000, len(rows))]
		now := time.Now()
		for j := range batch {
			batch[j].ReceivedAt = now
		}
		if _, err := s.UpdateHeartbeats(ctx, batch); err != nil {
			b.Fatal(err)
		}
		written += len(batch)
	}
	b.ReportMetric(float64(written)/time.Since(start).Seconds(), "rows/s")
}

// BenchmarkUpsertApplyStatuses measures the ack write alone: batches of 1,000 (host, type) rows.
func BenchmarkUpsertApplyStatuses(b *testing.B) {
	pool := testinfra.Postgres(b)
	hosts := seed.Hosts(b, pool, 10000)
	var rows []ingest.ApplyStatus
	for agent, id := range hosts {
		rows = append(rows, ingest.ApplyStatus{HostID: id, Ack: ingest.Ack{AgentID: agent, ConfigType: "collectors", Status: "applied"}})
	}
	sortApply(rows)
	s := NewStore(pool)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	written := 0
	for i := 0; i < b.N; i++ {
		lo := (i * 1000) % len(rows)
		batch := rows[lo:min(lo+1000, len(rows))]
		for j := range batch {
			batch[j].Version = int64(i + 1)
			batch[j].AppliedAt = time.Now()
		}
		if err := s.UpsertApplyStatuses(ctx, batch); err != nil {
			b.Fatal(fmt.Errorf("batch %d: %w", i, err))
		}
		written += len(batch)
	}
	b.ReportMetric(float64(written)/time.Since(start).Seconds(), "rows/s")
}
