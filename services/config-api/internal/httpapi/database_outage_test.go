package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/libs/testinfra"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/hosts"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
	"github.com/configsync/configsync/services/config-api/internal/tenants"
	"github.com/configsync/configsync/services/config-api/internal/tokens"
)

// connectError returns the error the store gives when PostgreSQL is not listening: the pgx
// *pgconn.ConnectError of a connection attempt to a local port nothing listens on, wrapped in
// fault.ErrStoreUnavailable as the postgres adapter does.
func connectError(t *testing.T) error {
	t.Helper()
	_, err := pgconn.Connect(context.Background(), testinfra.UnreachablePostgresURL(t))
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("connect to a closed port: %v, want a ConnectError", err)
	}
	return outage(err)
}

// outage wraps a driver error as the store reports an outage.
func outage(err error) error { return fmt.Errorf("%w: %w", fault.ErrStoreUnavailable, err) }

func TestStatusOfDatabaseOutages(t *testing.T) {
	down := connectError(t)
	cases := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"connect error through use cases", fmt.Errorf("configs: write environment labels: %w", fmt.Errorf("begin: %w", down)), 503, "unavailable"},
		{"connection terminated", fmt.Errorf("hosts: get: %w", outage(&pgconn.PgError{Severity: "FATAL", Code: "57P01"})), 503, "unavailable"},
		{"too many connections", fmt.Errorf("tokens: authenticate: %w", outage(&pgconn.PgError{Severity: "FATAL", Code: "53300"})), 503, "unavailable"},
		{"unclassified fault around an outage", &fault.Error{Message: "x", Err: down}, 503, "unavailable"},
		{"query error", fmt.Errorf("hosts: list: %w", &pgconn.PgError{Severity: "ERROR", Code: "42P01"}), 500, "internal"},
		{"no rows, classified", &fault.Error{Kind: fault.NotFound, Message: "host not found", Err: pgx.ErrNoRows}, 404, "not_found"},
		// A fault the use case classified keeps its status, outage underneath or not.
		{"classified dependency failure", fault.ServiceUnavailable("the resolver is unavailable", down), 503, "unavailable"},
		{"classified conflict", &fault.Error{Kind: fault.Conflict, Message: "x", Err: down}, 409, "conflict"},
		{"caller canceled", fmt.Errorf("hosts: list: %w", context.Canceled), 500, "internal"},
	}
	for _, c := range cases {
		if status, code := statusOf(c.err); status != c.status || code != c.code {
			t.Errorf("%s: statusOf = %d %s, want %d %s", c.name, status, code, c.status, c.code)
		}
	}

	// Only a database outage invites a retry after a second; a classified 503 keeps its own message.
	a := New(Services{}, zap.NewNop(), Options{})
	rec := httptest.NewRecorder()
	a.writeError(rec, httptest.NewRequest(http.MethodGet, "/", nil), fault.ServiceUnavailable("the resolver is unavailable", down))
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "" || !strings.Contains(rec.Body.String(), "the resolver is unavailable") {
		t.Fatalf("classified 503: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
}

// downBackend is memBackend with PostgreSQL gone once the token is checked: every tenancy, host and
// config read or write fails with err, as the real store would.
type downBackend struct {
	*memBackend
	err error
}

func (b downBackend) OwnerOf(context.Context, tenancy.Kind, uuid.UUID) (uuid.UUID, bool, error) {
	return uuid.Nil, false, b.err
}

func (b downBackend) Environment(context.Context, uuid.NullUUID, uuid.UUID) (tenants.Environment, error) {
	return tenants.Environment{}, b.err
}

func (b downBackend) CreateHost(context.Context, hosts.Host) (hosts.Host, error) {
	return hosts.Host{}, b.err
}

func (b downBackend) CreateHosts(context.Context, []hosts.Host) ([]hosts.Host, error) {
	return nil, b.err
}

func (b downBackend) Host(context.Context, uuid.NullUUID, uuid.UUID) (hosts.Host, error) {
	return hosts.Host{}, b.err
}

func (b downBackend) Hosts(context.Context, uuid.UUID, uuid.NullUUID, int) ([]hosts.Host, error) {
	return nil, b.err
}

func (b downBackend) PatchLabels(context.Context, uuid.NullUUID, uuid.NullUUID, []uuid.UUID, hosts.LabelPatch,
	func(map[uuid.UUID]selector.Labels) error) ([]uuid.UUID, error) {
	return nil, b.err
}

func (b downBackend) Update(context.Context, uuid.NullUUID, configs.Ref, string, func(configs.Current) (configs.Write, error)) (configs.Record, error) {
	return configs.Record{}, b.err
}

func (b downBackend) EnvironmentConfig(context.Context, uuid.UUID, string) (configs.Record, error) {
	return configs.Record{}, b.err
}

// The database failing inside the use cases (past authentication) reaches the edge as a 503 with
// Retry-After, its cause logged at Warn and kept out of the body.
func TestDatabaseOutageInUseCases(t *testing.T) {
	b := downBackend{memBackend: &memBackend{}, err: connectError(t)}
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	guard := tenancy.NewGuard(b, b, log)
	tenantSvc := tenants.NewService(b, guard)
	hostSvc := hosts.NewService(b, tenantSvc, guard, nil, 0)
	configSvc := configs.NewService(b, tenantSvc, hostSvc, b, guard)
	r := mux.NewRouter()
	New(Services{Tokens: tokens.NewService(b, guard), Tenants: tenantSvc, Hosts: hostSvc, Configs: configSvc}, log, Options{}).Register(r)

	for _, rq := range []struct{ method, path, body string }{
		{"GET", "/api/v1/hosts/" + memHost.String(), ""},
		{"GET", "/api/v1/environments/" + memEnv.String() + "/hosts", ""},
		{"GET", "/api/v1/environments/" + memEnv.String() + "/agent-configs/labels", ""},
		{"POST", "/api/v1/environments/" + memEnv.String() + "/hosts", `{"hostname": "db-1"}`},
		{"POST", "/api/v1/environments/" + memEnv.String() + "/hosts/batch", `{"hosts": [{"hostname": "db-1"}]}`},
		{"PUT", "/api/v1/environments/" + memEnv.String() + "/agent-configs/labels", `{"config_data": {"static": {"team": "ops"}}}`},
	} {
		req := httptest.NewRequest(rq.method, rq.path, strings.NewReader(rq.body))
		req.Header.Set("Authorization", "Bearer "+memAdminToken)
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		body := rec.Body.String()
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" ||
			!strings.Contains(body, `"code":"unavailable"`) || !strings.Contains(body, msgDatabaseUnavailable) {
			t.Errorf("%s %s: %d Retry-After=%q %s", rq.method, rq.path, rec.Code, rec.Header().Get("Retry-After"), body)
		}
		for _, leak := range []string{"connect", "127.0.0.1", "user=", "SQLSTATE"} {
			if strings.Contains(body, leak) {
				t.Errorf("%s %s: body leaks %q: %s", rq.method, rq.path, leak, body)
			}
		}
	}
	warned := logs.FilterMessage("request failed: database unavailable").FilterLevelExact(zapcore.WarnLevel)
	if warned.Len() != 6 {
		t.Errorf("%d outage warnings, want 6", warned.Len())
	}
	for _, e := range warned.All() {
		if cause, _ := e.ContextMap()["error"].(string); !strings.Contains(cause, "failed to connect") {
			t.Errorf("outage logged without its cause: %+v", e.ContextMap())
		}
	}
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 0 {
		t.Errorf("the outage was logged %d times at Error", n)
	}
}
