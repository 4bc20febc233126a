package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
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
