package postgres

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/ack-ingest/internal/ingest"
	"github.com/configsync/configsync/services/ack-ingest/internal/seed"
)

// The first heartbeats of freshly registered hosts are heap-only (HOT) updates: a host row grows from
// about 210 to 380 bytes with its first heartbeat, and the hosts table leaves room for that beside
// every row of a page it fills at registration (fillfactor 30, migration 00018), so no row moves to
// another page (which would insert into every index of hosts). At fillfactor 60 a page of new rows
// could not hold them grown, even with every old version pruned. A row that stays on its page while no
// indexed column changes was updated HOT, so the test compares each row's page before and after. The
// hosts are registered as config-api registers them (hostname, agent id and NATS key of the lengths
// loadgen's fleet has) and written by two concurrent writers in sorted batches, as ack-ingest writes
// them. (Later heartbeats stay HOT as long as PostgreSQL can prune the versions the previous ones left,
// which a long transaction on the database, an ANALYZE say, delays: not asserted here.)
func TestFirstHeartbeatsKeepHostRowsInPlace(t *testing.T) {
	pool := testinfra.Postgres(t)
	ctx := context.Background()
	var clientID, envID uuid.UUID
	seeded := seed.Hosts(t, pool, 1)
	if err := pool.QueryRow(ctx, `SELECT client_id, environment_id FROM hosts`).Scan(&clientID, &envID); err != nil {
		t.Fatal(err)
	}
	const n = 6000
	rows, err := pool.Query(ctx, `INSERT INTO hosts (client_id, environment_id, hostname, agent_id, nats_public_key, nats_expires_at)
		SELECT $1, $2, 'lg-1765080000-' || i, 'lg-1765080000-' || i, 'UAB3KZ5QXJ7NQ4W2YVR6M3TQ2S5F7H4J6K2L3P5N7R4T6V2X3Z5B7D4F', now()
		FROM generate_series(0, $3::int - 1) AS i RETURNING id`, clientID, envID, n)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range seeded {
		ids = append(ids, id)
	}
	// A batch is a sorted slice of a fleet bigger than itself: hosts scattered over the table's pages,
	// as random ids make them (ids in registration order would put every row of a page in one batch).
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	before := hostPages(t, pool)
	s := NewStore(pool)
	{
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				for lo := w * 500; lo < len(ids); lo += 1000 {
					batch := make([]ingest.HostHeartbeat, 0, 500)
					for _, id := range ids[lo:min(lo+500, len(ids))] {
						batch = append(batch, ingest.HostHeartbeat{HostID: id, Heartbeat: ingest.Heartbeat{AgentVersion: "loadgen/1.0.0+hb.1",
							ReceivedAt: t0, ConfigHash: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
							ConfigVersion: 5, ConfigVersions: map[string]int64{"collectors": 5, "intervals": 1, "labels": 2}}})
					}
					sortHeartbeats(batch)
					if _, err := s.UpdateHeartbeats(ctx, batch); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
	}
	after := hostPages(t, pool)
	moved := 0
	for id, page := range before {
		if after[id] != page {
			moved++
		}
	}
	if moved > 0 {
		t.Fatalf("%d of %d host rows moved to another page (non-HOT updates)", moved, len(before))
	}
	var written int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM hosts WHERE config_hash IS NOT NULL AND last_heartbeat_at = $1`, t0).Scan(&written); err != nil {
		t.Fatal(err)
	}
	if written != len(ids) {
		t.Fatalf("%d of %d hosts hold the last heartbeat", written, len(ids))
	}
}

// hostPages is the heap page of each host row.
func hostPages(t *testing.T, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) map[uuid.UUID]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id, (ctid::text::point)[0]::bigint FROM hosts`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uuid.UUID]int64{}
	var id uuid.UUID
	var page int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &page}, func() error { out[id] = page; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}
