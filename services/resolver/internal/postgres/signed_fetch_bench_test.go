package postgres_test

import (
	"context"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// BenchmarkResolveSets32Signed is BenchmarkResolveSets32 with signing on, as devstack and production
// run: every config carries its statement and every host its identity statement (each signed once
// and stored, before the timer starts). pg-us/op is the CPU the PostgreSQL backends used per batch.
func BenchmarkResolveSets32Signed(b *testing.B) {
	pool, db, store := newDB(b)
	agents := seedFetch(db)
	r, _, _ := signingResolver(b, store)
	ctx := context.Background()
	resolveSets := func(i int) {
		batch := make([]string, 32)
		for k := range batch {
			batch[k] = agents[(i+k)%len(agents)]
		}
		reply, err := r.ResolveSets(ctx, protocol.ResolveSetsRequest{Contract: protocol.ResolveSetsContract, AgentIDs: batch})
		if err != nil || len(reply.Sets) == 0 || reply.Sets[0].Hosts[0].Identity == nil {
			b.Fatalf("resolve sets: %v", err)
		}
	}
	for i := 0; i < len(agents); i += 32 {
		resolveSets(i) // every statement signed and stored
	}
	cpu0 := testinfra.BackendCPU(b, pool)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		resolveSets(i)
		i += 32
	}
	b.StopTimer()
	b.ReportMetric(float64((testinfra.BackendCPU(b, pool)-cpu0).Microseconds())/float64(b.N), "pg-us/op")
}
