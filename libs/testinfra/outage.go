package testinfra

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// UnreachablePostgresURL is a connection string to a local port nothing listens on (it was free a
// moment ago): every connection attempt fails at once, as when PostgreSQL is down.
func UnreachablePostgresURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return "postgres://configsync@" + addr + "/configsync?sslmode=disable&connect_timeout=5"
}

// UnreachablePostgres is a pool on UnreachablePostgresURL, closed at cleanup.
func UnreachablePostgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), UnreachablePostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// RefuseConnections makes pool's database refuse new connections and ends the existing ones, as a
// PostgreSQL restart or failover would, from a separate connection to the "postgres" database. It
// returns once no backend of the database is left, with the function that lets connections in again;
// that also runs at cleanup, before the cleanup of Postgres drops the database (cleanups run last
// registered, first).
func RefuseConnections(t testing.TB, pool *pgxpool.Pool) (restore func()) {
	t.Helper()
	cfg := pool.Config().ConnConfig.Copy()
	db := cfg.Database
	cfg.Database = "postgres"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ident := pgx.Identifier{db}.Sanitize()
	restored := false
	restore = func() {
		if restored {
			return
		}
		restored = true
		if _, err := admin.Exec(context.Background(), "ALTER DATABASE "+ident+" ALLOW_CONNECTIONS true"); err != nil {
			t.Errorf("allow connections again: %v", err)
		}
	}
	t.Cleanup(func() {
		restore()
		_ = admin.Close(context.Background())
	})
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+ident+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", db); err != nil {
		t.Fatal(err)
	}
	// Backends exit asynchronously: wait until none is left, so no request can still get through.
	for {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return restore
		}
		time.Sleep(10 * time.Millisecond)
	}
}
