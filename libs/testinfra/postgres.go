package testinfra

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/configsync/configsync/db/migrations"
)

// EnvDatabaseURL names the variable pointing tests at a PostgreSQL server (any database on it; the
// role needs CREATEDB). Test databases are created next to it and dropped afterwards.
const EnvDatabaseURL = "CONFIGSYNC_TEST_DATABASE_URL"

// DefaultDatabaseURL is tried when EnvDatabaseURL is unset.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// defaultURL is DefaultDatabaseURL, replaceable by this package's tests.
var defaultURL = DefaultDatabaseURL

// templateFormat is part of the template name: bump it when the way templates are built changes.
const templateFormat = "v1"

const (
	templatePrefix = "configsync_tmpl_"
	testDBPrefix   = "configsync_test_"
)

// Postgres returns a pool on a fresh database holding the current schema, for this test only. The pool
// is closed and the database dropped at cleanup.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PostgresWith(t, nil)
}

// PostgresWith is Postgres with the pool's configuration changed by tune first (when not nil): a
// single connection, a query tracer.
func PostgresWith(t testing.TB, tune func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	return openPool(t, PostgresURL(t), tune)
}

// OpenPool opens a pool on the database at url (from PostgresURL, for a test whose code under test
// opened its own); it is closed at cleanup.
func OpenPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	return openPool(t, url, nil)
}

func openPool(t testing.TB, url string, tune func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("testinfra: parse test database URL: %v", err)
	}
	if tune != nil {
		tune(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testinfra: open pool on test database: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// PostgresURL creates a fresh database holding the current schema and returns its URL. It is dropped
// (connections forced closed) at cleanup.
func PostgresURL(t testing.TB) string {
	t.Helper()
	admin := serverURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tmpl, err := templateDatabase(ctx, admin)
	if err != nil {
		t.Fatalf("testinfra: build template database: %v", err)
	}
	return createDatabase(ctx, t, admin, tmpl)
}

// PostgresEmptyURL creates a fresh database WITHOUT the schema (cloned from template0) and returns its
// URL, for tests of migrations themselves. It is dropped at cleanup.
func PostgresEmptyURL(t testing.TB) string {
	t.Helper()
	admin := serverURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return createDatabase(ctx, t, admin, "template0")
}

func createDatabase(ctx context.Context, t testing.TB, admin, template string) string {
	t.Helper()
	name := testDBPrefix + randomHex(8)
	if err := adminExec(ctx, admin, "CREATE DATABASE "+quoteIdent(name)+" TEMPLATE "+quoteIdent(template)); err != nil {
		t.Fatalf("testinfra: create test database from %s: %v", template, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+quoteIdent(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("testinfra: drop test database %s: %v", name, err)
		}
	})
	u, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	return u
}

var (
	serverOnce sync.Once
	serverAddr string
	serverErr  error
)

// serverURL finds the PostgreSQL server once per test process.
func serverURL(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() { serverAddr, serverErr = findServer() })
	if serverErr != nil {
		t.Fatalf("testinfra: no PostgreSQL for tests: %v", serverErr)
	}
	return serverAddr
}

func findServer() (string, error) {
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		if err := ping(u, 10*time.Second); err != nil {
			return "", fmt.Errorf("%s is set but the server does not answer: %w", EnvDatabaseURL, err)
		}
		return u, nil
	}
	defaultErr := ping(defaultURL, 3*time.Second)
	if defaultErr == nil {
		return defaultURL, nil
	}
	if dockerAvailable() {
		u, err := startContainer()
		if err != nil {
			return "", fmt.Errorf("%s unset, %s unreachable (%v), and starting a PostgreSQL container failed: %w",
				EnvDatabaseURL, redactURL(defaultURL), defaultErr, err)
		}
		return u, nil
	}
	return "", fmt.Errorf(`%s is unset, %s is unreachable (%v) and no Docker socket was found.
Provide PostgreSQL 13+ in one of these ways:
  - export %s=postgres://USER:PASSWORD@HOST:PORT/DB?sslmode=disable   (role needs CREATEDB)
  - run a local server on 127.0.0.1:5432 with trust auth for user postgres and a database "test"
  - make Docker available (DOCKER_HOST or /var/run/docker.sock) so testcontainers can start postgres`,
		EnvDatabaseURL, redactURL(defaultURL), defaultErr, EnvDatabaseURL)
}

func ping(u string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

var (
	templateMu    sync.Mutex
	templateNames = map[string]string{} // server URL -> template database name
)

// templateDatabase returns the name of the template database for the current migrations on the server
// at admin, building it if no process has yet. Builders in several test processes (go test ./... runs
// packages in parallel) serialise on an advisory lock; the template is built under a temporary name and
// renamed when complete, so a crashed build never leaves a half-migrated template behind.
func templateDatabase(ctx context.Context, admin string) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	if name, ok := templateNames[admin]; ok {
		return name, nil
	}
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := templatePrefix + hex.EncodeToString(sum[:8])
	lockKey := int64(binary.BigEndian.Uint64(sum[8:16]))

	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return "", fmt.Errorf("advisory lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockKey) //nolint:errcheck // closing the session releases it too

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template: %w", err)
	}
	if !exists {
		if err := buildTemplate(ctx, conn, admin, name); err != nil {
			return "", err
		}
	}
	templateNames[admin] = name
	return name, nil
}

func buildTemplate(ctx context.Context, conn *pgx.Conn, admin, name string) error {
	build := name + "_build"
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(build)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop stale build: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+quoteIdent(build)); err != nil {
		return fmt.Errorf("create build database (does the role have CREATEDB?): %w", err)
	}
	buildURL, err := withDatabase(admin, build)
	if err != nil {
		return err
	}
	cfg, err := pgx.ParseConfig(buildURL)
	if err != nil {
		return fmt.Errorf("parse build URL: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	err = migrations.Up(ctx, db)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	// Backends exit asynchronously after their clients disconnect; RENAME needs the database unused.
	for attempt := 0; ; attempt++ {
		_, err = conn.Exec(ctx, "ALTER DATABASE "+quoteIdent(build)+" RENAME TO "+quoteIdent(name))
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || attempt == 50 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("rename template: %w", err)
	}
	// No connections ever: CREATE DATABASE ... TEMPLATE fails while anyone is connected to the template.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+quoteIdent(name)+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("mark template: %w", err)
	}
	return nil
}

// migrationsHash hashes every embedded migration file (name and content) plus templateFormat, so any
// schema change yields a new template name.
func migrationsHash() ([32]byte, error) {
	var names []string
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			names = append(names, path)
		}
		return nil
	})
	if err != nil {
		return [32]byte{}, fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	h := sha256.New()
	h.Write([]byte(templateFormat))
	for _, n := range names {
		b, err := fs.ReadFile(migrations.FS, n)
		if err != nil {
			return [32]byte{}, fmt.Errorf("read migration %s: %w", n, err)
		}
		fmt.Fprintf(h, "\x00%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

func adminExec(ctx context.Context, admin, sql string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns the connection string u pointed at database name.
func withDatabase(u, name string) (string, error) {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		parsed, err := url.Parse(u)
		if err != nil {
			return "", errors.New("database URL does not parse")
		}
		parsed.Path = "/" + name
		parsed.RawPath = ""
		return parsed.String(), nil
	}
	// keyword=value form: a later dbname overrides an earlier one.
	return u + " dbname=" + name, nil
}

// redactURL drops a password from a URL for messages.
func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil && p.User != nil {
		return p.Redacted()
	}
	return u
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
