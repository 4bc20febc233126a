package postgres

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
	"github.com/configsync/configsync/services/ack-ingest/internal/seed"
)

// BenchmarkUpdateHeartbeats measures the heartbeat write alone, in batches of 1,000 hosts (a busy
// fleet) and of 20 (the batches a boot herd makes: heartbeats trickle in as agents get their configs),
// of 10,000 hosts. pg-us/row is the CPU the PostgreSQL backends used per row written (from /proc, so it
// holds on a shared machine better than the wall clock); go-us/row the CPU this process used per row
// (the store's encoding of the batch and decoding of what it returns).
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
	ctx := context.Background()
	cpu0, self0 := backendCPU(b, pool), processCPU(b)
	b.ResetTimer()
	start := time.Now()
	written := 0
	for i := 0; i < b.N; i++ {
		lo := (i * size) % len(rows)
		batch := rows[lo:min(lo+size, len(rows))]
		now := time.Now()
		for j := range batch {
			batch[j].ReceivedAt = now
		}
		if _, err := s.UpdateHeartbeats(ctx, batch); err != nil {
			b.Fatal(err)
		}
		written += len(batch)
	}
	elapsed := time.Since(start)
	self := processCPU(b) - self0
	b.StopTimer()
	b.ReportMetric(float64(written)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64((backendCPU(b, pool)-cpu0).Microseconds())/float64(written), "pg-us/row")
	b.ReportMetric(float64(self.Microseconds())/float64(written), "go-us/row")
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
	cpu0 := backendCPU(b, pool)
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
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(written)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64((backendCPU(b, pool)-cpu0).Microseconds())/float64(written), "pg-us/row")
}

// processCPU is the CPU time (user + system) this process has used.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU is the CPU time (user + system) the PostgreSQL backends serving pool's database have used,
// read from /proc (the server runs on this machine in tests).
func backendCPU(b *testing.B, pool *pgxpool.Pool) time.Duration {
	b.Helper()
	rows, err := pool.Query(context.Background(), "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	var ticks int64
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // a backend that has exited since
		}
		// Fields after the command (which is in parentheses and may hold spaces): utime and stime are
		// the 12th and 13th.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		for _, i := range []int{11, 12} {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}
