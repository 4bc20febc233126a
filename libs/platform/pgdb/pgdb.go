// Package pgdb opens ConfigSync's PostgreSQL connection pool and brings the schema up to date with the
// embedded goose migrations of db/migrations.
package pgdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/zap"

	"github.com/configsync/configsync/db/migrations"
	"github.com/configsync/configsync/libs/platform/backoff"
)

// Config is the database configuration.
type Config struct {
	// URL is a libpq connection string or postgres:// URL. It may carry a password: never log it.
	URL      string `env:"DATABASE_URL" required:"true"`
	MaxConns int32  `env:"DATABASE_MAX_CONNS" default:"10"`
	// Migrate runs the embedded migrations at start. Replicas serialise on an advisory lock.
	Migrate bool `env:"DATABASE_MIGRATE" default:"true"`
}

// migrateLockKey is the pg_advisory_lock key serialising migrations across replicas
// (an arbitrary constant: the ASCII of "cfgsync" in the low bytes).
const migrateLockKey int64 = 0x63666773796e63

// Open connects to PostgreSQL, retrying until ctx is done, and migrates the schema when cfg.Migrate.
func Open(ctx context.Context, cfg Config, log *zap.Logger) (*pgxpool.Pool, error) {
	pool, err := NewPool(cfg)
	if err != nil {
		return nil, err
	}
	if err := Start(ctx, pool, cfg, log); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// NewPool builds a pool without connecting (pgxpool connects lazily); Start waits for the database.
func NewPool(cfg Config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// pgx's parse errors can echo the connection string, password included: keep them out.
		return nil, errors.New("pgdb: DATABASE_URL is not a valid connection string")
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	withoutJIT(pc)
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("pgdb: new pool: %w", err)
	}
	return pool, nil
}

// withoutJIT turns PostgreSQL's JIT compilation off for the pool's sessions, unless the connection
// string sets jit itself (…?jit=on keeps it). PostgreSQL compiles a statement whose estimated cost passes
// jit_above_cost (100,000 by default), and ConfigSync's statements are pages and batches of a few
// hundred to a few thousand rows, costed high but done in milliseconds: a page of 500 hosts of the host
// list (the drift pass reads every host a page at a time) was estimated above the threshold and spent
// 121 of its 142 ms compiling; at 100,000 hosts one drift pass spent some 24 s of PostgreSQL CPU on
// compilation alone, taken from the heartbeats and fetches it ran beside.
func withoutJIT(pc *pgxpool.Config) {
	if _, set := pc.ConnConfig.RuntimeParams["jit"]; !set {
		pc.ConnConfig.RuntimeParams["jit"] = "off"
	}
}

// Start waits until the database answers (retrying with backoff until ctx is done) and then, when
// cfg.Migrate, applies the migrations.
func Start(ctx context.Context, pool *pgxpool.Pool, cfg Config, log *zap.Logger) error {
	if err := waitReady(ctx, pool, log); err != nil {
		return err
	}
	if !cfg.Migrate {
		return nil
	}
	start := time.Now()
	if err := Migrate(ctx, pool); err != nil {
		return err
	}
	log.Info("database schema up to date", zap.Duration("took", time.Since(start)))
	return nil
}

func waitReady(ctx context.Context, pool *pgxpool.Pool, log *zap.Logger) error {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := pool.Ping(ctx)
		if err == nil {
			if attempt > 1 {
				log.Info("database reachable", zap.Int("attempts", attempt))
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("pgdb: database not reachable after %d attempts: %w", attempt, err)
		}
		log.Warn("database not reachable, retrying", zap.Int("attempt", attempt), zap.Duration("backoff", wait), zap.Error(err))
		if !backoff.Sleep(ctx, wait) {
			return fmt.Errorf("pgdb: database not reachable after %d attempts: %w", attempt, err)
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// Migrate applies every pending migration of db/migrations, holding a session advisory lock so that
// replicas starting together run them one at a time (the later ones find nothing to do).
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	// goose needs database/sql. A separate *sql.DB (own connections, outside the pool) means a pool of
	// MaxConns 1 cannot deadlock between the lock holder and goose.
	db := stdlib.OpenDB(*pool.Config().ConnConfig.Copy())
	defer db.Close()
	return migrateLocked(ctx, db)
}

func migrateLocked(ctx context.Context, db *sql.DB) (err error) {
	lockConn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("pgdb: migrate: connect: %w", err)
	}
	defer lockConn.Close()
	if _, err := lockConn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return fmt.Errorf("pgdb: migrate: lock: %w", err)
	}
	defer func() {
		// Unlock even when ctx is cancelled; closing the session would release it anyway.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, uerr := lockConn.ExecContext(uctx, "SELECT pg_advisory_unlock($1)", migrateLockKey); uerr != nil && err == nil {
			err = fmt.Errorf("pgdb: migrate: unlock: %w", uerr)
		}
	}()
	if err := migrations.Up(ctx, db); err != nil {
		return fmt.Errorf("pgdb: %w", err)
	}
	return nil
}

// Check returns the "postgres" readiness check: a ping through the pool.
func Check(pool *pgxpool.Pool) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := pool.Ping(ctx); err != nil {
			return fmt.Errorf("ping: %w", err)
		}
		return nil
	}
}
