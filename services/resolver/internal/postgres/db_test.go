package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/resolver/internal/postgres"
	"github.com/configsync/configsync/services/resolver/internal/seed"
)

// newDB is a fresh migrated database, the seeding helper writing to it and the Store reading it.
func newDB(tb testing.TB) (*pgxpool.Pool, *seed.DB, *postgres.Store) {
	tb.Helper()
	pool := testinfra.Postgres(tb)
	return pool, seed.New(tb, pool), postgres.NewStore(pool)
}
