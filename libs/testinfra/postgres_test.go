package testinfra

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestPostgresGivesEachTestItsOwnMigratedDatabase(t *testing.T) {
	ctx := context.Background()
	a := Postgres(t)
	b := Postgres(t)

	dbA := queryOne[string](t, a, "SELECT current_database()")
	dbB := queryOne[string](t, b, "SELECT current_database()")
	if dbA == dbB || !strings.HasPrefix(dbA, testDBPrefix) {
		t.Fatalf("databases %q and %q: want two distinct %s* databases", dbA, dbB, testDBPrefix)
	}
	// The schema is there (the outbox and its trigger come from the migrations).
	if _, err := a.Exec(ctx, "INSERT INTO clients (name) VALUES ('acme')"); err != nil {
		t.Fatalf("schema missing in fresh database: %v", err)
	}
	if n := queryOne[int](t, b, "SELECT count(*) FROM clients"); n != 0 {
		t.Fatalf("database b sees %d clients written to database a", n)
	}
}

func TestPostgresDropsTheDatabaseAtCleanup(t *testing.T) {
	var name string
	t.Run("inner", func(t *testing.T) {
		name = queryOne[string](t, Postgres(t), "SELECT current_database()")
	})
	if exists := databaseExists(t, name); exists {
		t.Fatalf("database %s still exists after the test's cleanup", name)
	}
}

func TestPostgresEmptyURLHasNoSchema(t *testing.T) {
	pool := OpenPool(t, PostgresEmptyURL(t))
	if n := queryOne[int](t, pool, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"); n != 0 {
		t.Fatalf("empty database has %d tables", n)
	}
}

func TestTemplateIsReusedAndLocked(t *testing.T) {
	ctx := context.Background()
	admin := serverURL(t)
	first, err := templateDatabase(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	// A second process would find the finished template: simulate by forgetting the cached name.
	templateMu.Lock()
	delete(templateNames, admin)
	templateMu.Unlock()
	second, err := templateDatabase(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Fatalf("template rebuilt under a new name: %s then %s", first, second)
	}
	var isTemplate, allowConn bool
	if err := OpenPool(t, admin).QueryRow(ctx, "SELECT datistemplate, datallowconn FROM pg_database WHERE datname = $1", first).Scan(&isTemplate, &allowConn); err != nil {
		t.Fatal(err)
	}
	if !isTemplate || allowConn {
		t.Fatalf("template %s: datistemplate=%v datallowconn=%v, want true/false", first, isTemplate, allowConn)
	}
}

func TestMigrationsHashNamesTheTemplate(t *testing.T) {
	a, err := migrationsHash()
	if err != nil {
		t.Fatal(err)
	}
	b, err := migrationsHash()
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("migrations hash is not deterministic")
	}
}

func TestWithDatabase(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@127.0.0.1:5432/other?sslmode=disable"},
		{"postgresql://u:p@h/db", "postgresql://u:p@h/other"},
		{"postgres://h:5432", "postgres://h:5432/other"},
		{"host=127.0.0.1 dbname=test user=postgres", "host=127.0.0.1 dbname=test user=postgres dbname=other"},
	}
	for _, tt := range tests {
		got, err := withDatabase(tt.in, "other")
		if err != nil || got != tt.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	// The keyword form really selects the later dbname.
	cfg, err := pgx.ParseConfig("host=127.0.0.1 dbname=test user=postgres dbname=other")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Database != "other" {
		t.Fatalf("later dbname ignored: %q", cfg.Database)
	}
}

func TestRedactURL(t *testing.T) {
	if got := redactURL("postgres://u:secret@h/db"); strings.Contains(got, "secret") {
		t.Fatalf("password survived redaction: %s", got)
	}
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	return queryOne[bool](t, OpenPool(t, serverURL(t)), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name)
}

// queryOne returns the single value the query selects, failing the test on any error.
func queryOne[T any](t *testing.T, pool *pgxpool.Pool, query string, args ...any) T {
	t.Helper()
	var v T
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestFindServerExplainsWhatToDo(t *testing.T) {
	t.Setenv(EnvDatabaseURL, "")
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	saved := defaultURL
	defaultURL = "postgres://postgres@127.0.0.1:1/test?sslmode=disable"
	defer func() { defaultURL = saved }()
	_, err := findServer()
	if err == nil {
		t.Fatal("found a server on a closed port")
	}
	for _, want := range []string{EnvDatabaseURL, "127.0.0.1:5432", "Docker", "CREATEDB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%v", want, err)
		}
	}
}
