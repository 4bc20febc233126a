package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/resolver/internal/keyfile"
	"github.com/configsync/configsync/services/resolver/internal/postgres"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
	"github.com/configsync/configsync/services/resolver/internal/seed"
)

// BenchmarkResolveSets32Signed is BenchmarkResolveSets32 with signing on, as devstack and production
// run: every config carries its statement and every host its identity statement (each signed once
// and stored, before the timer starts). pg-us/op is the CPU the PostgreSQL backends used per batch.
func BenchmarkResolveSets32Signed(b *testing.B) {
	pool := testinfra.Postgres(b)
	db := seed.New(b, pool)
	env := db.Environment("fetch")
	db.Hosts(env, "fetch", 1000)
	db.PutEnv(env, "labels", `{"static":{"env":"prod","team":"core"}}`)
	db.PutEnv(env, "intervals", `{"metrics":"30s","heartbeat":"30s"}`)
	db.PutEnv(env, "watch_files", `{"paths":["/etc"],"exclude_patterns":["*.swp"]}`)
	db.PutEnv(env, "collectors", `[{"type":"http","name":"web","url":"http://x"}]`)
	db.OverrideEvery(env, "labels", `{"static":{"team":"web"}}`, 10)
	db.Analyze()
	keyPath := filepath.Join(b.TempDir(), "signing.key")
	if _, err := keyfile.CreateFile(keyPath); err != nil {
		b.Fatal(err)
	}
	signer, err := keyfile.LoadFile(keyPath)
	if err != nil {
		b.Fatal(err)
	}
	store := postgres.NewStore(pool)
	r := resolve.New(store, resolve.Options{Signer: signer, Statements: store})
	ctx := context.Background()
	resolveSets := func(i int) {
		batch := make([]string, 32)
		for k := range batch {
			batch[k] = fmt.Sprintf("fetch-%d", (i+k)%1000+1)
		}
		reply, err := r.ResolveSets(ctx, protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract, AgentIDs: batch})
		if err != nil || len(reply.Sets) == 0 || reply.Sets[0].Hosts[0].Identity == nil {
			b.Fatalf("resolve sets: %v", err)
		}
	}
	for i := 0; i < 1000; i += 32 {
		resolveSets(i) // every statement signed and stored
	}
	cpu0 := backendCPU(b, pool)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		resolveSets(i)
		i += 32
	}
	b.StopTimer()
	b.ReportMetric(float64((backendCPU(b, pool)-cpu0).Microseconds())/float64(b.N), "pg-us/op")
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
		// After the command (in parentheses, it may hold spaces), utime and stime are fields 12 and 13.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		for _, i := range []int{11, 12} {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}
