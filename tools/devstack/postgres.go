package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

const (
	localServerURL  = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	devDatabaseName = "configsync"
	privatePort     = "15432"
)

// postgresInstance is the database the devstack runs on, and how to stop it when the devstack owns it.
type postgresInstance struct {
	URL    string
	Source string
	stop   func()
}

func (p *postgresInstance) Stop() {
	if p.stop != nil {
		p.stop()
	}
}

// provisionPostgres finds a PostgreSQL in the documented order: DATABASE_URL, the server on
// 127.0.0.1:5432 (database "configsync" created on it), else a private cluster under dataDir created with
// the machine's initdb and pg_ctl.
func provisionPostgres(ctx context.Context, dataDir string, log *zap.Logger) (*postgresInstance, error) {
	if url := os.Getenv("DATABASE_URL"); url != "" {
		return &postgresInstance{URL: url, Source: "DATABASE_URL"}, nil
	}
	if url, err := useLocalServer(ctx); err == nil {
		return &postgresInstance{URL: url, Source: "server on 127.0.0.1:5432"}, nil
	} else {
		log.Info("no PostgreSQL on 127.0.0.1:5432, creating a private cluster", zap.Error(err))
	}
	return startPrivateCluster(ctx, filepath.Join(dataDir, "postgres"), log)
}

func useLocalServer(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, localServerURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	if err := createDatabase(ctx, conn); err != nil {
		return "", err
	}
	return strings.Replace(localServerURL, "/postgres?", "/"+devDatabaseName+"?", 1), nil
}

func createDatabase(ctx context.Context, conn *pgx.Conn) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", devDatabaseName).Scan(&exists); err != nil {
		return fmt.Errorf("look up database: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+devDatabaseName); err != nil {
		return fmt.Errorf("create database %s: %w", devDatabaseName, err)
	}
	return nil
}

// startPrivateCluster initialises (first run) and starts a cluster in dir on 127.0.0.1:15432.
func startPrivateCluster(ctx context.Context, dir string, log *zap.Logger) (*postgresInstance, error) {
	initdb, err := findPostgresBinary("initdb")
	if err != nil {
		return nil, err
	}
	pgCtl, err := findPostgresBinary("pg_ctl")
	if err != nil {
		return nil, err
	}
	runAs, err := postgresRunner(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		log.Info("initialising private PostgreSQL cluster", zap.String("dir", dir))
		if out, err := runAs(ctx, initdb, "-D", dir, "-U", "postgres", "--auth=trust", "--encoding=UTF8").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("initdb: %w: %s", err, out)
		}
	}
	opts := fmt.Sprintf("-p %s -k %s -c listen_addresses=127.0.0.1", privatePort, dir)
	logFile := filepath.Join(dir, "server.log")
	if out, err := runAs(ctx, pgCtl, "-D", dir, "-o", opts, "-l", logFile, "-w", "start").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pg_ctl start (log: %s): %w: %s", logFile, err, out)
	}
	stop := func() {
		if out, err := runAs(context.Background(), pgCtl, "-D", dir, "-m", "fast", "-w", "stop").CombinedOutput(); err != nil {
			log.Warn("pg_ctl stop failed", zap.Error(err), zap.ByteString("output", out))
		}
	}
	url := "postgres://postgres@127.0.0.1:" + privatePort + "/postgres?sslmode=disable"
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		stop()
		return nil, fmt.Errorf("connect to private cluster: %w", err)
	}
	defer conn.Close(context.Background())
	if err := createDatabase(ctx, conn); err != nil {
		stop()
		return nil, err
	}
	return &postgresInstance{
		URL:    strings.Replace(url, "/postgres?", "/"+devDatabaseName+"?", 1),
		Source: "private cluster in " + dir,
		stop:   stop,
	}, nil
}

func findPostgresBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) > 0 {
		return matches[len(matches)-1], nil
	}
	return "", fmt.Errorf("PostgreSQL not found: set DATABASE_URL, run a server on 127.0.0.1:5432, "+
		"or install the PostgreSQL server binaries (%s is missing; Debian/Ubuntu: apt install postgresql)", name)
}

// postgresRunner returns how to run the PostgreSQL binaries: directly, or — because initdb refuses to
// run as root — as the "postgres" system user, owning dir.
func postgresRunner(dir string) (func(ctx context.Context, name string, args ...string) *exec.Cmd, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	if os.Geteuid() != 0 {
		return func(ctx context.Context, name string, args ...string) *exec.Cmd {
			return exec.CommandContext(ctx, name, args...)
		}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New("running as root: PostgreSQL refuses to run as root and there is no 'postgres' user; set DATABASE_URL instead")
	}
	if out, err := exec.Command("chown", "-R", u.Username, dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("chown %s: %w: %s", dir, err, out)
	}
	return func(ctx context.Context, name string, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", u.Username, "--", name}, args...)...)
	}, nil
}
