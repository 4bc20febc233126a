package postgres_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/resolver/internal/postgres"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
	"github.com/configsync/configsync/services/resolver/internal/seed"
)

// queryLog records the SQL and arguments of the page queries a pool runs.
type queryLog struct {
	mu      sync.Mutex
	queries []loggedQuery
}

type loggedQuery struct {
	sql  string
	args []any
}

func (l *queryLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "WITH page AS") {
		l.mu.Lock()
		l.queries = append(l.queries, loggedQuery{sql: d.SQL, args: d.Args})
		l.mu.Unlock()
	}
	return ctx
}

func (l *queryLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// planNode is the part of EXPLAIN (FORMAT JSON) the test reads.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	IndexName string     `json:"Index Name"`
	Plans     []planNode `json:"Plans"`
}

func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

// Right after a bulk registration the hosts table has no statistics. With them missing, the planner
// used to read every host of the environment and sort them for each page; the page queries must read
// hosts_environment_idx in order instead, whatever the statistics say. The plans checked are those of
// the statements the store really ran, with their arguments, in a transaction set up as the store sets
// it up.
func TestHostPagePlanWithoutStatistics(t *testing.T) {
	ctx := context.Background()
	log := &queryLog{}
	pool := testinfra.PostgresWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = log })
	if _, err := pool.Exec(ctx, `ALTER TABLE hosts SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	db := seed.New(t, pool)
	small := db.Environment("small")
	db.Hosts(small, "small", 500)
	env := db.Environment("big")
	db.Hosts(env, "big", 20_000)
	db.OverrideEvery(env, "labels", `{"static":{"team":"web"}}`, 10)
	var tuples float64
	if err := pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE relname = 'hosts'`).Scan(&tuples); err != nil || tuples >= 0 {
		t.Fatalf("hosts has statistics (reltuples %v, %v): the test needs a never-analyzed table", tuples, err)
	}
	hostIDs := make([]string, 0, 3)
	if err := pool.QueryRow(ctx, `SELECT array_agg(id::text) FROM (SELECT id FROM hosts WHERE environment_id = $1 ORDER BY id LIMIT 3) h`, env).Scan(&hostIDs); err != nil {
		t.Fatal(err)
	}

	store := postgres.NewStore(pool)
	since := time.Now().Add(-time.Hour)
	for _, q := range []resolve.HostPageQuery{
		{EnvironmentID: env, ConfigType: "labels", Limit: 1001},
		{EnvironmentID: env, ConfigType: "labels", Limit: 1001, OnlineSince: &since},
		{EnvironmentID: env, ConfigType: "labels", Limit: 1001, HostIDs: hostIDs},
	} {
		if _, err := store.HostPage(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if len(log.queries) != 3 {
		t.Fatalf("recorded %d page queries, want 3", len(log.queries))
	}
	for i, q := range log.queries {
		root := explain(t, pool, q)
		var hostScans []string
		root.walk(func(n planNode) {
			if n.Relation == "hosts" {
				hostScans = append(hostScans, n.NodeType+" "+n.IndexName)
			}
			if n.NodeType == "Sort" {
				t.Errorf("query %d: plan sorts: %+v", i, root)
			}
		})
		want := "Index Scan hosts_environment_idx"
		if i == 2 {
			want = "Index Scan hosts_pkey" // the listed hosts, one key lookup each
		}
		if len(hostScans) != 1 || hostScans[0] != want {
			t.Errorf("query %d: hosts read by %q, want %q", i, hostScans, want)
		}
	}
}

// explain returns the plan of a recorded query, planned with the settings HostPage uses.
func explain(t *testing.T, pool *pgxpool.Pool, q loggedQuery) planNode {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT set_config('enable_bitmapscan', 'off', true)`); err != nil {
		t.Fatal(err)
	}
	var out []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q.sql, q.args...).Scan(&out); err != nil {
		t.Fatalf("explain: %v", err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("explain output %s: %v", out, err)
	}
	return plans[0].Plan
}
