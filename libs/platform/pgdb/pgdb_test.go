package pgdb

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest/observer"

	"github.com/configsync/configsync/libs/platform/health"
	"github.com/configsync/configsync/libs/testinfra"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func tableExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// open opens a pool with Open and a test logger, whose logs it returns; the pool is closed at cleanup.
func open(t *testing.T, ctx context.Context, cfg Config) (*pgxpool.Pool, *observer.ObservedLogs) {
	t.Helper()
	log, logs := testinfra.Logger(t)
	pool, err := Open(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, logs
}

func TestOpenMigratesAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, logs := open(t, ctx, Config{URL: testinfra.PostgresEmptyURL(t), MaxConns: 1, Migrate: true})
	if !tableExists(t, pool, "outbox") || !tableExists(t, pool, "hosts") {
		t.Fatal("schema not created")
	}
	if pool.Config().MaxConns != 1 {
		t.Fatalf("MaxConns = %d", pool.Config().MaxConns)
	}
	if logs.FilterMessage("database schema up to date").Len() != 1 {
		t.Fatal("migration not logged")
	}
}

func TestOpenWithoutMigrate(t *testing.T) {
	t.Parallel()
	pool, _ := open(t, context.Background(), Config{URL: testinfra.PostgresEmptyURL(t), Migrate: false})
	if tableExists(t, pool, "outbox") {
		t.Fatal("migrated although Migrate is false")
	}
}

// Replicas starting together must not race on the migrations: the advisory lock serialises them.
func TestConcurrentMigrationsSerialise(t *testing.T) {
	t.Parallel()
	log, _ := testinfra.Logger(t)
	url := testinfra.PostgresEmptyURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const replicas = 4
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	for i := range replicas {
		wg.Go(func() {
			pool, err := Open(ctx, Config{URL: url, MaxConns: 2, Migrate: true}, log)
			if err == nil {
				pool.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
}

func TestOpenMigratedDatabaseIsANoOp(t *testing.T) {
	t.Parallel()
	pool, _ := open(t, context.Background(), Config{URL: testinfra.PostgresURL(t), Migrate: true})
	if err := Check(pool)(context.Background()); err != nil {
		t.Fatalf("readiness: %v", err)
	}
}

func TestOpenRetriesUntilTheContextEnds(t *testing.T) {
	t.Parallel()
	log, logs := testinfra.Logger(t)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	// Port 1 on localhost refuses at once; the password must never show up in errors or logs.
	_, err := Open(ctx, Config{URL: "postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=1", Migrate: true}, log)
	if err == nil {
		t.Fatal("Open succeeded against a closed port")
	}
	if !strings.Contains(err.Error(), "not reachable after") {
		t.Fatalf("error %v", err)
	}
	if logs.FilterMessage("database not reachable, retrying").Len() < 2 {
		t.Fatalf("want several logged retries, got %d", logs.Len())
	}
	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, "hunter2") {
				t.Fatalf("password logged in field %s", k)
			}
		}
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatal("password in error")
	}
}

func TestNewPoolRejectsGarbageWithoutEchoingIt(t *testing.T) {
	t.Parallel()
	_, err := NewPool(Config{URL: "postgres://u:hunter2@host:notaport/db"})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("got %v", err)
	}
}

func TestModule(t *testing.T) {
	t.Setenv("DATABASE_URL", testinfra.PostgresEmptyURL(t))
	log, _ := testinfra.Logger(t)
	var got struct {
		fx.In
		Pool   *pgxpool.Pool
		Checks []health.Check `group:"readiness"`
	}
	app := fxtest.New(t, fx.Supply(log), Module, fx.Populate(&got))
	app.RequireStart()
	if !tableExists(t, got.Pool, "outbox") {
		t.Fatal("Module did not migrate at start")
	}
	if len(got.Checks) != 1 || got.Checks[0].Name != "postgres" {
		t.Fatalf("checks %+v", got.Checks)
	}
	if err := got.Checks[0].Func(context.Background()); err != nil {
		t.Fatal(err)
	}
	app.RequireStop()
	if err := got.Pool.Ping(context.Background()); err == nil {
		t.Fatal("pool still open after stop")
	}
}

func TestModuleRequiresDatabaseURL(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	log, _ := testinfra.Logger(t)
	var pool *pgxpool.Pool
	app := fx.New(fx.NopLogger, fx.Supply(log), Module, fx.Populate(&pool))
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "DATABASE_URL is required") {
		t.Fatalf("got %v", err)
	}
}

// The pool's sessions run without JIT compilation unless the connection string asks for it.
func TestPoolSessionsRunWithoutJITUnlessAsked(t *testing.T) {
	ctx := context.Background()
	url := testinfra.PostgresURL(t)
	jit := func(url string) string {
		t.Helper()
		pool, _ := open(t, ctx, Config{URL: url, MaxConns: 1})
		var v string
		if err := pool.QueryRow(ctx, "SHOW jit").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := jit(url); got != "off" {
		t.Errorf("jit = %q, want off", got)
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	if got := jit(url + sep + "jit=on"); got != "on" {
		t.Errorf("with jit=on in the connection string: jit = %q, want on", got)
	}
}
