package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/libs/agentconfig/signing"
	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// storedStatements lists the stored config statements as "scope type version".
func storedStatements(t *testing.T, pool *pgxpool.Pool) map[resolve.StatementKey]bool {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT scope, config_type, version FROM config_statements`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[resolve.StatementKey]bool{}
	for rows.Next() {
		var k resolve.StatementKey
		if err := rows.Scan(&k.Scope, &k.ConfigType, &k.Version); err != nil {
			t.Fatal(err)
		}
		out[k] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPruneStatements: superseded statements (an environment config rewritten, a host override
// rewritten) and those of a deleted host are pruned once older than the retention, in bounded batches;
// the statements still served are kept, so the next fetch signs nothing; a recent superseded statement
// is kept until it ages.
func TestPruneStatements(t *testing.T) {
	ctx := context.Background()
	pool, db, store := newDB(t)
	r, _, obs := signingResolver(t, store)

	env := db.Environment("prod")
	web1 := db.Host(env, "web-1", "web-1")
	db.Host(env, "web-2", "web-2")
	gone := db.Host(env, "web-3", "web-3")
	fetch := func() {
		t.Helper()
		if _, err := r.ResolveSets(ctx, protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract,
			AgentIDs: []string{"web-1", "web-2", "web-3"}, Types: []string{"intervals"}}); err != nil {
			t.Fatal(err)
		}
	}
	envScope, web1Scope, goneScope := signing.EnvironmentScope(env), signing.AgentScope("web-1"), signing.AgentScope("web-3")
	v1 := db.PutEnv(env, "intervals", `{"metrics":"30s"}`)
	o1 := db.PutHost(web1, "intervals", `{"metrics":"10s"}`)
	g1 := db.PutHost(gone, "intervals", `{"metrics":"20s"}`)
	fetch()
	v2 := db.PutEnv(env, "intervals", `{"metrics":"31s"}`)
	o2 := db.PutHost(web1, "intervals", `{"metrics":"11s"}`)
	fetch()
	// Stored now: the environment's v1 and v2 (web-2), web-1's o1 and o2, web-3's g1 and v2 (merged
	// over its override). Only the environment's v2 and web-1's o2 can still be served once web-3 is gone.
	stored := storedStatements(t, pool)
	key := func(scope string, v int64) resolve.StatementKey {
		return resolve.StatementKey{Scope: scope, ConfigType: "intervals", Version: v}
	}
	for _, k := range []resolve.StatementKey{key(envScope, v1), key(envScope, v2), key(web1Scope, o1), key(web1Scope, o2), key(goneScope, g1), key(goneScope, v2)} {
		if !stored[k] {
			t.Fatalf("statement %+v not stored before pruning: %v", k, stored)
		}
	}
	if _, err := pool.Exec(ctx, `DELETE FROM hosts WHERE id = $1`, gone); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	pruner := &resolve.Pruner{Store: store, Retention: time.Hour, Batch: 1, Batches: 1, Now: func() time.Time { return now }}

	// Nothing is old yet: nothing goes.
	if n, err := pruner.Prune(ctx); err != nil || n != 0 {
		t.Fatalf("prune of recent statements = %d, %v; want 0", n, err)
	}
	// Two hours later: every statement is past the retention; one batch of one row per pass.
	now = now.Add(2 * time.Hour)
	want := len(stored) - 2 // everything but the two statements still served
	if n, err := pruner.Prune(ctx); err != nil || n != 1 {
		t.Fatalf("bounded prune = %d, %v; want exactly one row", n, err)
	}
	pruner.Batches = 100
	n, err := pruner.Prune(ctx)
	if err != nil || int(n) != want-1 {
		t.Fatalf("prune = %d, %v; want the other %d unservable statements", n, err, want-1)
	}
	after := storedStatements(t, pool)
	if len(after) != 2 || !after[key(envScope, v2)] || !after[key(web1Scope, o2)] {
		t.Fatalf("after pruning: %v; want the environment's v%d and web-1's v%d only", after, v2, o2)
	}
	// What is served is still stored: a fetch signs nothing new.
	before := obs.total()
	fetch()
	if obs.total() != before {
		t.Fatalf("a fetch after pruning signed %d statements", obs.total()-before)
	}
	if n, err := pruner.Prune(ctx); err != nil || n != 0 {
		t.Fatalf("second prune = %d, %v; want nothing left", n, err)
	}
}
