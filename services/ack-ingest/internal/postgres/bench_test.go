package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
	"github.com/configsync/configsync/services/ack-ingest/internal/seed"
)

// BenchmarkUpdateHeartbeats measures the heartbeat write alone, in batches of 1,000 hosts (a busy
// fleet) and of 20 (the batches a boot herd makes: heartbeats trickle in as agents get their configs),
// of 10,000 hosts. pg-us/row is the CPU the PostgreSQL backends used per row written (from /proc, so it
// holds on a shared machine better than the wall clock).
func BenchmarkUpdateHeartbeats(b *testing.B) {
	for _, size := range []int{1000, 20} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) { benchUpdateHeartbeats(b, size) })
	}
}

func benchUpdateHeartbeats(b *testing.B, size int) {
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
	benchWrites(b, pool, rows, size, func(ctx context.Context, _ int, batch []ingest.HostHeartbeat) error {
		now := time.Now()
		for j := range batch {
			batch[j].ReceivedAt = now
		}
		_, err := s.UpdateHeartbeats(ctx, batch)
		return err
	})
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
	benchWrites(b, pool, rows, 1000, func(ctx context.Context, i int, batch []ingest.ApplyStatus) error {
		for j := range batch {
			batch[j].Version = int64(i + 1)
			batch[j].AppliedAt = time.Now()
		}
		return s.UpsertApplyStatuses(ctx, batch)
	})
}

// benchWrites times b.N writes of batches of size rows, taken round the slice in turn; write stamps
// batch i and writes it. It reports rows/s, pg-us/row, the CPU the PostgreSQL backends used per row, and
// go-us/row, this process's CPU per row (the store's encoding and decoding).
func benchWrites[T any](b *testing.B, pool *pgxpool.Pool, rows []T, size int, write func(ctx context.Context, i int, batch []T) error) {
	ctx := context.Background()
	cpu0, self0 := testinfra.BackendCPU(b, pool), testinfra.ProcessCPU()
	b.ResetTimer()
	start := time.Now()
	written := 0
	for i := 0; i < b.N; i++ {
		lo := (i * size) % len(rows)
		batch := rows[lo:min(lo+size, len(rows))]
		if err := write(ctx, i, batch); err != nil {
			b.Fatal(fmt.Errorf("batch %d: %w", i, err))
		}
		written += len(batch)
	}
	elapsed := time.Since(start)
	self := testinfra.ProcessCPU() - self0
	b.StopTimer()
	b.ReportMetric(float64(written)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64((testinfra.BackendCPU(b, pool)-cpu0).Microseconds())/float64(written), "pg-us/row")
	b.ReportMetric(float64(self.Microseconds())/float64(written), "go-us/row")
}
