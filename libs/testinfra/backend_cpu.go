package testinfra

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
)

// BackendCPU is the CPU time (user + system) the PostgreSQL backends serving pool's database have used,
// read from /proc (the server runs on this machine in tests). Benchmarks report the difference over
// their loop per row or per op: it holds on a shared machine better than the wall clock.
func BackendCPU(t testing.TB, pool *pgxpool.Pool) time.Duration {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
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

// ProcessCPU is the CPU time (user + system, GC included) this process has used. Benchmarks report the
// difference over their loop per op: on a shared machine it varies less than the wall time.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
