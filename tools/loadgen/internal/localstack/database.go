package localstack

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// createDatabase creates configsync_loadgen_<time>_<pid> through the maintenance database at adminURL
// and returns its URL and how to drop it. A benchmark's tens of thousands of hosts never land in the
// database `make run` uses.
func createDatabase(ctx context.Context, adminURL string) (string, func(context.Context) error, error) {
	cfg, err := pgx.ParseConfig(adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("admin database url: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return "", nil, fmt.Errorf("connect %s@%s:%d: %w", cfg.User, cfg.Host, cfg.Port, err)
	}
	defer conn.Close(context.Background())
	name := fmt.Sprintf("configsync_loadgen_%s_%d", time.Now().UTC().Format("20060102150405"), os.Getpid())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(adminURL)
	if err != nil || u.Scheme == "" {
		return "", nil, fmt.Errorf("admin database url must be a postgres:// URL")
	}
	u.Path = "/" + name
	dbURL := u.String()
	drop := func(ctx context.Context) error {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return dbURL, drop, nil
}
