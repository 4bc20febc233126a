package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/postgres"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
	"github.com/configsync/configsync/services/resolver/internal/seed"
)

// seedFetch writes an environment of 1,000 hosts with four config types at the environment level and
// every tenth host overriding labels: what an agent's startup fetch resolves. It returns the agent ids.
func seedFetch(db *seed.DB) []string {
	env := db.Environment("fetch")
	db.Hosts(env, "fetch", 1000)
	db.PutEnv(env, "labels", `{"static":{"env":"prod","team":"core"}}`)
	db.PutEnv(env, "intervals", `{"metrics":"30s","heartbeat":"30s"}`)
	db.PutEnv(env, "watch_files", `{"paths":["/etc"],"exclude_patterns":["*.swp"]}`)
	db.PutEnv(env, "collectors", `[{"type":"http","name":"web","url":"http://x"}]`)
	db.OverrideEvery(env, "labels", `{"static":{"team":"web"}}`, 10)
	db.Analyze()
	agents := make([]string, 1000)
	for i := range agents {
		agents[i] = fmt.Sprintf("fetch-%d", i+1)
	}
	return agents
}

// fetchFixture is seedFetch's fleet and an unsigned resolver over it.
func fetchFixture(b *testing.B) (*resolve.Resolver, []string) {
	b.Helper()
	_, db, store := newDB(b)
	agents := seedFetch(db)
	return resolve.New(store, resolve.Options{}), agents
}

// BenchmarkResolveAgent resolves every type of one host by agent id, as a single fetch does.
func BenchmarkResolveAgent(b *testing.B) {
	r, agents := fetchFixture(b)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		reply, err := r.Resolve(ctx, protocol.ResolveRequest{AgentID: agents[i%len(agents)]})
		if err != nil || len(reply.Configs) != 4 {
			b.Fatalf("resolve: %d configs, %v", len(reply.Configs), err)
		}
		i++
	}
}

// BenchmarkResolveSets32 resolves every type of 32 hosts by agent id into config sets in one request,
// as delivery does for a batch of fetches; ns/op is per batch. (Before the sets contract this was
// BenchmarkResolveAgents32.)
func BenchmarkResolveSets32(b *testing.B) {
	r, agents := fetchFixture(b)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		batch := make([]string, 32)
		for k := range batch {
			batch[k] = agents[(i+k)%len(agents)]
		}
		reply, err := r.ResolveSets(ctx, protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract, AgentIDs: batch})
		hosts := 0
		for _, s := range reply.Sets {
			hosts += len(s.Hosts)
		}
		if err != nil || hosts != 32 {
			b.Fatalf("resolve sets: %d hosts, %v", hosts, err)
		}
		i += 32
	}
}

// BenchmarkFetchRows reads batches of 1 to 64 hosts with FetchRows, as delivery's fetch batches do.
// Besides ns/op it reports the PostgreSQL backend's CPU per batch (pg-µs/op, from /proc: the store runs
// on a pool of one connection), which wall time hides on a shared machine: a batch's fixed cost against
// its cost per host is what decides how much batching saves the database.
func BenchmarkFetchRows(b *testing.B) {
	pool, db, _ := newDB(b)
	agents := seedFetch(db)
	cfg := pool.Config().Copy()
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(one.Close)
	store := postgres.NewStore(one)
	ctx := context.Background()
	var pid int
	if err := one.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		b.Fatal(err)
	}
	types := []string{"labels", "intervals", "watch_files", "collectors"}
	for _, n := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			batch := make([]string, n)
			i := 0
			start, local := backendCPU(pid)
			for b.Loop() {
				for k := range batch {
					batch[k] = agents[(i+k)%len(agents)]
				}
				rows, err := store.FetchRows(ctx, batch, types)
				if err != nil || len(rows.Hosts) != n {
					b.Fatalf("fetch rows: %d hosts, %v", len(rows.Hosts), err)
				}
				i += n
			}
			if end, ok := backendCPU(pid); local && ok {
				b.ReportMetric(float64((end-start).Microseconds())/float64(b.N), "pg-µs/op")
			}
		})
	}
}

// backendCPU is the user and system CPU time the PostgreSQL backend pid has used; false when the
// database does not run on this machine (or in a container whose processes /proc does not show by pid).
func backendCPU(pid int) (time.Duration, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil || !bytes.Contains(stat, []byte("(postgres")) {
		return 0, false
	}
	// Fields after the command name (in parentheses, may hold spaces): utime and stime are 14 and 15.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, true // USER_HZ is 100 on Linux
}
