// Package seed registers hosts for ack-ingest's tests and benchmarks: one client and environment with
// n hosts whose agents are agent-0 … agent-<n-1>. ack-ingest itself never registers hosts.
package seed

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Hosts registers n hosts (agents agent-0 ...) in one environment and returns their ids by agent.
func Hosts(t testing.TB, pool *pgxpool.Pool, n int) map[string]uuid.UUID {
	t.Helper()
	ctx := context.Background()
	var clientID, envID uuid.UUID
	if err := pool.QueryRow(ctx, `INSERT INTO clients (name) VALUES ('acme') RETURNING id`).Scan(&clientID); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO environments (client_id, name) VALUES ($1, 'prod') RETURNING id`, clientID).Scan(&envID); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `INSERT INTO hosts (client_id, environment_id, hostname, agent_id)
		SELECT $1, $2, 'host-' || i, 'agent-' || i FROM generate_series(0, $3::int - 1) AS i RETURNING agent_id, id`, clientID, envID, n)
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]uuid.UUID{}
	var agent string
	var id uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&agent, &id}, func() error { hosts[agent] = id; return nil }); err != nil {
		t.Fatal(err)
	}
	return hosts
}
