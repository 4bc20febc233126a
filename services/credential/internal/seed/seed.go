// Package seed sets up what the credential service's tests and benchmarks need and the service itself
// never writes: a client with environments, and a keyring of one fresh key. Production code never
// imports it.
package seed

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/services/credential/internal/keyring"
)

// Client registers a client called name with envs environments (name-0 …) and returns their ids.
func Client(tb testing.TB, pool *pgxpool.Pool, name string, envs int) (client string, envIDs []string) {
	tb.Helper()
	ctx := context.Background()
	if err := pool.QueryRow(ctx, `INSERT INTO clients (name) VALUES ($1) RETURNING id::text`, name).Scan(&client); err != nil {
		tb.Fatal(err)
	}
	for i := range envs {
		var env string
		if err := pool.QueryRow(ctx, `INSERT INTO environments (client_id, name) VALUES ($1, $2) RETURNING id::text`,
			client, fmt.Sprintf("%s-%d", name, i)).Scan(&env); err != nil {
			tb.Fatal(err)
		}
		envIDs = append(envIDs, env)
	}
	return client, envIDs
}

// Keyring is a local keyring holding one fresh key, version 1.
func Keyring(tb testing.TB) *keyring.Keyring {
	tb.Helper()
	key, err := keyring.GenerateKey()
	if err != nil {
		tb.Fatal(err)
	}
	ring, err := keyring.New(map[uint32][]byte{1: key})
	if err != nil {
		tb.Fatal(err)
	}
	return ring
}
