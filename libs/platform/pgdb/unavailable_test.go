package pgdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/configsync/configsync/libs/testinfra"
)

// connect opens one connection to url, closed at cleanup.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return connectConfig(t, cfg)
}

// adminConn connects to the "postgres" database of the server holding the database of url.
func adminConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = "postgres"
	return connectConfig(t, cfg)
}

func connectConfig(t *testing.T, cfg *pgx.ConnConfig) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// terminate has killer terminate the backend serving victim (a connection, or a transaction on one)
// and waits until it is gone, so victim's next use finds it dead: the backend exits asynchronously.
func terminate(t *testing.T, ctx context.Context, victim interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, killer *pgx.Conn) {
	t.Helper()
	var pid uint32
	if err := victim.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := killer.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend: %v %v", ok, err)
	}
	for {
		var alive bool
		if err := killer.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive); err != nil {
			t.Fatal(err)
		}
		if !alive {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestIsUnavailableWhenNothingListens(t *testing.T) {
	t.Parallel()
	pool := testinfra.UnreachablePostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := pool.Exec(ctx, "SELECT 1")
	var connectErr *pgconn.ConnectError
	if !errors.As(err, &connectErr) {
		t.Fatalf("Exec on a closed port: %v, want a ConnectError", err)
	}
	if !IsUnavailable(err) || !IsUnavailable(fmt.Errorf("store: read host: %w", err)) {
		t.Fatalf("IsUnavailable(%v) = false", err)
	}
}

func TestIsUnavailableIsFalseForQueryErrors(t *testing.T) {
	t.Parallel()
	conn := connect(t, testinfra.PostgresEmptyURL(t))
	ctx := context.Background()

	_, err := conn.Exec(ctx, "SELEC 1")
	if err == nil || IsUnavailable(err) {
		t.Fatalf("syntax error: IsUnavailable(%v) = true", err)
	}

	if _, err := conn.Exec(ctx, "CREATE TEMP TABLE uniq (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO uniq VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "INSERT INTO uniq VALUES (1)")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("second insert: %v, want a unique violation", err)
	}
	if IsUnavailable(err) || IsUnavailable(fmt.Errorf("store: %w", err)) {
		t.Fatalf("unique violation: IsUnavailable(%v) = true", err)
	}

	var n int
	err = conn.QueryRow(ctx, "SELECT 1 WHERE false").Scan(&n)
	if !errors.Is(err, pgx.ErrNoRows) || IsUnavailable(err) {
		t.Fatalf("no rows: IsUnavailable(%v) = true", err)
	}
	// The connection is still fine after all of that.
	if err := conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestIsUnavailableForATerminatedConnection(t *testing.T) {
	t.Parallel()
	url := testinfra.PostgresEmptyURL(t)
	victim, killer := connect(t, url), connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	terminate(t, ctx, victim, killer)
	_, err := victim.Exec(ctx, "SELECT 1")
	if err == nil {
		t.Fatal("a terminated connection still ran a query")
	}
	if !IsUnavailable(err) {
		t.Fatalf("IsUnavailable(%v) = false", err)
	}
	// And the next use of the now closed connection.
	if _, err := victim.Exec(ctx, "SELECT 1"); err == nil || !IsUnavailable(err) {
		t.Fatalf("use after the loss: IsUnavailable(%v) = false", err)
	}
}

// A database refusing connections answers the startup with a FATAL error: the ConnectError wraps a
// PgError whose code (55000) alone would read as a query error.
func TestIsUnavailableWhenTheDatabaseRefusesConnections(t *testing.T) {
	t.Parallel()
	url := testinfra.PostgresEmptyURL(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	admin := adminConn(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := pgx.Identifier{cfg.Database}.Sanitize()
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	// Runs before testinfra drops the database (cleanups run last registered first).
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "ALTER DATABASE "+db+" ALLOW_CONNECTIONS true") })

	_, err = pgx.Connect(ctx, url)
	var connectErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	if !errors.As(err, &connectErr) || !errors.As(err, &pgErr) || pgErr.Code != "55000" {
		t.Fatalf("connect: %v, want a ConnectError wrapping SQLSTATE 55000", err)
	}
	if !IsUnavailable(err) {
		t.Fatalf("IsUnavailable(%v) = false", err)
	}
}

func TestIsUnavailableClassifies(t *testing.T) {
	t.Parallel()
	pg := func(code string) error {
		return fmt.Errorf("store: %w", &pgconn.PgError{Severity: "FATAL", Code: code})
	}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection failure", pg("08006"), true},
		{"connection does not exist", pg("08003"), true},
		{"admin shutdown", pg("57P01"), true},
		{"crash shutdown", pg("57P02"), true},
		{"cannot connect now", pg("57P03"), true},
		{"too many connections", pg("53300"), true},
		{"syntax error", pg("42601"), false},
		{"unique violation", pg("23505"), false},
		{"serialization failure", pg("40001"), false},
		{"query canceled", pg("57014"), false},
		{"no rows", fmt.Errorf("store: %w", pgx.ErrNoRows), false},
		{"EOF", fmt.Errorf("read: %w", io.EOF), true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"net.ErrClosed", fmt.Errorf("write: %w", net.ErrClosed), true},
		{"conn closed", pgconn.ErrConnClosed, true},
		{"dial", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true},
		{"caller canceled", fmt.Errorf("store: %w", context.Canceled), false},
		{"caller deadline", context.DeadlineExceeded, false},
		{"other", errors.New("boom"), false},
	}
	for _, c := range cases {
		if got := IsUnavailable(c.err); got != c.want {
			t.Errorf("%s: IsUnavailable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
